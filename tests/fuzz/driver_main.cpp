// Standalone engine for the fuzz target (tests/fuzz/fuzz_dump_reader.cpp) where libFuzzer is not
// available, e.g. the GCC dev build that CI runs. It understands a subset of libFuzzer's flags:
//
//   fuzz_dump_reader [-runs=N] [-seed=S] [-max_total_time=SEC] [-timeout=SEC] [-rss_limit_mb=MB]
//                    [-max_len=BYTES] [-artifact_prefix=PATH] [-fail_on_hdf5=0|1] FILE|DIR ...
//
// Without -runs (or -runs=0) every FILE (and every file in each DIR) is replayed once and its
// outcome printed. With -runs=N the files are the seed corpus: they are replayed, then N inputs
// made from them by byte/bit flips, "interesting" integers, small additions, truncation, range
// erase/insert/copy, splices of two seeds, and structure-aware changes to HDF5's B-tree nodes, heaps
// and chunk indexes (mutateStructure). Mutated input i depends only on -seed, i and the
// seeds, so a run is reproducible and a finding can be regenerated.
//
// Inputs run in a forked child that runs input after input; the parent watches it. When the child
// dies (signal), stops making progress for -timeout seconds (hang: the parent interrupts it so it
// prints its stack) or grows beyond -rss_limit_mb, the parent records a finding, saves the input
// under -artifact_prefix and starts a new child at the next input. Findings are classified:
//   (a) in our code: a crash, hang or runaway memory whose innermost non-system frame is not in
//       libhdf5, or leaked HDF5 identifiers;
//   (b) inside libhdf5: the innermost non-system frame is in libhdf5 (HDF5 1.10 itself crashes or
//       loops on some damaged metadata);
//   (c) an exception other than attnlens::Error escaped the reader.
// Exit status: 0 no finding of class (a) or (c); 1 at least one; 2 usage; 3 only (b) findings and
// -fail_on_hdf5=1. Heap blocks are filled with 0xbe when allocated and freed (mallopt M_PERTURB;
// ATTNLENS_FUZZ_NO_PERTURB=1 turns it off) so that findings reproduce from the saved input alone.
#include <dirent.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <malloc.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <ucontext.h>
#include <unistd.h>

#include <cxxabi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "attnlens/dump/dump.h"
#include "fuzz_target.h"

namespace {

using attnlens::fuzz::Stats;

enum Cause : int { kNone = 0, kSignal = 1, kInProcess = 2, kHang = 3, kMemory = 4 };

// One page shared between the parent and the child that runs the inputs.
struct Shared {
    std::atomic<std::uint64_t> current;  // index of the input the child is running
    std::atomic<std::uint64_t> next;     // index of the first input not yet finished
    std::atomic<int> stop;               // parent -> child: finish the current input and exit
    std::atomic<int> cause;
    int signal;
    int lockHeld;
    char inProcessClass;
    char stage[128];
    char module[256];  // object file of the innermost frame outside the C/C++ runtime and zlib
    char symbol[256];
    Stats stats;  // the child's counters, after its last finished input
};

Shared* shared = nullptr;

struct Options {
    std::uint64_t runs = 0;
    std::uint64_t seed = 1;
    double maxTotalTime = 0;  // 0: no limit
    double timeout = 10;
    std::uint64_t rssLimitMb = 2048;
    std::size_t maxLen = 1 << 20;
    std::string artifactPrefix;  // "": save findings only when fuzzing (then "./")
    bool failOnHdf5 = false;
    std::vector<std::string> paths;
};

// A structure of the latest HDF5 format whose last 4 bytes are a Jenkins lookup3 checksum of the
// bytes before them: [start, end) is checked, end..end+4 holds the checksum.
struct Checksummed {
    std::size_t start, end;
};

struct Input {
    std::string name;
    std::vector<std::uint8_t> bytes;
    std::vector<Checksummed> checksummed;  // found when the seed is loaded (findChecksummed)
};
std::vector<Input> seeds;
Options options;

// ---------------------------------------------------------------------------------------------
// Mutations

std::uint64_t splitmix(std::uint64_t& s) {
    std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

struct Rng {
    std::uint64_t s;
    std::uint64_t operator()() { return splitmix(s); }
    std::size_t below(std::size_t n) { return n ? std::size_t((*this)() % n) : 0; }
};

// Structure-aware: one field of one of HDF5's own structures, found by its signature. Version-1
// B-tree nodes ("TREE": chunk indexes and group indexes) get a child pointer aimed at the node
// itself (a loop), at another structure or out of the file, or a damaged level, entry count or
// chunk key (chunk size, filter mask); local and global heaps, symbol nodes and the headers and
// blocks of the latest format's chunk indexes (fixed and extensible arrays, version-2 B-trees,
// whose checksums HDF5 verifies) get an address or size field replaced. Returns false when the
// input holds no structure.
// HDF5's H5_checksum_lookup3: Bob Jenkins' lookup3 hashlittle over bytes, initial value 0.
std::uint32_t lookup3(const std::uint8_t* k, std::size_t length) {
    const auto rot = [](std::uint32_t x, int r) { return (x << r) | (x >> (32 - r)); };
    std::uint32_t a, b, c;
    a = b = c = 0xdeadbeefu + std::uint32_t(length);
    const auto word = [&](std::size_t i, std::size_t n) {
        std::uint32_t w = 0;
        for (std::size_t j = 0; j < n; ++j) w |= std::uint32_t(k[i + j]) << (8 * j);
        return w;
    };
    while (length > 12) {
        a += word(0, 4);
        b += word(4, 4);
        c += word(8, 4);
        a -= c, a ^= rot(c, 4), c += b;
        b -= a, b ^= rot(a, 6), a += c;
        c -= b, c ^= rot(b, 8), b += a;
        a -= c, a ^= rot(c, 16), c += b;
        b -= a, b ^= rot(a, 19), a += c;
        c -= b, c ^= rot(b, 4), b += a;
        length -= 12;
        k += 12;
    }
    if (length == 0) return c;
    // The tail: bytes 0-3 into a, 4-7 into b, 8-11 into c.
    a += word(0, std::min<std::size_t>(length, 4));
    if (length > 4) b += word(4, std::min<std::size_t>(length - 4, 4));
    if (length > 8) c += word(8, length - 8);
    c ^= b, c -= rot(b, 14);
    a ^= c, a -= rot(c, 11);
    b ^= a, b -= rot(a, 25);
    c ^= b, c -= rot(b, 16);
    a ^= c, a -= rot(c, 4);
    b ^= a, b -= rot(a, 14);
    c ^= b, c -= rot(b, 24);
    return c;
}

std::uint32_t storedU32(const std::vector<std::uint8_t>& b, std::size_t at) {
    return std::uint32_t(b[at]) | std::uint32_t(b[at + 1]) << 8 | std::uint32_t(b[at + 2]) << 16 |
           std::uint32_t(b[at + 3]) << 24;
}

// The checksummed structures of a seed: the version 2/3 superblock and object headers (their sizes
// parsed), and the other signed structures (chunk indexes, fractal heaps, free-space and shared
// message tables, continuation chunks) by looking for the length whose checksum follows it (up to
// 4 KiB; a wrong length matches with probability 2^-32 per try).
std::vector<Checksummed> findChecksummed(const std::vector<std::uint8_t>& b) {
    std::vector<Checksummed> out;
    const auto matches = [&](std::size_t start, std::size_t end) {
        return end + 4 <= b.size() && end > start && lookup3(b.data() + start, end - start) == storedU32(b, end);
    };
    static const std::uint8_t superblock[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    static const char* const searched[] = {"OCHK", "BTHD", "BTIN", "BTLF", "FAHD", "FADB", "EAHD", "EAIB", "EASB",
                                           "EADB", "FRHP", "FHDB", "FHIB", "FSHD", "FSSE", "SMTB", "SMLI"};
    for (std::size_t at = 0; at + 8 <= b.size(); ++at) {
        if (std::memcmp(b.data() + at, superblock, 8) == 0 && at + 12 <= b.size() && b[at + 8] >= 2) {
            const std::size_t end = at + 12 + 4 * std::size_t(b[at + 9]);  // 4 addresses of the offset size
            if (matches(at, end)) out.push_back({at, end});
        } else if (std::memcmp(b.data() + at, "OHDR", 4) == 0) {
            const std::uint8_t flags = b[at + 5];
            std::size_t pos = at + 6 + ((flags & 0x20) ? 16 : 0) + ((flags & 0x10) ? 4 : 0);
            const std::size_t width = std::size_t(1) << (flags & 3);
            if (pos + width > b.size()) continue;
            std::uint64_t chunk = 0;
            for (std::size_t i = 0; i < width; ++i) chunk |= std::uint64_t(b[pos + i]) << (8 * i);
            if (chunk < b.size() && matches(at, pos + width + std::size_t(chunk)))
                out.push_back({at, pos + width + std::size_t(chunk)});
        } else {
            for (const char* signature : searched) {
                if (std::memcmp(b.data() + at, signature, 4) != 0) continue;
                for (std::size_t end = at + 8; end + 4 <= b.size() && end <= at + 4096; ++end)
                    if (matches(at, end)) {
                        out.push_back({at, end});
                        break;
                    }
            }
        }
    }
    return out;
}

// Rewrites the checksum of every structure of `seed` whose bytes the mutations changed, so that
// HDF5 reads on into the changed fields instead of stopping at "checksum mismatch". Only when the
// mutations kept the input's length (the structures are where the seed has them).
void recomputeChecksums(std::vector<std::uint8_t>& b, const Input& seed) {
    if (b.size() != seed.bytes.size()) return;
    for (const Checksummed& c : seed.checksummed) {
        if (std::memcmp(b.data() + c.start, seed.bytes.data() + c.start, c.end - c.start) == 0) continue;
        const std::uint32_t sum = lookup3(b.data() + c.start, c.end - c.start);
        for (int i = 0; i < 4; ++i) b[c.end + std::size_t(i)] = std::uint8_t(sum >> (8 * i));
    }
}

bool mutateStructure(std::vector<std::uint8_t>& b, Rng& rng) {
    static const char* const signatures[] = {"TREE", "HEAP", "GCOL", "SNOD", "BTHD", "BTIN", "BTLF", "FAHD",
                                             "FADB", "EAHD", "EAIB", "EASB", "EADB", "OHDR", "FRHP", "FHDB"};
    std::vector<std::pair<std::size_t, int>> found;  // offset, signature
    for (std::size_t at = 0; at + 4 <= b.size(); ++at)
        for (int s = 0; s < int(std::size(signatures)); ++s)
            if (std::memcmp(b.data() + at, signatures[s], 4) == 0) found.emplace_back(at, s);
    if (found.empty()) return false;
    const auto [at, kind] = found[rng.below(found.size())];
    const auto put = [&](std::size_t offset, std::uint64_t value, std::size_t width) {
        if (offset + width > b.size()) return;
        for (std::size_t i = 0; i < width; ++i) b[offset + i] = std::uint8_t(value >> (8 * i));
    };
    const auto address = [&]() -> std::uint64_t {
        switch (rng.below(5)) {
            case 0:
                return at;  // the structure itself: a loop
            case 1:
                return found[rng.below(found.size())].first;  // another structure
            case 2:
                return b.size() + rng.below(1u << 20);  // past the end
            case 3:
                return ~0ull;  // HDF5's undefined address
            default:
                return rng.below(b.size() + 1);
        }
    };
    if (std::strcmp(signatures[kind], "TREE") == 0) {
        const bool chunks = at + 4 < b.size() && b[at + 4] == 1;
        // Chunk keys: size, filter mask, one offset per dimension and one for the element.
        const std::size_t rank = 1 + rng.below(5);
        const std::size_t key = chunks ? 8 + 8 * (rank + 1) : 8;
        const std::size_t entries = at + 8 <= b.size() ? std::size_t(b[at + 6] | (b[at + 7] << 8)) : 0;
        const std::size_t entry = rng.below(std::max<std::size_t>(entries, 1));
        switch (rng.below(5)) {
            case 0:
                put(at + 5, rng.below(4), 1);  // level
                break;
            case 1:
                put(at + 6, rng.below(2) ? rng.below(70) : 0xffff, 2);  // entries used
                break;
            case 2:
                put(at + 8 + 8 * rng.below(2), address(), 8);  // left or right sibling
                break;
            case 3:
                if (chunks) {  // the chunk's stored size or filter mask in a key
                    put(at + 24 + entry * (key + 8) + 4 * rng.below(2),
                        rng.below(2) ? rng.below(1u << 24) : 0xffffffffu, 4);
                    break;
                }
                [[fallthrough]];
            default:
                put(at + 24 + entry * (key + 8) + key, address(), 8);  // a child
                if (rng.below(2)) put(at + 5, 1 + rng.below(2), 1);    // ... of an inner node
                break;
        }
        return true;
    }
    // Other structures: a field in their first 48 bytes (versions, sizes, addresses).
    const std::size_t field = at + 4 + rng.below(44);
    if (rng.below(2))
        put(field, address(), 8);
    else
        put(field, rng.below(2) ? rng.below(256) : ~0ull, std::size_t(1) << rng.below(4));
    return true;
}

void mutateOnce(std::vector<std::uint8_t>& b, Rng& rng) {
    // One mutation in eight is structure-aware.
    if (rng.below(8) == 0 && mutateStructure(b, rng)) return;
    static const std::uint64_t interesting[] = {0,
                                                1,
                                                2,
                                                3,
                                                4,
                                                7,
                                                8,
                                                15,
                                                16,
                                                31,
                                                32,
                                                63,
                                                64,
                                                127,
                                                128,
                                                255,
                                                256,
                                                1023,
                                                1024,
                                                4095,
                                                4096,
                                                32767,
                                                32768,
                                                65535,
                                                65536,
                                                0x7fffffffull,
                                                0x80000000ull,
                                                0xffffffffull,
                                                0x7fffffffffffffffull,
                                                0x8000000000000000ull,
                                                ~0ull,
                                                ~0ull - 1};
    const std::size_t n = b.size();
    switch (rng.below(11)) {
        case 0:  // flip one bit
            if (n) b[rng.below(n)] ^= std::uint8_t(1u << rng.below(8));
            break;
        case 1:  // random byte
            if (n) b[rng.below(n)] = std::uint8_t(rng());
            break;
        case 2:  // interesting byte
            if (n) b[rng.below(n)] = std::uint8_t(interesting[rng.below(std::size(interesting))]);
            break;
        case 3: {  // interesting 2/4/8-byte little-endian integer
            const std::size_t w = std::size_t(2) << rng.below(3);
            if (n < w) break;
            const std::size_t at = rng.below(n - w + 1);
            const std::uint64_t v = interesting[rng.below(std::size(interesting))];
            for (std::size_t i = 0; i < w; ++i) b[at + i] = std::uint8_t(v >> (8 * i));
            break;
        }
        case 4: {  // add or subtract a little to a 1/2/4/8-byte little-endian integer
            const std::size_t w = std::size_t(1) << rng.below(4);
            if (n < w) break;
            const std::size_t at = rng.below(n - w + 1);
            std::uint64_t v = 0;
            for (std::size_t i = 0; i < w; ++i) v |= std::uint64_t(b[at + i]) << (8 * i);
            const std::int64_t delta = std::int64_t(rng.below(35)) - 17;
            v += std::uint64_t(delta == 0 ? 1 : delta);
            for (std::size_t i = 0; i < w; ++i) b[at + i] = std::uint8_t(v >> (8 * i));
            break;
        }
        case 5:  // truncate
            if (n) b.resize(rng.below(n));
            break;
        case 6: {  // erase a range
            if (n < 2) break;
            const std::size_t at = rng.below(n), len = 1 + rng.below(std::min<std::size_t>(64, n - at));
            b.erase(b.begin() + std::ptrdiff_t(at), b.begin() + std::ptrdiff_t(at + len));
            break;
        }
        case 7: {  // insert random bytes
            const std::size_t at = rng.below(n + 1), len = 1 + rng.below(32);
            std::vector<std::uint8_t> ins(len);
            for (auto& x : ins) x = std::uint8_t(rng());
            b.insert(b.begin() + std::ptrdiff_t(at), ins.begin(), ins.end());
            break;
        }
        case 8: {  // copy a range within the input
            if (n < 2) break;
            const std::size_t len = 1 + rng.below(std::min<std::size_t>(256, n - 1));
            const std::size_t from = rng.below(n - len + 1), to = rng.below(n - len + 1);
            std::memmove(b.data() + to, b.data() + from, len);
            break;
        }
        case 9: {  // splice: from an offset on, another seed's bytes at the same offset
            const Input& other = seeds[rng.below(seeds.size())];
            if (other.bytes.empty()) break;
            const std::size_t at = rng.below(std::min(n, other.bytes.size()) + 1);
            b.resize(at);
            b.insert(b.end(), other.bytes.begin() + std::ptrdiff_t(at), other.bytes.end());
            break;
        }
        default: {  // overwrite a range with the same range of another seed
            const Input& other = seeds[rng.below(seeds.size())];
            const std::size_t m = std::min(n, other.bytes.size());
            if (m < 2) break;
            const std::size_t at = rng.below(m), len = 1 + rng.below(std::min<std::size_t>(512, m - at));
            std::memcpy(b.data() + at, other.bytes.data() + at, len);
            break;
        }
    }
}

// Input i: seed i for i < seeds.size(), otherwise a mutation of a seed that depends only on -seed and i.
void makeInput(std::uint64_t i, std::vector<std::uint8_t>& out) {
    if (i < seeds.size()) {
        out = seeds[i].bytes;
        return;
    }
    Rng rng{options.seed * 0x100000001B3ull ^ (i * 0x9E3779B97F4A7C15ull)};
    rng();
    const Input& seed = seeds[rng.below(seeds.size())];
    out = seed.bytes;
    const std::size_t count = 1 + rng.below(rng.below(2) ? 2 : 6);
    for (std::size_t k = 0; k < count; ++k) mutateOnce(out, rng);
    // Three mutants in four of a seed with checksummed structures get their checksums rewritten;
    // the fourth still tests HDF5's own checksum refusals.
    // ATTNLENS_FUZZ_NO_CHECKSUMS=1: never (to measure what the rewriting reaches).
    static const bool rewrite = !std::getenv("ATTNLENS_FUZZ_NO_CHECKSUMS");
    if (!seed.checksummed.empty() && rng.below(4) != 0 && rewrite) recomputeChecksums(out, seed);
    if (out.size() > options.maxLen) out.resize(options.maxLen);
}

std::string inputName(std::uint64_t i) {
    return i < seeds.size() ? seeds[i].name : "mutation #" + std::to_string(i - seeds.size());
}

// ---------------------------------------------------------------------------------------------
// The child

bool isRuntimeModule(const char* path) {
    if (!path) return true;
    const char* base = std::strrchr(path, '/');
    base = base ? base + 1 : path;
    for (const char* p : {"libc.so", "libc-", "libstdc++", "libgcc_s", "libm.so", "ld-linux", "linux-vdso", "libz.so",
                          "libsz.so", "libaec.so", "libpthread"})
        if (std::strncmp(base, p, std::strlen(p)) == 0) return true;
    return false;
}

void writeStr(const char* s) {
    if (write(2, s, std::strlen(s)) < 0) {
    }
}

void copyText(char* dst, std::size_t cap, const char* src) {
    std::size_t i = 0;
    for (; src && src[i] && i + 1 < cap; ++i) dst[i] = src[i];
    dst[i] = 0;
}

// Prints the stack (module+offset, for addr2line) and records the innermost frame outside the
// runtime. Not strictly async-signal-safe (dladdr, snprintf), which is acceptable in a dying child.
void onFatalSignal(int sig, siginfo_t*, void* context) {
    static std::atomic<int> entered{0};
    if (entered.exchange(1)) _exit(128 + sig);
    Shared* sh = shared;
    void* pc = nullptr;
#if defined(__x86_64__)
    pc = reinterpret_cast<void*>(static_cast<ucontext_t*>(context)->uc_mcontext.gregs[REG_RIP]);
#elif defined(__aarch64__)
    pc = reinterpret_cast<void*>(static_cast<ucontext_t*>(context)->uc_mcontext.pc);
#else
    (void)context;
#endif
    void* raw[64];
    const int n = backtrace(raw, 64);
    std::vector<void*> frames;
    int from = -1;
    for (int k = 0; k < n; ++k)
        if (raw[k] == pc) from = k;
    if (pc) frames.push_back(pc);
    for (int k = (from >= 0 ? from + 1 : 2); k < n; ++k) frames.push_back(raw[k]);

    const int cause = sig == SIGUSR1   ? kHang
                      : sig == SIGUSR2 ? kMemory
                                       : (sh->cause.load() == kInProcess ? kInProcess : kSignal);
    sh->signal = sig;
    sh->lockHeld = attnlens::insideHdf5() ? 1 : 0;
    copyText(sh->stage, sizeof sh->stage, attnlens::fuzz::currentStage);
    // First classify (no allocation), then print: demangling allocates, which may deadlock or crash
    // after heap damage; the parent then still has the classification.
    for (std::size_t k = 0; k < frames.size(); ++k) {
        Dl_info info{};
        if (dladdr(static_cast<char*>(frames[k]) - (k ? 1 : 0), &info) != 0 && !isRuntimeModule(info.dli_fname)) {
            copyText(sh->module, sizeof sh->module, info.dli_fname ? info.dli_fname : "?");
            copyText(sh->symbol, sizeof sh->symbol, info.dli_sname ? info.dli_sname : "?");
            break;
        }
    }
    sh->cause.store(cause);
    char line[1200];
    std::snprintf(line, sizeof line, "\n==ATTNLENS-FUZZ== %s (signal %d) in input %llu during '%s', HDF5 lock %s\n",
                  cause == kHang     ? "HANG"
                  : cause == kMemory ? "MEMORY LIMIT"
                                     : "CRASH",
                  sig, (unsigned long long)sh->current.load(), sh->stage, sh->lockHeld ? "held" : "not held");
    writeStr(line);
    for (std::size_t k = 0; k < frames.size(); ++k) {
        Dl_info info{};
        const bool ok = dladdr(static_cast<char*>(frames[k]) - (k ? 1 : 0), &info) != 0;
        const char* module = ok && info.dli_fname ? info.dli_fname : "?";
        const char* symbol = ok && info.dli_sname ? info.dli_sname : "?";
        int status = 0;
        char* demangled =
            ok && info.dli_sname ? abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status) : nullptr;
        const std::uintptr_t off = ok ? std::uintptr_t(frames[k]) - std::uintptr_t(info.dli_fbase) : 0;
        std::snprintf(line, sizeof line, "    #%zu %p in %s (%s+0x%lx)\n", k, frames[k], demangled ? demangled : symbol,
                      module, (unsigned long)off);
        writeStr(line);
    }
    _exit(128 + sig);
}

void childMain(std::uint64_t start, std::uint64_t total, bool replay) {
    static std::vector<char> altStack(1 << 16);
    stack_t ss{};
    ss.ss_sp = altStack.data();
    ss.ss_size = altStack.size();
    sigaltstack(&ss, nullptr);
    struct sigaction sa {};
    sa.sa_sigaction = onFatalSignal;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    for (int s : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS, SIGUSR1, SIGUSR2})
        sigaction(s, &sa, nullptr);
    // Bounds the address space by the memory limit: an allocation that a damaged size asks for
    // fails (libhdf5 then reports an error) instead of being filled by M_PERTURB or taking the machine.
    const rlim_t limit = rlim_t(std::max<std::uint64_t>(options.rssLimitMb, 1024)) << 20;
    struct rlimit rl {
        limit, limit
    };
    setrlimit(RLIMIT_AS, &rl);
    attnlens::fuzz::onInProcessFinding = [](char c) {
        shared->inProcessClass = c;
        shared->cause.store(kInProcess);
    };
    attnlens::fuzz::stats = Stats{};
    std::vector<std::uint8_t> buf;
    for (std::uint64_t i = start; i < total && !shared->stop.load(); ++i) {
        shared->current.store(i);
        makeInput(i, buf);
        const Stats before = attnlens::fuzz::stats;
        attnlens::fuzz::testOneInput(buf.data(), buf.size());
        const Stats& after = attnlens::fuzz::stats;
        if (replay)
            std::fprintf(stderr, "replay %s: %s\n", inputName(i).c_str(),
                         after.errors > before.errors ? "refused (attnlens::Error)"
                         : after.valid > before.valid ? "valid, reads done"
                                                      : "?");
        shared->stats = after;
        shared->next.store(i + 1);
    }
    std::fflush(stderr);
    _exit(0);
}

// ---------------------------------------------------------------------------------------------
// The parent

struct Finding {
    char cls;
    std::string signature, description, artifact;
    std::uint64_t count = 0;
};

std::uint64_t rssMb(pid_t pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/statm");
    std::uint64_t size = 0, rss = 0;
    f >> size >> rss;
    return rss * std::uint64_t(sysconf(_SC_PAGESIZE)) >> 20;
}

std::string hexHash(const std::vector<std::uint8_t>& b) {
    std::uint64_t h = 1469598103934665603ull;
    for (auto x : b) h = (h ^ x) * 1099511628211ull;
    char s[17];
    std::snprintf(s, sizeof s, "%016llx", (unsigned long long)h);
    return s;
}

void addFile(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) {
        std::fprintf(stderr, "fuzz_dump_reader: cannot read %s\n", path.c_str());
        std::exit(2);
    }
    Input in;
    in.name = path;
    in.bytes.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    if (in.bytes.size() > options.maxLen) in.bytes.resize(options.maxLen);
    in.checksummed = findChecksummed(in.bytes);
    seeds.push_back(std::move(in));
}

void addPath(const std::string& path) {
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) {
        std::fprintf(stderr, "fuzz_dump_reader: no such file or directory: %s\n", path.c_str());
        std::exit(2);
    }
    if (!S_ISDIR(st.st_mode)) {
        addFile(path);
        return;
    }
    std::vector<std::string> names;
    if (DIR* d = opendir(path.c_str())) {
        while (dirent* e = readdir(d)) {
            const std::string name = e->d_name;
            if (name.empty() || name[0] == '.' || name.rfind("README", 0) == 0 || name.rfind("MANIFEST", 0) == 0)
                continue;
            struct stat fs {};
            if (stat((path + "/" + name).c_str(), &fs) == 0 && S_ISREG(fs.st_mode)) names.push_back(name);
        }
        closedir(d);
    }
    std::sort(names.begin(), names.end());
    for (const auto& n : names) addFile(path + "/" + n);
}

bool parseFlag(const std::string& a) {
    auto value = [&](const char* name) -> const char* {
        const std::size_t len = std::strlen(name);
        return a.compare(0, len, name) == 0 && a.size() > len && a[len] == '=' ? a.c_str() + len + 1 : nullptr;
    };
    if (auto v = value("-runs"))
        options.runs = std::strtoull(v, nullptr, 10);
    else if (auto v2 = value("-seed"))
        options.seed = std::strtoull(v2, nullptr, 10);
    else if (auto v3 = value("-max_total_time"))
        options.maxTotalTime = std::atof(v3);
    else if (auto v4 = value("-timeout"))
        options.timeout = std::atof(v4);
    else if (auto v5 = value("-rss_limit_mb"))
        options.rssLimitMb = std::strtoull(v5, nullptr, 10);
    else if (auto v6 = value("-max_len"))
        options.maxLen = std::strtoull(v6, nullptr, 10);
    else if (auto v7 = value("-artifact_prefix"))
        options.artifactPrefix = v7;
    else if (auto v8 = value("-fail_on_hdf5"))
        options.failOnHdf5 = std::atoi(v8) != 0;
    else
        return false;
    return true;
}

void addStats(Stats& total, const Stats& s) {
    total.runs += s.runs;
    total.opened += s.opened;
    total.valid += s.valid;
    total.errors += s.errors;
    total.reads += s.reads;
    total.skippedReads += s.skippedReads;
    total.findings += s.findings;
}

}  // namespace

int main(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "-h" || a == "-help" || a == "--help") {
            std::printf(
                "usage: %s [-runs=N] [-seed=S] [-max_total_time=SEC] [-timeout=SEC] [-rss_limit_mb=MB]\n"
                "          [-max_len=BYTES] [-artifact_prefix=PATH] [-fail_on_hdf5=0|1] FILE|DIR ...\n"
                "(the standalone engine of tests/fuzz; see the comment at the top of driver_main.cpp)\n",
                argv[0]);
            return 0;
        }
        if (a.size() > 1 && a[0] == '-' && a.find('=') != std::string::npos) {
            if (!parseFlag(a)) std::fprintf(stderr, "fuzz_dump_reader: ignoring unknown flag %s\n", a.c_str());
            continue;
        }
        options.paths.push_back(a);
    }
    for (const auto& p : options.paths) addPath(p);
    if (seeds.empty()) {
        std::fprintf(stderr, "fuzz_dump_reader: no input files (give files or directories of seed dumps)\n");
        return 2;
    }
    // Fill new and freed heap blocks with a fixed byte (as ASan does), so that libhdf5's reads of
    // uninitialised memory on damaged metadata give the same outcome in a fresh process as after
    // thousands of inputs: a finding then reproduces from its saved input alone.
#ifdef M_PERTURB
    if (!std::getenv("ATTNLENS_FUZZ_NO_PERTURB")) mallopt(M_PERTURB, 0xbe);
#endif
    const bool replay = options.runs == 0;
    if (!replay && options.artifactPrefix.empty()) options.artifactPrefix = "./";
    if (replay && !std::getenv("ATTNLENS_FUZZ_VERBOSE")) setenv("ATTNLENS_FUZZ_VERBOSE", "1", 1);

    const char* tmpdir = std::getenv("TMPDIR");
    const std::string tmp =
        std::string(tmpdir && *tmpdir ? tmpdir : "/tmp") + "/attnlens-fuzz-driver-" + std::to_string(getpid()) + ".h5";
    setenv("ATTNLENS_FUZZ_TMPFILE", tmp.c_str(), 1);  // one file for every child; removed below

    void* page = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) {
        std::perror("mmap");
        return 2;
    }
    shared = new (page) Shared();

    const std::uint64_t total = seeds.size() + options.runs;
    std::size_t checksummed = 0, checksummedSeeds = 0;
    for (const Input& in : seeds) {
        checksummed += in.checksummed.size();
        checksummedSeeds += in.checksummed.empty() ? 0 : 1;
    }
    std::fprintf(
        stderr,
        "==ATTNLENS-FUZZ== standalone driver: %zu seed file(s) (%zu checksummed structures in %zu of them, "
        "rewritten after mutation), %llu mutated input(s), seed %llu, "
        "timeout %g s, rss limit %llu MB%s\n",
        seeds.size(), checksummed, checksummedSeeds, (unsigned long long)options.runs, (unsigned long long)options.seed,
        options.timeout, (unsigned long long)options.rssLimitMb,
        options.maxTotalTime > 0 ? (", at most " + std::to_string(int(options.maxTotalTime)) + " s").c_str() : "");
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    Stats totals;
    std::map<std::string, Finding> findings;
    std::vector<std::string> order;
    std::uint64_t start = 0, children = 0;
    bool outOfTime = false;
    std::fflush(stdout);
    std::fflush(stderr);
    while (start < total && !outOfTime) {
        shared->current.store(start);
        shared->next.store(start);
        shared->cause.store(kNone);
        shared->stop.store(0);
        shared->stats = Stats{};
        shared->module[0] = shared->symbol[0] = shared->stage[0] = 0;
        const pid_t child = fork();
        if (child < 0) {
            std::perror("fork");
            return 2;
        }
        if (child == 0) childMain(start, total, replay);
        ++children;
        std::uint64_t watched = start;
        auto since = Clock::now();
        int status = 0;
        bool interrupted = false;
        auto interruptedAt = Clock::now();
        for (;;) {
            const pid_t r = waitpid(child, &status, WNOHANG);
            if (r == child) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
            const auto now = Clock::now();
            if (options.maxTotalTime > 0 && std::chrono::duration<double>(now - t0).count() > options.maxTotalTime &&
                !shared->stop.load()) {
                shared->stop.store(1);
                outOfTime = true;
            }
            if (interrupted) {
                if (now - interruptedAt > std::chrono::seconds(5)) kill(child, SIGKILL);
                continue;
            }
            const std::uint64_t cur = shared->current.load();
            if (cur != watched || shared->next.load() > cur) {
                watched = cur;
                since = now;
            }
            if (std::chrono::duration<double>(now - since).count() > options.timeout) {
                syscall(SYS_tgkill, child, child, SIGUSR1);
                interrupted = true;
                interruptedAt = now;
            } else if (rssMb(child) > options.rssLimitMb) {
                syscall(SYS_tgkill, child, child, SIGUSR2);
                interrupted = true;
                interruptedAt = now;
            }
        }
        addStats(totals, shared->stats);
        const std::uint64_t next = shared->next.load();
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && shared->cause.load() == kNone) {
            start = next;  // every input done, or stopped by -max_total_time
            break;
        }
        // The child died in input `current`.
        const std::uint64_t bad = shared->current.load();
        const int cause = shared->cause.load();
        std::vector<std::uint8_t> bytes;
        makeInput(bad, bytes);
        char cls = 'a';
        std::string what;
        const std::string module = shared->module, stage = shared->stage;
        std::string symbol = shared->symbol;
        int demangleStatus = 0;
        if (char* d = abi::__cxa_demangle(symbol.c_str(), nullptr, nullptr, &demangleStatus)) {
            symbol = d;
            std::free(d);
            symbol = symbol.substr(0, symbol.find('('));
        }
        if (cause == kInProcess) {
            cls = shared->inProcessClass ? shared->inProcessClass : 'c';
            what = cls == 'c' ? "non-Error exception" : "leaked HDF5 identifiers";
        } else {
            const bool inHdf5 = module.find("libhdf5") != std::string::npos || (module.empty() && shared->lockHeld);
            cls = inHdf5 ? 'b' : 'a';
            if (cause == kHang)
                what = "hang (no progress for " + std::to_string(int(options.timeout)) + " s)";
            else if (cause == kMemory)
                what = "memory above " + std::to_string(options.rssLimitMb) + " MB";
            else if (cause == kSignal)
                what = std::string("signal ") + strsignal(shared->signal);
            else if (WIFSIGNALED(status))
                what = std::string("killed by signal ") + strsignal(WTERMSIG(status));
            else
                what = "exit status " + std::to_string(WEXITSTATUS(status));
        }
        const std::string base = module.substr(module.rfind('/') == std::string::npos ? 0 : module.rfind('/') + 1);
        const std::string signature = std::string(1, cls) + " " + what + " in " + (symbol.empty() ? "?" : symbol) +
                                      " (" + (base.empty() ? "?" : base) + ") during '" + stage + "'";
        auto [it, fresh] = findings.try_emplace(signature);
        Finding& f = it->second;
        ++f.count;
        const std::string artifact = options.artifactPrefix +
                                     (cls == 'b'   ? "hdf5-"
                                      : cls == 'c' ? "exception-"
                                                   : "crash-") +
                                     (cause == kHang     ? "timeout-"
                                      : cause == kMemory ? "oom-"
                                                         : "") +
                                     hexHash(bytes);
        if (fresh) {
            f.cls = cls;
            f.signature = signature;
            f.artifact = !replay || !options.artifactPrefix.empty() ? artifact : inputName(bad);
            order.push_back(signature);
        }
        if (f.count <= 3 && (!replay || !options.artifactPrefix.empty())) {
            std::ofstream out(artifact, std::ios::binary);
            out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
        }
        std::fprintf(stderr, "==ATTNLENS-FUZZ== FINDING (%c) in %s: %s; %s%s\n", cls, inputName(bad).c_str(),
                     signature.c_str(), replay && options.artifactPrefix.empty() ? "replayed file" : "input saved as ",
                     replay && options.artifactPrefix.empty() ? "" : artifact.c_str());
        ++totals.runs;  // the input that died
        start = bad + 1;
    }
    unlink(tmp.c_str());
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    std::uint64_t ours = 0, inHdf5 = 0, exceptions = 0;
    for (const auto& [sig, f] : findings) (f.cls == 'b' ? inHdf5 : f.cls == 'c' ? exceptions : ours) += f.count;
    const std::uint64_t mutated = totals.runs > seeds.size() ? totals.runs - seeds.size() : 0;
    std::fprintf(stderr,
                 "==ATTNLENS-FUZZ== done: %llu inputs (%zu seeds, %llu mutated) in %.1f s, %.0f exec/s, %llu child "
                 "process(es)%s\n"
                 "==ATTNLENS-FUZZ== outcomes: opened %llu, all reads ok %llu, attnlens::Error %llu, reads %llu "
                 "(skipped over the cap: %llu)\n"
                 "==ATTNLENS-FUZZ== findings: (a) our code %llu, (b) inside libhdf5 %llu, (c) non-Error exceptions "
                 "%llu; distinct %zu\n",
                 (unsigned long long)totals.runs, std::min<std::size_t>(seeds.size(), totals.runs),
                 (unsigned long long)mutated, seconds, seconds > 0 ? double(totals.runs) / seconds : 0.0,
                 (unsigned long long)children, outOfTime ? " (stopped by -max_total_time)" : "",
                 (unsigned long long)totals.opened, (unsigned long long)totals.valid, (unsigned long long)totals.errors,
                 (unsigned long long)totals.reads, (unsigned long long)totals.skippedReads, (unsigned long long)ours,
                 (unsigned long long)inHdf5, (unsigned long long)exceptions, findings.size());
    for (const auto& s : order) {
        const Finding& f = findings[s];
        std::fprintf(stderr, "==ATTNLENS-FUZZ==   %llu x %s  [first: %s]\n", (unsigned long long)f.count, s.c_str(),
                     f.artifact.c_str());
    }
    if (ours + exceptions > 0) return 1;
    if (inHdf5 > 0 && options.failOnHdf5) return 3;
    return 0;
}
