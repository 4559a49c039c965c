#include "attnlens/io/temporary_files.h"

#include <unistd.h>

#include <atomic>
#include <cstring>

namespace attnlens {

namespace {

enum SlotState : int { kFree = 0, kFilling = 1, kHeld = 2 };

struct Slot {
    std::atomic<int> state{kFree};
    char path[4096] = {};
};

Slot gSlots[TemporaryFileRegistration::kSlots];

static_assert(std::atomic<int>::is_always_lock_free, "the signal handlers read the slots' states");

}  // namespace

TemporaryFileRegistration::TemporaryFileRegistration(const std::string& path) {
    if (path.empty() || path.size() >= sizeof gSlots[0].path) return;
    for (int i = 0; i < kSlots; ++i) {
        int expected = kFree;
        if (!gSlots[i].state.compare_exchange_strong(expected, kFilling)) continue;
        std::memcpy(gSlots[i].path, path.c_str(), path.size() + 1);
        gSlots[i].state.store(kHeld, std::memory_order_release);
        slot_ = i;
        return;
    }
}

TemporaryFileRegistration& TemporaryFileRegistration::operator=(TemporaryFileRegistration&& other) noexcept {
    if (this != &other) {
        release();
        slot_ = other.slot_;
        other.slot_ = -1;
    }
    return *this;
}

void TemporaryFileRegistration::release() noexcept {
    if (slot_ < 0) return;
    gSlots[slot_].state.store(kFree, std::memory_order_release);
    slot_ = -1;
}

int removeRegisteredTemporaryFiles() noexcept {
    int removed = 0;
    for (Slot& slot : gSlots) {
        if (slot.state.load(std::memory_order_acquire) != kHeld) continue;
        if (::unlink(slot.path) == 0) ++removed;
    }
    return removed;
}

}  // namespace attnlens
