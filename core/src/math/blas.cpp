#include "attnlens/math/blas.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

namespace attnlens::blas {
namespace {

constexpr const char* kThreadsVariable = "OPENBLAS_NUM_THREADS";
constexpr const char* kCoreVariable = "OPENBLAS_CORETYPE";
// Debian's names (libopenblas0-pthread, liblapacke): the runtime packages the README installs.
constexpr const char* kOpenBlas = "libopenblas.so.0";
constexpr const char* kLapacke = "liblapacke.so.3";

std::once_flag gLoadOnce;
Library gLibrary;
std::mutex gCountMutex;
bool gLoaded = false;
int gPendingThreads = 0;  // the count OpenBLAS is given when it is loaded; 0: its own choice
int gDefaultThreads = 0;  // 0 until computed

CoreChoice gCoreChoice = CoreChoice::NotLoaded;

// Sets `name` to `value` (nullptr: unsets it) until the guard ends, then puts the old value back:
// OpenBLAS reads its variables in its constructor, and child processes must see the user's.
class ScopedVariable {
public:
    ScopedVariable(const char* name, const char* value) : name_(name) {
        if (const char* old = std::getenv(name)) saved_ = old;
        if (value) ::setenv(name, value, 1);
    }
    ~ScopedVariable() { saved_ ? (void)::setenv(name_, saved_->c_str(), 1) : (void)::unsetenv(name_); }
    ScopedVariable(const ScopedVariable&) = delete;
    ScopedVariable& operator=(const ScopedVariable&) = delete;

private:
    const char* name_;
    std::optional<std::string> saved_;
};

int positiveVariable(const char* name) {
    const char* v = std::getenv(name);
    if (!v || !*v) return 0;
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    return end != v && n > 0 && n < 1 << 16 ? int(n) : 0;
}

int threadsFromEnvironment() {
    for (const char* name : {kThreadsVariable, "GOTO_NUM_THREADS", "OMP_NUM_THREADS"})
        if (const int n = positiveVariable(name)) return n;
    return std::max(1, int(std::thread::hardware_concurrency()));
}

template <class F>
F symbol(void* handle, const char* library, const char* name) {
    void* s = ::dlsym(handle, name);
    if (!s) throw std::runtime_error(std::string("cannot find ") + name + " in " + library);
    return reinterpret_cast<F>(s);
}

void* open(const char* name) {
    void* h = ::dlopen(name, RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        const char* why = ::dlerror();
        throw std::runtime_error(std::string("cannot load ") + name + " (BLAS and LAPACK, packages libopenblas0 " +
                                 "and liblapacke): " + (why ? why : "unknown reason"));
    }
    return h;
}

void load() {
    const bool already = ::dlopen(kOpenBlas, RTLD_NOW | RTLD_NOLOAD) != nullptr;
    void* openblas = nullptr;
    void* lapacke = nullptr;
    CoreChoice choice = CoreChoice::AlreadyLoaded;
    if (already) {
        openblas = open(kOpenBlas);
        lapacke = open(kLapacke);
    } else {
        int wanted = 0;
        {
            std::lock_guard lock(gCountMutex);
            wanted = gPendingThreads;
        }
        // OpenBLAS reads the variables in its constructor: it starts that many threads at once, and
        // picks its kernels.
        const std::string threads = std::to_string(wanted);
        const ScopedVariable threadCount(kThreadsVariable, wanted > 0 ? threads.c_str() : nullptr);
        const char* user = std::getenv(kCoreVariable);
        const bool userChose = user != nullptr && *user != '\0';
        const char* core = userChose ? nullptr : coreForThisProcessor();
        choice = userChose ? CoreChoice::User : core != nullptr ? CoreChoice::AttnLens : CoreChoice::OpenBlas;
        const ScopedVariable coreType(kCoreVariable, core);
        openblas = open(kOpenBlas);
        lapacke = open(kLapacke);
    }
    Library lib;
    lib.dgemm = symbol<decltype(lib.dgemm)>(openblas, kOpenBlas, "cblas_dgemm");
    lib.dsyrk = symbol<decltype(lib.dsyrk)>(openblas, kOpenBlas, "cblas_dsyrk");
    lib.getThreads = symbol<decltype(lib.getThreads)>(openblas, kOpenBlas, "openblas_get_num_threads");
    lib.setThreads = symbol<decltype(lib.setThreads)>(openblas, kOpenBlas, "openblas_set_num_threads");
    lib.coreName = symbol<decltype(lib.coreName)>(openblas, kOpenBlas, "openblas_get_corename");
    lib.dgesdd = symbol<decltype(lib.dgesdd)>(lapacke, kLapacke, "LAPACKE_dgesdd");
    lib.dgesddWork = symbol<decltype(lib.dgesddWork)>(lapacke, kLapacke, "LAPACKE_dgesdd_work");
    lib.dgeqrf = symbol<decltype(lib.dgeqrf)>(lapacke, kLapacke, "LAPACKE_dgeqrf");
    std::lock_guard lock(gCountMutex);
    if (already) {
        // Someone else's copy (numpy's): its count stays as its owner set it.
        if (gDefaultThreads == 0) gDefaultThreads = std::max(1, lib.getThreads());
        gPendingThreads = std::max(1, lib.getThreads());
    } else if (gPendingThreads > 0 && lib.getThreads() != gPendingThreads) {
        lib.setThreads(gPendingThreads);
    }
    gLibrary = lib;
    gLoaded = true;
    gCoreChoice = choice;
}

}  // namespace

const char* coreForThisProcessor() {
#if !defined(__x86_64__) && !defined(__i386__)
    return nullptr;  // OpenBLAS's own detection elsewhere
#else
    __builtin_cpu_init();
    // GCC's checks include the operating system's support of the registers (XGETBV).
    if (__builtin_cpu_is("intel") && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
    return nullptr;
#endif
}

CoreChoice coreChoice() {
    std::lock_guard lock(gCountMutex);
    return gCoreChoice;
}

std::string coreDescription() {
    if (!loaded()) return "not loaded";
    const char* name = library().coreName();
    std::string text = "OpenBLAS " + std::string(name != nullptr ? name : "?");
    switch (coreChoice()) {
        case CoreChoice::User:
            return text + " (OPENBLAS_CORETYPE)";
        case CoreChoice::AttnLens:
            return text + " (chosen by AttnLens from the processor's features)";
        case CoreChoice::OpenBlas:
            return text + " (OpenBLAS's own detection)";
        case CoreChoice::AlreadyLoaded:
            return text + " (the copy the process had loaded)";
        case CoreChoice::NotLoaded:
            break;
    }
    return text;
}

const Library& library() {
    std::call_once(gLoadOnce, load);
    return gLibrary;
}

bool loaded() {
    std::lock_guard lock(gCountMutex);
    return gLoaded;
}

int defaultThreads() {
    // A copy loaded by someone else chose its count already: that is the default. (The probe
    // takes a reference to a loaded copy; it is given back at once.)
    if (!loaded()) {
        if (void* probe = ::dlopen(kOpenBlas, RTLD_NOW | RTLD_NOLOAD)) {
            ::dlclose(probe);
            library();
        }
    }
    std::lock_guard lock(gCountMutex);
    if (gDefaultThreads == 0) gDefaultThreads = threadsFromEnvironment();
    return gDefaultThreads;
}

int threads() {
    {
        std::lock_guard lock(gCountMutex);
        if (gLoaded) return gLibrary.getThreads();
        if (gPendingThreads > 0) return gPendingThreads;
    }
    return defaultThreads();
}

void setThreads(int threads) {
    threads = std::max(1, threads);
    std::lock_guard lock(gCountMutex);
    gPendingThreads = threads;
    if (gLoaded && gLibrary.getThreads() != threads) gLibrary.setThreads(threads);
}

}  // namespace attnlens::blas
