#pragma once
// BLAS and LAPACK (Debian's OpenBLAS and LAPACKE), loaded on first use with one thread.
//
// OpenBLAS starts its thread pool in its library constructor: one thread per processor less one,
// each with a stack and a 128 MiB buffer of address space, and under `ulimit -v` it can hang
// retrying a failed buffer. Linked into the programs, that constructor runs before main() in
// every process, also for `--version` or `inspect`, which need no BLAS. So the programs do not
// link it: the first call of library() dlopens OpenBLAS and LAPACKE, with OPENBLAS_NUM_THREADS set
// to the count setThreads asked for before (the user's value is put back afterwards), and
// resolves the few routines the engine calls. attnlens-cli asks for one thread at start and its
// analyses raise the count where it pays (ScopedBlasThreads, analysis/blas_threads.h); the
// desktop program and the Python module leave OpenBLAS its own choice, as a linked OpenBLAS had.
// In a process that loaded OpenBLAS already (numpy beside the Python module) the loaded copy is
// used as it is.
//
// OpenBLAS picks its kernels by the processor's model number, and Debian 12's OpenBLAS 0.3.21
// knows no model newer than itself: on an Intel Emerald Rapids (family 6, model 207) it falls back
// to its Prescott kernels (SSE3), whose DGEMM is 2.5x slower there (one rollout at N = 3137: 2.37
// against 0.96 s). Unless the user named a core (OPENBLAS_CORETYPE), library() names the one
// OpenBLAS picks itself on the models it knows, from the processor's features
// (coreForThisProcessor); the variable is put back afterwards.
#include <cblas.h>
#include <lapacke.h>

#include <string>

namespace attnlens::blas {

struct Library {
    decltype(&::cblas_dgemm) dgemm = nullptr;
    decltype(&::cblas_dsyrk) dsyrk = nullptr;
    decltype(&::LAPACKE_dgesdd) dgesdd = nullptr;
    decltype(&::LAPACKE_dgesdd_work) dgesddWork = nullptr;
    decltype(&::LAPACKE_dgeqrf) dgeqrf = nullptr;
    int (*getThreads)() = nullptr;
    void (*setThreads)(int) = nullptr;
    char* (*coreName)() = nullptr;  // openblas_get_corename: the kernels in use ("SkylakeX")
};

// "SkylakeX" on Intel processors with AVX-512 (F, CD, BW, DQ, VL), "Haswell" on any with AVX2 and
// FMA, nullptr otherwise (OpenBLAS's own detection then).
const char* coreForThisProcessor();

// Who chose the kernels of the loaded OpenBLAS.
enum class CoreChoice { NotLoaded, User, AttnLens, OpenBlas, AlreadyLoaded };
CoreChoice coreChoice();
// "OpenBLAS SkylakeX (chosen by AttnLens from the processor's features)", or "not loaded".
std::string coreDescription();

// Loads the libraries on the first call (thread-safe); std::runtime_error naming the library and
// dlerror()'s reason when one cannot be loaded.
const Library& library();
// Whether library() has loaded them (nothing is loaded by asking).
bool loaded();
// The thread count OpenBLAS would choose on its own: OPENBLAS_NUM_THREADS, else GOTO_NUM_THREADS,
// else OMP_NUM_THREADS, else one per processor (as OpenBLAS reads them); in a process that loaded
// OpenBLAS before us, the count it chose. The most BLAS threads an analysis uses.
int defaultThreads();
// The count in effect: OpenBLAS's once loaded, else the count it will be given when it is
// (defaultThreads() unless setThreads said otherwise).
int threads();
// Sets the count (at least 1) now when loaded, else at loading: no library is loaded for it, and
// a count set before loading is the number of threads OpenBLAS starts.
void setThreads(int threads);

}  // namespace attnlens::blas
