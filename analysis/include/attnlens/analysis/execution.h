#pragma once
// The thread budget, defined once for every front end: how many processors there are, and what a
// requested count of 0 ("as many as there are processors") means.
namespace attnlens {

// std::thread::hardware_concurrency(), at least 1.
int processorCount();
// `requested` when it is positive, else processorCount(): the one reading of "0 = processors"
// (AnalyzeRequest::threads, LocalityRequest::threads, MagnitudeOptions::threads, --threads).
int threadsOrProcessors(int requested);

}  // namespace attnlens
