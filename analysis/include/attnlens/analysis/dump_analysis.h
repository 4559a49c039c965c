#pragma once
// Whole-dump analysis: every selected (image, layer, head, paradigm), on a pool of worker threads,
// with a progress callback that returns false to cancel (then Error(Cancelled) is thrown).
// Used by `attnlens-cli analyze` and by the GUI's background jobs: one code path for both.
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "attnlens/analysis/statistics.h"
#include "attnlens/dump.h"

namespace attnlens {

struct AnalyzeRequest {
    std::vector<Paradigm> paradigms;  // empty = the presets
    std::vector<int> layers;          // positions in DumpInfo::layers; empty = all
    std::vector<int> heads;           // empty = all heads of each layer
    std::vector<int> images;          // empty = all images
    AnalysisOptions options;
    int threads = 0;                  // 0 = std::thread::hardware_concurrency()
};

struct HeadRecord {
    int image = 0, layer = 0, head = 0;
    int paradigm = 0;  // index into AnalysisReport::paradigms
    HeadStatistics stats;
};

struct AnalysisReport {
    DumpInfo dump;
    std::string sha256;                 // of the input file ("" when not computed)
    std::vector<Paradigm> paradigms;
    AnalyzeRequest request;             // with defaults filled in (all lists explicit)
    std::vector<HeadRecord> records;    // sorted by image, layer, head, paradigm
    std::vector<NonFiniteValue> nonFinite;
    double seconds = 0;
};

struct AnalysisProgress {
    std::int64_t done = 0;   // (image, layer) tasks finished
    std::int64_t total = 0;
    std::string current;     // "image 3, layer blocks.2"
};
using ProgressFn = std::function<bool(const AnalysisProgress&)>;

// Parses "0-3,7,9" (inclusive ranges) against a count; Error(Usage) naming the option on bad input.
std::vector<int> parseIndexList(std::string_view text, int count, std::string_view optionName);
// Layer selection by names or positions ("blocks.0,blocks.3" or "0-3").
std::vector<int> parseLayerList(std::string_view text, const DumpInfo& info);

// Tunes glibc's allocator (once per process) so that freed matrices stay in the heap instead of
// going back to the kernel and being faulted in again; analyzeDump calls it. No-op elsewhere.
void retainFreedMemory();

AnalysisReport analyzeDump(const DumpReader& reader, const AnalyzeRequest& request,
                           const ProgressFn& progress = {});

}  // namespace attnlens
