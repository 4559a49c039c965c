#include "attnlens/analysis/locality.h"
#include "attnlens/analysis/execution.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <utility>

#include "attnlens/dump/head_inputs.h"
#include "attnlens/io/error.h"
#include "parallel.h"

namespace attnlens {

using nlohmann::json;

LocalityAccumulator::LocalityAccumulator(const AttentionLayout& layout)
    : gridH(std::max(0, layout.keys.gridH)),
      gridW(std::max(0, layout.keys.gridW)),
      directDistance(layout.reducedKeys()) {
    const std::size_t cells = gridH > 0 && gridW > 0 ? std::size_t(rows()) * std::size_t(cols()) : 0;
    offsetSum.assign(cells, 0.0);
    offsetCount.assign(cells, 0);
}

void LocalityAccumulator::add(const LocalityAccumulator& other) {
    if (other.gridH != gridH || other.gridW != gridW || other.directDistance != directDistance)
        throwUsage("locality: adding sums of a " + std::to_string(other.gridH) + " x " + std::to_string(other.gridW) +
                   " grid to those of a " + std::to_string(gridH) + " x " + std::to_string(gridW) + " grid");
    for (std::size_t c = 0; c < offsetSum.size(); ++c) {
        offsetSum[c] += other.offsetSum[c];
        offsetCount[c] += other.offsetCount[c];
    }
    prefixMassSum += other.prefixMassSum;
    distanceSum += other.distanceSum;
    queries += other.queries;
    flagged += other.flagged;
}

double LocalityAccumulator::meanDistance() const {
    if (queries == 0) return std::numeric_limits<double>::quiet_NaN();
    if (directDistance) return distanceSum / double(queries);
    double sum = 0;
    for (int dy = -(gridH - 1); dy <= gridH - 1; ++dy)
        for (int dx = -(gridW - 1); dx <= gridW - 1; ++dx)
            sum += offsetSum[cell(dy, dx)] * std::sqrt(double(dy) * dy + double(dx) * dx);
    return sum / double(queries);
}

double LocalityAccumulator::meanPrefixMass() const {
    return queries == 0 ? std::numeric_limits<double>::quiet_NaN() : prefixMassSum / double(queries);
}

double LocalityAccumulator::offsetMean(int dy, int dx) const {
    if (std::abs(dy) >= gridH || std::abs(dx) >= gridW) return std::numeric_limits<double>::quiet_NaN();
    const std::size_t c = cell(dy, dx);
    return offsetCount[c] == 0 ? std::numeric_limits<double>::quiet_NaN() : offsetSum[c] / double(offsetCount[c]);
}

void accumulateLocality(const AttentionHead& head, const AttentionLayout& geometry, LocalityAccumulator& acc,
                        Index blockRows) {
    const TokenLayout& layout = geometry.queries;
    const TokenLayout& keys = geometry.keys;
    if (acc.gridH != keys.gridH || acc.gridW != keys.gridW || acc.directDistance != geometry.reducedKeys())
        acc = LocalityAccumulator(geometry);
    const Index n = head.tokens(), prefix = layout.prefix, spatial = n - prefix;
    if (n != layout.tokens() || head.keys() != keys.tokens())
        throwUsage("locality: the head has " + std::to_string(n) + " tokens and " + std::to_string(head.keys()) +
                   " keys, the layout " + std::to_string(layout.tokens()) + " and " + std::to_string(keys.tokens()));
    if (spatial <= 0) return;
    const Index block = std::clamp<Index>(blockRows, 1, spatial);
    Matrix rows(block, head.keys());
    std::vector<RowStatus> status(static_cast<std::size_t>(block));
    const int w = layout.gridW, cols = acc.cols();
    const Index keyPrefix = keys.prefix;
    // Spatial reduction: each key cell's centre in query grid units.
    std::vector<double> centreY, centreX;
    if (acc.directDistance) {
        for (int ky = 0; ky < keys.gridH; ++ky) centreY.push_back(geometry.keyCentreY(ky));
        for (int kx = 0; kx < keys.gridW; ++kx) centreX.push_back(geometry.keyCentreX(kx));
    }
    for (Index begin = prefix; begin < n; begin += block) {
        const Index count = std::min(block, n - begin);
        head.rows(begin, count, rows.topRows(count), status.data());
        for (Index r = 0; r < count; ++r) {
            if (status[std::size_t(r)] != RowStatus::Ok) {
                ++acc.flagged;
                continue;
            }
            const Index s = begin + r - prefix;
            const int qy = int(s / w), qx = int(s % w);
            double prefixMass = 0;
            for (Index j = 0; j < keyPrefix; ++j) prefixMass += rows(r, j);
            acc.prefixMassSum += prefixMass;
            ++acc.queries;
            // The query's own cell on the key grid (itself unless the keys are reduced).
            const int cy = geometry.keyRow(qy), cx = geometry.keyCol(qx);
            double distance = 0;
            // Key (ky, kx) lies at offset (ky - cy, kx - cx): cell (ky - cy + h - 1, kx - cx + w - 1).
            for (int ky = 0; ky < keys.gridH; ++ky) {
                const std::size_t rowCell = std::size_t(ky - cy + keys.gridH - 1) * std::size_t(cols);
                const Index key0 = keyPrefix + Index(ky) * keys.gridW;
                for (int kx = 0; kx < keys.gridW; ++kx) {
                    const std::size_t c = rowCell + std::size_t(kx - cx + keys.gridW - 1);
                    acc.offsetSum[c] += rows(r, key0 + kx);
                    ++acc.offsetCount[c];
                    if (acc.directDistance)
                        distance += rows(r, key0 + kx) * std::hypot(centreY[std::size_t(ky)] - double(qy),
                                                                    centreX[std::size_t(kx)] - double(qx));
                }
            }
            acc.distanceSum += distance;
        }
    }
}

namespace {

std::string groupName(const DumpInfo& info, std::int64_t label) {
    if (label >= 0 && std::size_t(label) < info.classNames.size())
        return "label " + std::to_string(label) + " (" + info.classNames[std::size_t(label)] + ")";
    return "label " + std::to_string(label);
}

// The image's label for its label group, or none (no /labels, or a label that cannot be used: out
// of /class_names past the open check's first 2^20, noted). A function of its own: written inline
// as `label = reader.label(img)` in a try block of the image loop, g++ 12 -O2 left the previous
// image's label in the optional when the read threw (the image counted in another label's group).
std::optional<std::int64_t> usableLabel(const DumpReader& reader, int image, std::vector<std::string>& notes) {
    try {
        return reader.label(image);
    } catch (const Error& e) {
        if (e.kind() != ErrorKind::Input) throw;
        notes.push_back("image " + std::to_string(image) + " is left out of the label groups: " + e.what());
        return std::nullopt;
    }
}

}  // namespace

LocalityPlan planLocality(const DumpInfo& info, const LocalityRequest& request) {
    LocalityPlan plan;
    LocalityRequest& req = plan.request;
    req = request;
    if (req.paradigms.empty()) req.paradigms = presetParadigms();
    if (req.layers.empty()) {
        req.layers.resize(info.layers.size());
        std::iota(req.layers.begin(), req.layers.end(), 0);
    }
    // A declared image count too large for this machine is refused before its list is built.
    checkSelectionFits(info, req.images.empty() ? std::size_t(std::max(0, info.images)) : req.images.size(),
                       req.layers.size(), memoryBudgetBytes());
    if (req.images.empty()) {
        req.images.resize(std::size_t(info.images));
        std::iota(req.images.begin(), req.images.end(), 0);
    }
    for (int l : req.layers)
        if (l < 0 || l >= int(info.layers.size()))
            throwUsage("locality: layer " + std::to_string(l) + " is not in the dump (" +
                       std::to_string(info.layers.size()) + " layers)");
    for (int i : req.images)
        if (i < 0 || i >= info.images)
            throwUsage("locality: image " + std::to_string(i) + " is not in the dump (" + std::to_string(info.images) +
                       " images)");
    if (!std::isfinite(req.queryScale) || !(req.queryScale > 0))
        throwUsage("locality: the query scale must be finite and > 0, got " + std::to_string(req.queryScale));
    // Before anything is allocated: an absurd grid is a message, not minutes of paging.
    plan.memory = planLocalityMemory(info, req, memoryBudgetBytes());
    // The report gives the budget as asked (its count), the workers that ran are the plan's.
    req.threads = req.threads.withThreads(req.threads.count());
    return plan;
}

LocalityReport localityOverDump(const DumpReader& reader, const LocalityRequest& request, const ProgressFn& progress,
                                CancelToken cancel) {
    return localityOverDump(reader, planLocality(reader.info(), request), progress, cancel);
}

namespace {

// The cells of one group, in (layer, head, paradigm) order, each with empty sums.
struct LocalityCells {
    std::vector<LocalityCell> cells;
    std::vector<std::size_t> first;  // first[li]: where the request's li-th layer starts
};

LocalityCells localityCells(const DumpInfo& info, const std::vector<int>& layers, int paradigms) {
    LocalityCells out;
    for (int l : layers) {
        out.first.push_back(out.cells.size());
        const LayerInfo& li = info.layers[std::size_t(l)];
        for (int h = 0; h < li.heads; ++h)
            for (int p = 0; p < paradigms; ++p)
                out.cells.push_back(LocalityCell{l, h, p, LocalityAccumulator(li.attentionLayout())});
    }
    return out;
}

// One image's sums into `image` (its cells reset first), its layers read in parallel. Returns, per
// layer of the request, the read error of the image's layer (skipUnreadable), else empty.
std::vector<std::string> accumulateImage(const DumpReader& reader, const LocalityReport& report,
                                         const LocalityPlan& plan, int img, const std::vector<std::size_t>& first,
                                         std::vector<LocalityCell>& image, const CancelToken& cancel) {
    const DumpInfo& info = reader.info();
    const std::vector<int>& layers = report.request.layers;
    const int paradigms = int(report.paradigms.size());
    for (LocalityCell& c : image) c.sums = LocalityAccumulator(info.layers[std::size_t(c.layer)].attentionLayout());
    std::vector<std::string> unreadable(layers.size());
    detail::parallelFor(layers.size(), plan.memory.workers, [&](std::size_t li) {
        cancel.throwIfRequested("locality");
        const int l = layers[li];
        const LayerInfo& layer = info.layers[std::size_t(l)];
        std::vector<HeadActivations> heads;
        try {
            heads = reader.readLayer(img, l, false);
        } catch (const Error& e) {
            if (!plan.request.skipUnreadable || e.kind() != ErrorKind::Input) throw;
            unreadable[li] = e.what();  // its cells keep empty sums for this image
            return;
        }
        std::size_t at = first[li];
        for (int h = 0; h < layer.heads; ++h) {
            const HeadInputs in = headInputs(layer, heads[std::size_t(h)], h);
            for (int p = 0; p < paradigms; ++p, ++at) {
                AttentionHead head(report.paradigms[std::size_t(p)], in);
                if (plan.request.queryScale != 1.0) head.scaleQueries(plan.request.queryScale);
                accumulateLocality(head, layer.attentionLayout(), image[at].sums);
            }
        }
    });
    return unreadable;
}

// The image's unreadable layers as skipped layers and notes; per layer of the dump, whether it was read.
std::vector<char> recordUnreadable(LocalityReport& report, int img, const std::vector<std::string>& unreadable) {
    const std::vector<int>& layers = report.request.layers;
    std::vector<char> layerRead(report.dump.layers.size(), 1);
    for (std::size_t li = 0; li < layers.size(); ++li) {
        if (unreadable[li].empty()) continue;
        layerRead[std::size_t(layers[li])] = 0;
        report.skipped.push_back(SkippedLayer{img, layers[li], unreadable[li]});
        report.notes.push_back("image " + std::to_string(img) + ", layer " +
                               report.dump.layers[std::size_t(layers[li])].name +
                               " is left out (unreadable): " + unreadable[li]);
    }
    return layerRead;
}

// The uniform yardstick per (layer, head); a layer's heads share it unless they have windows of
// their own.
void addUniformDistances(LocalityReport& report) {
    for (const int l : report.request.layers) {
        const LayerInfo& info = report.dump.layers[std::size_t(l)];
        const bool perHead = info.window && info.window->perHead();
        const double shared = perHead ? 0.0 : uniformMeanDistance(admissibleKeysOf(info, 0));
        for (int h = 0; h < info.heads; ++h)
            report.uniformDistance[{l, h}] = perHead ? uniformMeanDistance(admissibleKeysOf(info, h)) : shared;
    }
}

}  // namespace

LocalityReport localityOverDump(const DumpReader& reader, const LocalityPlan& plan, const ProgressFn& progress,
                                CancelToken cancel) {
    const auto start = std::chrono::steady_clock::now();
    // Each head allocates a block of rows and its inputs: kept in the heap instead of being mapped
    // and zeroed by the kernel again for every head (most of the time otherwise).
    retainFreedMemory();
    const DumpInfo& info = reader.info();
    LocalityReport report;
    report.dump = info;
    report.request = plan.request;
    report.paradigms = plan.request.paradigms;
    const LocalityCells layout = localityCells(info, report.request.layers, int(report.paradigms.size()));
    LocalityGroup all{"all", std::nullopt, 0, layout.cells};
    std::map<std::int64_t, LocalityGroup> byLabel;

    std::vector<LocalityCell> image = layout.cells;  // one image's sums
    std::int64_t done = 0;
    for (int img : report.request.images) {
        const std::vector<std::string> unreadable =
            accumulateImage(reader, report, plan, img, layout.first, image, cancel);
        const std::vector<char> layerRead = recordUnreadable(report, img, unreadable);
        auto addTo = [&image, &layerRead](LocalityGroup& g) {
            ++g.images;
            for (std::size_t c = 0; c < image.size(); ++c) {
                g.cells[c].sums.add(image[c].sums);
                g.cells[c].images += layerRead[std::size_t(image[c].layer)];
            }
        };
        addTo(all);
        if (plan.request.perLabel)
            if (const std::optional<std::int64_t> label = usableLabel(reader, img, report.notes)) {
                auto [it, inserted] = byLabel.try_emplace(*label);
                if (inserted) it->second = LocalityGroup{groupName(info, *label), *label, 0, layout.cells};
                addTo(it->second);
            }
        ++done;
        if (progress)
            progress(
                AnalysisProgress{done, std::int64_t(report.request.images.size()), "image " + std::to_string(img)});
        if (cancel.requested())
            throw Error(ErrorKind::Cancelled, "locality: cancelled after " + std::to_string(done) + " images");
    }
    report.groups.push_back(std::move(all));
    for (auto& [label, g] : byLabel) report.groups.push_back(std::move(g));
    addUniformDistances(report);
    report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return report;
}

double LocalityReport::layerUniformDistance(int layer) const {
    double sum = 0;
    int heads = 0;
    for (auto it = uniformDistance.lower_bound({layer, 0}); it != uniformDistance.end() && it->first.first == layer;
         ++it, ++heads)
        sum += it->second;
    return heads > 0 ? sum / heads : std::numeric_limits<double>::quiet_NaN();
}

double uniformMeanDistance(const AdmissibleKeys& keys) {
    const AttentionLayout& g = keys.layout();
    const TokenLayout &q = g.queries, &k = g.keys;
    const auto position = [&](Index key) {
        return g.reducedKeys() ? std::pair{g.keyCentreY(k.row(key)), g.keyCentreX(k.col(key))}
                               : std::pair{double(k.row(key)), double(k.col(key))};
    };
    double sum = 0;
    Index queries = 0;
    for (int y = 0; y < q.gridH; ++y)
        for (int x = 0; x < q.gridW; ++x) {
            const Index i = q.token(y, x);
            double d = 0;
            const auto add = [&](Index key) {
                if (!k.isSpatial(key)) return;  // prefix keys have no position (weight, no distance)
                const auto [ky, kx] = position(key);
                d += std::hypot(ky - double(y), kx - double(x));
            };
            if (keys.everyKey())
                for (Index key = 0; key < k.tokens(); ++key) add(key);
            else
                for (const Index key : keys.keys(i)) add(key);
            sum += d / double(keys.count(i));
            ++queries;
        }
    return queries > 0 ? sum / double(queries) : std::numeric_limits<double>::quiet_NaN();
}

json localityDefinitions() {
    return {
        {"position",
         "a spatial token's (row, column) on its layer's grid; prefix tokens (CLS) have none and are "
         "left out as queries and as keys"},
        {"offset_map",
         "M(dy, dx) = mean over images and spatial queries i with an Ok row and key i + (dy, dx) on the "
         "grid of A[i, i + (dy, dx)]; rows dy = -radius..radius, columns dx = -radius..radius, the "
         "centre cell is the query itself; null where no pair was summed"},
        {"mean_distance",
         "mean over spatial queries with Ok rows of D_i = sum over spatial keys j of A_ij * "
         "||p_i - p_j||_2 in grid units; equals sum over offsets of S(dy, dx) * sqrt(dy^2 + dx^2) "
         "/ queries with S the offset sums of the whole map (not cropped)"},
        {"mean_prefix_mass", "mean over the same queries of the weight on prefix keys"},
        {"uniform_mean_distance",
         "mean_distance of attention uniform over each row's admissible keys S_i (every key; on window layers the "
         "query's window, or its window's region under Swin's mask; per-head windows the head's own): mean over "
         "every spatial query of (1 / |S_i|) sum over spatial j in S_i of ||p_i - p_j||_2, prefix keys counted in "
         "|S_i| with no distance; the yardstick mean_distance is read against"},
        {"spatial_reduction",
         "layers whose keys lie on a reduced h x w grid (format.md 1c): a key's position is its cell's "
         "centre in query grid units, ((ky + 0.5) H / h - 0.5, (kx + 0.5) W / w - 0.5), and D_i is summed "
         "directly; the offset map is on the key grid, (dy, dx) = key cell minus the query's key cell "
         "(floor((y + 0.5) h / H), floor((x + 0.5) w / W)), and such cells say offset_grid = keys"},
        {"signed_weights", "A as the paradigm defines it: inline and mala rows keep their negative weights"},
        {"flagged_queries", "spatial queries whose row is not Ok (non-finite, zero denominator), left out"},
        {"groups", "'all' over every image analysed, then one group per label of /labels"},
    };
}

json localityToJson(const LocalityReport& report, int radius) {
    json j;
    j["format"] = "attnlens.locality";
    j["format_version"] = 1;
    j["definitions"] = localityDefinitions();
    j["input"] = {{"dump", report.dump.path}};
    json paradigms = json::array();
    for (const Paradigm& p : report.paradigms) paradigms.push_back(p.toJson());
    j["paradigms"] = paradigms;
    j["selection"] = {{"layers", report.request.layers},
                      {"images", report.request.images},
                      {"per_label", report.request.perLabel},
                      {"offset_radius", radius < 0 ? json(nullptr) : json(radius)}};
    const auto uniformOf = [&](int layer, int head) {
        const auto found = report.uniformDistance.find({layer, head});
        return found == report.uniformDistance.end() ? std::numeric_limits<double>::quiet_NaN() : found->second;
    };
    json groups = json::array();
    for (const LocalityGroup& g : report.groups) {
        json cells = json::array();
        for (const LocalityCell& c : g.cells) {
            const LocalityAccumulator& a = c.sums;
            const int ry = radius < 0 ? a.gridH - 1 : std::min(radius, a.gridH - 1);
            const int rx = radius < 0 ? a.gridW - 1 : std::min(radius, a.gridW - 1);
            json mean = json::array(), count = json::array();
            for (int dy = -ry; dy <= ry; ++dy) {
                json mr = json::array(), cr = json::array();
                for (int dx = -rx; dx <= rx; ++dx) {
                    const double m = a.offsetMean(dy, dx);
                    mr.push_back(std::isfinite(m) ? json(m) : json(nullptr));
                    cr.push_back(a.offsetCount[a.cell(dy, dx)]);
                }
                mean.push_back(std::move(mr));
                count.push_back(std::move(cr));
            }
            auto finite = [](double v) { return std::isfinite(v) ? json(v) : json(nullptr); };
            cells.push_back({{"layer", report.dump.layers[std::size_t(c.layer)].name},
                             {"layer_index", c.layer},
                             {"head", c.head},
                             {"paradigm", report.paradigms[std::size_t(c.paradigm)].name},
                             {"grid", {a.gridH, a.gridW}},
                             {"queries", a.queries},
                             {"flagged_queries", a.flagged},
                             {"mean_distance", finite(a.meanDistance())},
                             {"uniform_mean_distance", finite(uniformOf(c.layer, c.head))},
                             {"mean_prefix_mass", finite(a.meanPrefixMass())},
                             {"images", c.images},
                             {"offset_map", {{"radius", {ry, rx}}, {"mean", mean}, {"count", count}}}});
            if (a.directDistance) cells.back()["offset_grid"] = "keys";
        }
        groups.push_back({{"name", g.name},
                          {"label", g.label ? json(*g.label) : json(nullptr)},
                          {"images", g.images},
                          {"cells", cells}});
    }
    j["groups"] = groups;
    j["seconds"] = report.seconds;
    j["notes"] = report.notes;
    json skipped = json::array();
    for (const SkippedLayer& skip : report.skipped)
        skipped.push_back({{"image", skip.image},
                           {"layer", report.dump.layers[std::size_t(skip.layer)].name},
                           {"layer_position", skip.layer},
                           {"message", skip.message}});
    j["skipped"] = skipped;
    return j;
}

std::string localityText(const json& j) {
    // One line per top-level field and per cell: greppable, and without the pretty printer's line
    // per number (a map is a few hundred numbers).
    std::string out = "{\n";
    bool firstKey = true;
    for (auto it = j.begin(); it != j.end(); ++it) {
        out += firstKey ? " " : ",\n ";
        firstKey = false;
        out += json(it.key()).dump() + ": ";
        if (it.key() != "groups") {
            out += it.value().dump();
            continue;
        }
        out += "[";
        bool firstGroup = true;
        for (const json& g : it.value()) {
            out += firstGroup ? "\n  {" : ",\n  {";
            firstGroup = false;
            bool firstField = true;
            for (auto f = g.begin(); f != g.end(); ++f) {
                if (!firstField) out += ", ";
                firstField = false;
                out += json(f.key()).dump() + ": ";
                if (f.key() != "cells") {
                    out += f.value().dump();
                    continue;
                }
                out += "[";
                bool firstCell = true;
                for (const json& c : f.value()) {
                    out += firstCell ? "\n   " : ",\n   ";
                    firstCell = false;
                    out += c.dump();
                }
                out += "\n  ]";
            }
            out += "}";
        }
        out += "\n ]";
    }
    return out + "\n}\n";
}

}  // namespace attnlens
