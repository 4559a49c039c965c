#pragma once
// An alternate signal stack for the calling thread while alive.
//
// attnlens-cli turns a fault inside HDF5 into exit 3 (removing its temporary files). One kind of
// fault is a stack overflow (HDF5 recursing through a chunk B-tree that loops): the handler cannot
// run on the overflowed stack, so every thread that reads a dump (the main thread, the analysis
// workers) installs one of these. The handler is installed with SA_ONSTACK; a thread without an
// alternate stack just uses its own.
#include <vector>

namespace attnlens {

class AlternateSignalStack {
public:
    AlternateSignalStack();
    ~AlternateSignalStack();
    AlternateSignalStack(const AlternateSignalStack&) = delete;
    AlternateSignalStack& operator=(const AlternateSignalStack&) = delete;

private:
    std::vector<char> stack_;
    bool installed_ = false;
};

}  // namespace attnlens
