#pragma once
// Locality over many images (issue 11, part 2): the mean attention distance and the query-aligned
// offset map of every (layer, head, paradigm), over all images and per label, computed image by
// image in bounded memory (one image's activations and one block of rows per thread).
//
// Definitions (docs/DEFINITIONS.md "Definitions"; written into every export as `definitions`):
// - A spatial token has a position p = (row, column) on its layer's grid; prefix tokens (CLS) have
//   none and are left out as queries and as keys of both statistics.
// - Offset map: M(dy, dx) = the mean, over images and over the spatial queries i whose row is Ok
//   and whose key i + (dy, dx) lies on the grid, of A[i, i + (dy, dx)]. dy in [-(H-1), H-1],
//   dx in [-(W-1), W-1]: a (2H-1) x (2W-1) map whose centre is the query itself.
// - Attention distance of a query: D_i = sum over spatial keys j of A_ij * ||p_i - p_j||_2, in grid
//   units. The mean attention distance of a (layer, head, paradigm) is the mean of D_i over the
//   spatial queries with Ok rows of every image in the group (the locality figure of ViT papers).
//   It equals sum over offsets of S(dy, dx) * sqrt(dy^2 + dx^2) / queries, S the offset sums.
// - Weights are A as the paradigm defines it: signed paradigms (inline, mala) keep their negative
//   weights, so their distance is a signed moment. Prefix keys' weight is reported as prefix mass.
// - A row that is not Ok (non-finite input, zero denominator) is left out and counted as flagged.
// - Spatial reduction (keys on a reduced h x w grid, format.md 1c): a key's position is its cell's
//   centre in the queries' grid units (AttentionLayout::keyCentreY/X), so D_i is still in query
//   grid units and is summed directly per (query, key); the offset map is on the key grid, with
//   (dy, dx) = key cell minus the query's key cell (AttentionLayout::keyRow/keyCol): (2h-1) x (2w-1).
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "attnlens/analysis/dump_analysis.h"
#include "attnlens/attention/attention.h"
#include "attnlens/attention/token_layout.h"
#include "attnlens/dump/dump.h"

namespace attnlens {

// Sums of one (layer, head, paradigm) over the queries and images added so far.
struct LocalityAccumulator {
    int gridH = 0, gridW = 0;               // the keys' grid (the layer's grid unless the keys are reduced)
    std::vector<double> offsetSum;          // (2H-1) x (2W-1), row-major, dy = -(H-1) first
    std::vector<std::int64_t> offsetCount;  // how many (query, key) pairs each offset summed
    double prefixMassSum = 0;               // sum over queries of the prefix keys' weight
    std::int64_t queries = 0;               // spatial queries with Ok rows
    std::int64_t flagged = 0;               // spatial queries left out (row not Ok)
    // Spatial reduction: sum over queries of D_i, summed directly (offsets on the key grid are not
    // distances in query grid units).
    bool directDistance = false;
    double distanceSum = 0;

    LocalityAccumulator() = default;
    explicit LocalityAccumulator(const AttentionLayout& layout);
    int rows() const { return 2 * gridH - 1; }
    int cols() const { return 2 * gridW - 1; }
    std::size_t cell(int dy, int dx) const {
        return std::size_t(dy + gridH - 1) * cols() + std::size_t(dx + gridW - 1);
    }
    // Adds another accumulator of the same grid (Error(Usage) otherwise).
    void add(const LocalityAccumulator& other);
    // NaN when no query was added.
    double meanDistance() const;
    double meanPrefixMass() const;
    // M(dy, dx); NaN where no pair was summed.
    double offsetMean(int dy, int dx) const;
};

// The mean attention distance of uniform attention over each row's admissible keys (admissible_keys.h):
// mean over every spatial query i of (1 / |S_i|) sum over spatial j in S_i of ||p_i - p_j||_2, key
// positions as in D_i (key cells' centres under spatial reduction). The yardstick of mean_distance: a
// window layer's uniform row stays within its window. Geometry only: every spatial query counts.
double uniformMeanDistance(const AdmissibleKeys& keys);

// Adds the spatial rows of one head: rows are computed in blocks of blockRows (never N x N).
void accumulateLocality(const AttentionHead& head, const AttentionLayout& layout, LocalityAccumulator& acc,
                        Index blockRows = 128);

struct LocalityRequest {
    std::vector<Paradigm> paradigms;  // empty: the presets
    std::vector<int> layers;          // positions in DumpInfo::layers; empty: every layer
    std::vector<int> images;          // empty: every image
    bool perLabel = true;             // a group per label besides "all" (dumps with /labels)
    ThreadBudget threads;             // execution.h; 0 threads: the share's processors
    // What if every query were a times larger (AnalyzeRequest::queryScale; only sweeps set it).
    double queryScale = 1.0;
    // An (image, layer) whose data cannot be read is left out (LocalityReport::skipped, a note)
    // instead of ending the run, as analyze's --skip-unreadable (the desktop program's views).
    bool skipUnreadable = false;
};

struct LocalityCell {
    int layer = 0;  // position in DumpInfo::layers
    int head = 0;
    int paradigm = 0;  // index in LocalityReport::paradigms
    LocalityAccumulator sums;
    int images = 0;  // the group's images whose layer was read (fewer than the group's when skipped)
};

struct LocalityGroup {
    std::string name;                   // "all", "label 3" or the class name
    std::optional<std::int64_t> label;  // none for "all"
    int images = 0;
    std::vector<LocalityCell> cells;  // layer, head, paradigm order (the request's layers)
};

struct LocalityReport {
    DumpInfo dump;
    std::vector<Paradigm> paradigms;
    LocalityRequest request;            // with defaults made explicit (paradigms, layers, images)
    std::vector<LocalityGroup> groups;  // "all" first, then labels in ascending order
    // uniformMeanDistance of each (layer position, head) of the request's layers: geometry only,
    // computed once with the sums (not by each reader of the report: it is O(N n) per layer).
    std::map<std::pair<int, int>, double> uniformDistance;
    double seconds = 0;
    // What the numbers leave out: an image whose label cannot be used (outside /class_names, read
    // past the open check's first 2^20) is in "all" but in no label group, as analyze leaves it out
    // of its per-label summary.
    std::vector<std::string> notes;
    // (image, layer)s left out because their data could not be read (request.skipUnreadable).
    std::vector<SkippedLayer> skipped;
    // The mean over a layer's heads of uniformDistance (NaN when the report has none for it).
    double layerUniformDistance(int layer) const;
};

// Streams the images in order; each image's layers run on the threads, each (layer, head,
// paradigm) adds to its own sums in image order, so the result does not depend on the thread
// count. progress gets (images done, images); cancel is polled between images and layers
// (Error(Cancelled)). Data
// that cannot be read ends the run (Error(Input) naming the dataset): a locality figure over
// fewer images than asked would not say so in its numbers.
// Memory: the sums of every (layer, head, paradigm) cell for the image, "all" and each label group
// that can occur ((2H-1)(2W-1) offsets each), and per worker one layer's activations, one head's
// features and a block of rows (memory_plan.cpp). localityOverDump checks this before it
// allocates: Error(Input) "... needs about X GiB of memory, more than the Y GiB this process may
// use" when even one worker does not fit; fewer workers when that is what fits.
MemoryPlan planLocalityMemory(const DumpInfo& info, const LocalityRequest& request, double budgetBytes);
// A locality run planned once, by the library (as AnalysisPlan, dump_analysis.h): the request with
// paradigms, layers and images explicit and checked, and the memory plan (its workers and note).
struct LocalityPlan {
    LocalityRequest request;
    MemoryPlan memory;
};
LocalityPlan planLocality(const DumpInfo& info, const LocalityRequest& request);
LocalityReport localityOverDump(const DumpReader& reader, const LocalityPlan& plan, const ProgressFn& progress = {},
                                CancelToken cancel = {});
LocalityReport localityOverDump(const DumpReader& reader, const LocalityRequest& request,
                                const ProgressFn& progress = {}, CancelToken cancel = {});

// The JSON export ("format": "attnlens.locality", version 1; resources/locality.schema.json).
// Offset maps are cropped to |dy|, |dx| <= radius (negative: whole maps).
nlohmann::json localityToJson(const LocalityReport& report, int radius);
// The export's text: one line per top-level field and per cell (parses as the same JSON).
std::string localityText(const nlohmann::json& j);
// The definitions above as text, keyed by name (for exports and `--help`).
nlohmann::json localityDefinitions();

}  // namespace attnlens
