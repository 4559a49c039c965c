#pragma once
// OpenBLAS's thread count, one setting for the whole process.
//
// OpenBLAS (Debian's libopenblas0-pthread) starts its thread pool in its library constructor,
// before main(): one thread per processor less one, each with a thread stack and a 128 MiB
// buffer of address space. A command that needs no BLAS (--version, inspect, synth, merge) should
// not pay for them, and under `ulimit -v` they can hang the program: OpenBLAS retries a buffer
// allocation that failed for ever, and waits for that thread at exit. So the CLI restarts itself
// with one BLAS thread (restartWithOneBlasThread), and code that wants BLAS threads asks for them
// explicitly with a ScopedBlasThreads (OpenBLAS's pthread server starts more threads when the
// count is raised).

namespace attnlens {

// The count OpenBLAS chose when it was loaded (OPENBLAS_NUM_THREADS, GOTO_NUM_THREADS or
// OMP_NUM_THREADS, else one per processor), also in a process that restartWithOneBlasThread
// started with one thread: the most BLAS threads an analysis uses.
int defaultBlasThreads();
// The count in effect now (openblas_get_num_threads).
int currentBlasThreads();

// For main(), right after runOpenCheckChildIfRequested and before any other thread exists: when
// OpenBLAS started more than one thread, executes this program (/proc/self/exe) again with the
// same argv and OPENBLAS_NUM_THREADS=1 (ATTNLENS_BLAS_RESTART carries the count OpenBLAS chose and
// the variable's old value; it also stops a second restart). In the restarted process it puts the
// environment back as the user had it and returns; it also returns when no restart is needed or
// exec fails. Costs one more program start (about 30 ms).
void restartWithOneBlasThread(char** argv);

// Sets OpenBLAS's thread count (at least 1) while it lives; its destructor restores the count
// before it. Guards live on several threads at once (the desktop program runs two analyses): the
// count in effect is then the smallest any live guard asks for, and the last guard to end
// restores the count from before the first one.
class ScopedBlasThreads {
public:
    explicit ScopedBlasThreads(int threads);
    ~ScopedBlasThreads();
    ScopedBlasThreads(const ScopedBlasThreads&) = delete;
    ScopedBlasThreads& operator=(const ScopedBlasThreads&) = delete;
    int threads() const { return threads_; }

private:
    int threads_;
};

}  // namespace attnlens
