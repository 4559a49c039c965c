#pragma once
// OpenBLAS's thread count, one setting for the whole process. OpenBLAS is loaded on first use
// with one thread (attnlens/blas.h: the programs do not link it, so a command that needs no BLAS
// never starts its threads and nothing is executed twice); code that wants BLAS threads asks for
// them with a ScopedBlasThreads (OpenBLAS's pthread server starts more threads when the count is
// raised).

namespace attnlens {

// The count OpenBLAS would choose on its own (OPENBLAS_NUM_THREADS, GOTO_NUM_THREADS or
// OMP_NUM_THREADS, else one per processor): the most BLAS threads an analysis uses.
int defaultBlasThreads();
// The count in effect now (set at loading when OpenBLAS is not loaded yet).
int currentBlasThreads();

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
