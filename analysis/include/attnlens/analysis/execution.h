#pragma once
// How a long computation runs, defined once for every front end: on how many threads and within
// how much of the memory (ThreadBudget), and how it is stopped (CancelToken, core/cancel.h).
// Progress callbacks only report; every long call takes a CancelToken.
#include "attnlens/io/cancel.h"

namespace attnlens {

// std::thread::hardware_concurrency(), at least 1.
int processorCount();

// The part of the machine one computation may use. A front end that runs one computation at a
// time gives it the whole machine (ThreadBudget(n), n = 0: every processor); one that runs several
// at once gives each a share (shareOf), so that together they stay within the processors and the
// memory: the desktop program runs two jobs at a time and gives each half, where each used to plan
// as if it were alone. The one type of AnalyzeRequest::threads, LocalityRequest::threads,
// RolloutRequest::threads, MagnitudeOptions::threads and rolloutRow's budget; the memory plans
// (planMemory, planLocalityMemory) plan within memoryFraction() of what the process may use.
class ThreadBudget {
public:
    // Implicit, so that a plain count reads as before (request.threads = 4); 0: the processors.
    ThreadBudget(int threads = 0) : threads_(threads) {}  // NOLINT(google-explicit-constructor)
    // One of `parts` equal shares of the machine: processorCount() / parts threads (at least 1)
    // and 1 / parts of the memory.
    static ThreadBudget shareOf(int parts);
    // This share with an explicit thread count (0: the share's processors).
    ThreadBudget withThreads(int threads) const;

    int requested() const { return threads_; }  // as asked: 0 means the share's processors
    int parts() const { return parts_; }
    int processors() const;  // the processors of this share: processorCount() / parts, at least 1
    int count() const { return threads_ > 0 ? threads_ : processors(); }
    double memoryFraction() const { return 1.0 / double(parts_); }

private:
    int threads_ = 0;
    int parts_ = 1;
};

}  // namespace attnlens
