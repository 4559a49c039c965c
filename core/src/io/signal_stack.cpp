#include "attnlens/io/signal_stack.h"

#include <signal.h>

#include <algorithm>

namespace attnlens {

AlternateSignalStack::AlternateSignalStack() {
    stack_t current{};
    // Nested (a worker that runs on the calling thread): the outer one stays.
    if (::sigaltstack(nullptr, &current) == 0 && (current.ss_flags & SS_DISABLE) == 0) return;
    stack_.resize(std::size_t(std::max<long>(SIGSTKSZ, 64 * 1024)));
    stack_t stack{};
    stack.ss_sp = stack_.data();
    stack.ss_size = stack_.size();
    installed_ = ::sigaltstack(&stack, nullptr) == 0;
}

AlternateSignalStack::~AlternateSignalStack() {
    if (!installed_) return;
    stack_t off{};
    off.ss_flags = SS_DISABLE;
    ::sigaltstack(&off, nullptr);
}

}  // namespace attnlens
