#include "parallel.h"

#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "attnlens/analysis/execution.h"
#include "attnlens/io/signal_stack.h"

namespace attnlens {

int processorCount() { return int(std::max(1u, std::thread::hardware_concurrency())); }

ThreadBudget ThreadBudget::shareOf(int parts) {
    ThreadBudget b;
    b.parts_ = std::max(1, parts);
    return b;
}

ThreadBudget ThreadBudget::withThreads(int threads) const {
    ThreadBudget b = *this;
    b.threads_ = threads;
    return b;
}

int ThreadBudget::processors() const { return std::max(1, processorCount() / parts_); }

}  // namespace attnlens

namespace attnlens::detail {

void runOnThreads(int threads, const std::function<void()>& work) {
    std::mutex failureMutex;
    std::exception_ptr failure;
    auto run = [&] {
        const AlternateSignalStack faultStack;  // signal_stack.h: a fault handler must run on it
        try {
            work();
        } catch (...) {
            const std::lock_guard lock(failureMutex);
            if (!failure) failure = std::current_exception();
        }
    };
    std::vector<std::thread> pool;
    pool.reserve(std::size_t(std::max(0, threads - 1)));
    for (int t = 1; t < threads; ++t) {
        try {
            pool.emplace_back(run);
        } catch (const std::system_error&) {
            break;  // the system starts no more threads: the ones running share the work
        }
    }
    run();
    for (auto& th : pool) th.join();
    if (failure) std::rethrow_exception(failure);
}

}  // namespace attnlens::detail
