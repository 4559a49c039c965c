#pragma once
// The one way a long computation is stopped: a CancelToken, polled between steps (a head, a block,
// an image), that throws Error(Cancelled) once its owner has asked. Every long library call takes
// one (analyzeDump, localityOverDump, sweepDump, rolloutRow, rolloutOverDump, sha256File); progress
// callbacks only report. The owner keeps a std::atomic<bool>: the CLI's signal handlers set it (a
// lock-free atomic store is async-signal-safe, where std::stop_source's request_stop is not
// promised to be), the desktop program's Cancel sets it, the Python module sets it on
// KeyboardInterrupt.
#include <atomic>
#include <string>

#include "attnlens/io/error.h"

namespace attnlens {

class CancelToken {
public:
    CancelToken() = default;  // never cancelled
    // Implicit, so that a call may pass the owner's flag (&flag) as it is.
    CancelToken(const std::atomic<bool>* flag) : flag_(flag) {}  // NOLINT(google-explicit-constructor)
    bool requested() const noexcept { return flag_ != nullptr && flag_->load(std::memory_order_relaxed); }
    // Error(Cancelled, "<what> cancelled") when requested.
    void throwIfRequested(const std::string& what) const {
        if (requested()) throw Error(ErrorKind::Cancelled, what + " cancelled");
    }

private:
    const std::atomic<bool>* flag_ = nullptr;
};

}  // namespace attnlens
