#pragma once
// Temporary output files that no ending of the process may leave behind.
//
// Every output is written to a temporary file and renamed (AtomicFileWriter, DumpWriter). An
// exception removes it on the way out, but a signal does not unwind: a fault inside HDF5 that
// attnlens-cli turns into exit 3, or a SIGTERM whose cooperative cancel does not arrive in time.
// So each writer registers its temporary file for as long as it exists, and those handlers call
// removeRegisteredTemporaryFiles(), which is async-signal-safe (fixed slots, unlink only).
#include <string>

namespace attnlens {

// Registers `path` on construction and releases it on destruction (after the rename or the
// removal). At most kSlots files at once are registered; beyond that a file is not tracked (the
// writers of this project hold at most two at a time).
class TemporaryFileRegistration {
public:
    static constexpr int kSlots = 16;
    TemporaryFileRegistration() = default;
    explicit TemporaryFileRegistration(const std::string& path);
    ~TemporaryFileRegistration() { release(); }
    TemporaryFileRegistration(const TemporaryFileRegistration&) = delete;
    TemporaryFileRegistration& operator=(const TemporaryFileRegistration&) = delete;
    TemporaryFileRegistration(TemporaryFileRegistration&& other) noexcept : slot_(other.slot_) { other.slot_ = -1; }
    TemporaryFileRegistration& operator=(TemporaryFileRegistration&& other) noexcept;

    // Forgets the file (it was renamed or removed); idempotent.
    void release() noexcept;
    bool registered() const { return slot_ >= 0; }

private:
    int slot_ = -1;
};

// Unlinks every registered temporary file. Async-signal-safe; returns how many were removed.
int removeRegisteredTemporaryFiles() noexcept;

}  // namespace attnlens
