// The summary of a report (ReportSummary): means per paradigm, layer, head, label and model, and its exact state.
#include "attnlens/analysis/report.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <string_view>

#include "finite_mean.h"
#include "summary_aggregate.h"

namespace attnlens {

using detail::FiniteMean;
using nlohmann::json;
using report_detail::Aggregate;

struct ReportSummary::State {
    std::vector<std::string> order;
    // Indexed by the paradigm's position in `order`.
    std::vector<Aggregate> overall;
    std::vector<std::map<int, Aggregate>> perLayer;  // layer position ->
    // Confused pairs per image, per model (modelOfLayer of the record's layer) -> image ->; the
    // whole dump's count of an image is the sum over the models.
    std::vector<std::map<std::string, std::map<int, std::int64_t>>> perModelImage;
    std::vector<std::map<std::pair<int, int>, Aggregate>> perHead;  // (layer position, head) ->
    std::vector<std::map<std::int64_t, Aggregate>> perLabel;        // the image's label ->
    std::map<int, std::int64_t> imageLabels;                        // images with a record and a label
    std::map<int, std::string> layerNames;
    bool anyConfusion = false;
    std::int64_t skipped = 0;

    explicit State(std::vector<std::string> paradigms)
        : order(std::move(paradigms)),
          overall(order.size()),
          perLayer(order.size()),
          perModelImage(order.size()),
          perHead(order.size()),
          perLabel(order.size()) {}
};

ReportSummary::ReportSummary(std::vector<std::string> paradigmOrder)
    : state_(std::make_unique<State>(std::move(paradigmOrder))) {}

ReportSummary::ReportSummary(const std::vector<Paradigm>& paradigms)
    : ReportSummary([&] {
          std::vector<std::string> order;
          for (const auto& p : paradigms) order.push_back(p.name);
          return order;
      }()) {}

ReportSummary::ReportSummary(const AnalysisReport& report) : ReportSummary(report.paradigms) {
    for (const HeadRecord& r : report.records) {
        const auto label = report.labels.find(r.image);
        add(r, report.dump.layers[std::size_t(r.layer)].name,
            label == report.labels.end() ? std::nullopt : std::optional<std::int64_t>(label->second));
    }
}

ReportSummary::~ReportSummary() = default;
ReportSummary::ReportSummary(ReportSummary&&) noexcept = default;
ReportSummary& ReportSummary::operator=(ReportSummary&&) noexcept = default;

void ReportSummary::add(const HeadRecord& r, const std::string& layerName, std::optional<std::int64_t> label) {
    State& s = *state_;
    if (r.paradigm < 0 || std::size_t(r.paradigm) >= s.order.size()) return;  // not summarised
    const auto p = std::size_t(r.paradigm);
    s.overall[p].add(r.stats);
    s.perLayer[p][r.layer].add(r.stats);
    s.perHead[p][{r.layer, r.head}].add(r.stats);
    if (label) {
        s.perLabel[p][*label].add(r.stats);
        s.imageLabels[r.image] = *label;
    }
    s.layerNames[r.layer] = layerName;
    std::int64_t& confused = s.perModelImage[p][modelOfLayer(layerName)][r.image];
    if (r.stats.confusion) {
        s.anyConfusion = true;
        confused += r.stats.confusion->confusedPairs;
    }
}

void ReportSummary::add(const nlohmann::json& record, std::optional<std::int64_t> label) {
    add(recordFromJson(record, state_->order), record.at("layer").get<std::string>(), label);
}

namespace {

// A summary mean's field as the callers name it; std::invalid_argument naming them all otherwise (a
// misspelt field would read NaN everywhere, as a layer without records).
void requireSummaryMean(std::string_view field) {
    if (findSummaryMean(field)) return;
    std::string known;
    for (const SummaryMean& m : summaryMeans()) known += (known.empty() ? "" : ", ") + std::string(m.field);
    throw std::invalid_argument("no summary mean is \"" + std::string(field) + "\"; the summary means are " + known);
}

}  // namespace

double ReportSummary::layerMean(int paradigm, int layerPosition, std::string_view field, int k) const {
    requireSummaryMean(field);
    const auto& layers = state_->perLayer.at(std::size_t(paradigm));
    const auto it = layers.find(layerPosition);
    return it == layers.end() ? std::numeric_limits<double>::quiet_NaN() : it->second.mean(field, k);
}

ReportSummary::QueryCoverage ReportSummary::layerJensenShannonCoverage(int paradigm, int layerPosition) const {
    const auto& layers = state_->perLayer.at(std::size_t(paradigm));
    const auto it = layers.find(layerPosition);
    return it == layers.end() ? QueryCoverage{} : it->second.coverageOf("distance.jensen_shannon_mean");
}

double ReportSummary::headMean(int paradigm, int layerPosition, int head, std::string_view field, int k) const {
    requireSummaryMean(field);
    const auto& heads = state_->perHead.at(std::size_t(paradigm));
    const auto it = heads.find({layerPosition, head});
    return it == heads.end() ? std::numeric_limits<double>::quiet_NaN() : it->second.mean(field, k);
}

double ReportSummary::labelMean(int paradigm, std::int64_t label, std::string_view field, int k) const {
    requireSummaryMean(field);
    const auto& labels = state_->perLabel.at(std::size_t(paradigm));
    const auto it = labels.find(label);
    return it == labels.end() ? std::numeric_limits<double>::quiet_NaN() : it->second.mean(field, k);
}

std::map<std::int64_t, std::int64_t> ReportSummary::imagesPerLabel() const {
    std::map<std::int64_t, std::int64_t> out;
    for (const auto& [image, label] : state_->imageLabels) ++out[label];
    return out;
}

std::int64_t ReportSummary::records() const {
    std::int64_t n = 0;
    for (const Aggregate& a : state_->overall) n += a.records;
    return n;
}

nlohmann::json ReportSummary::stateJson() const {
    const State& s = *state_;
    json j;
    j["schema"] = "attnlens.summary_state";
    j["schema_version"] = 1;
    j["note"] = "the summary's running sums and counts ([sum, count] per mean), for merge; read \"summary\" instead";
    j["paradigms"] = s.order;
    json layers = json::array();
    for (const auto& [position, name] : s.layerNames) layers.push_back({position, name});
    j["layer_names"] = std::move(layers);
    json overall = json::array(), perLayer = json::array(), perHead = json::array(), perLabel = json::array(),
         confusion = json::array();
    for (std::size_t p = 0; p < s.order.size(); ++p) {
        overall.push_back(s.overall[p].state(true));
        json l = json::array(), h = json::array(), b = json::array(), c = json::object();
        for (const auto& [position, aggregate] : s.perLayer[p]) l.push_back({position, aggregate.state(false)});
        for (const auto& [key, aggregate] : s.perHead[p]) h.push_back({key.first, key.second, aggregate.state(false)});
        for (const auto& [label, aggregate] : s.perLabel[p]) b.push_back({label, aggregate.state(false)});
        for (const auto& [model, perImage] : s.perModelImage[p]) {
            json counts = json::array();
            for (const auto& [image, count] : perImage) counts.push_back({image, count});
            c[model] = std::move(counts);
        }
        perLayer.push_back(std::move(l));
        perHead.push_back(std::move(h));
        perLabel.push_back(std::move(b));
        confusion.push_back(std::move(c));
    }
    j["overall"] = std::move(overall);
    j["per_layer"] = std::move(perLayer);
    j["per_head"] = std::move(perHead);
    j["per_label"] = std::move(perLabel);
    j["confusion_per_model_image"] = std::move(confusion);
    json labels = json::array();
    for (const auto& [image, label] : s.imageLabels) labels.push_back({image, label});
    j["image_labels"] = std::move(labels);
    j["any_confusion"] = s.anyConfusion;
    j["skipped"] = s.skipped;
    return j;
}

ReportSummary ReportSummary::fromStateJson(const nlohmann::json& j) {
    if (!j.is_object() || j.value("schema", json()) != "attnlens.summary_state" ||
        j.value("schema_version", json()) != 1)
        throw std::invalid_argument("not an attnlens.summary_state of schema_version 1");
    ReportSummary out(j.at("paradigms").get<std::vector<std::string>>());
    State& s = *out.state_;
    const std::size_t paradigms = s.order.size();
    for (const json& l : j.at("layer_names")) s.layerNames[l.at(0).get<int>()] = l.at(1).get<std::string>();
    const auto perParadigm = [&](const char* key) -> const json& {
        const json& v = j.at(key);
        if (!v.is_array() || v.size() != paradigms)
            throw std::invalid_argument(std::string(key) + " must have one entry per paradigm");
        return v;
    };
    const json &overall = perParadigm("overall"), &perLayer = perParadigm("per_layer"),
               &perHead = perParadigm("per_head"), &perLabel = perParadigm("per_label"),
               &confusion = perParadigm("confusion_per_model_image");
    const auto knownLayer = [&](int position) {
        if (!s.layerNames.count(position))
            throw std::invalid_argument("layer position " + std::to_string(position) + " is not in layer_names");
        return position;
    };
    for (std::size_t p = 0; p < paradigms; ++p) {
        s.overall[p] = Aggregate::fromState(overall[p]);
        for (const json& e : perLayer[p]) s.perLayer[p][knownLayer(e.at(0).get<int>())] = Aggregate::fromState(e.at(1));
        for (const json& e : perHead[p])
            s.perHead[p][{knownLayer(e.at(0).get<int>()), e.at(1).get<int>()}] = Aggregate::fromState(e.at(2));
        for (const json& e : perLabel[p]) s.perLabel[p][e.at(0).get<std::int64_t>()] = Aggregate::fromState(e.at(1));
        for (const auto& [model, counts] : confusion[p].items())
            for (const json& e : counts) s.perModelImage[p][model][e.at(0).get<int>()] = e.at(1).get<std::int64_t>();
    }
    for (const json& e : j.at("image_labels")) s.imageLabels[e.at(0).get<int>()] = e.at(1).get<std::int64_t>();
    s.anyConfusion = j.at("any_confusion").get<bool>();
    s.skipped = j.at("skipped").get<std::int64_t>();
    return out;
}

void ReportSummary::merge(const ReportSummary& other) {
    State& s = *state_;
    const State& o = *other.state_;
    if (s.order != o.order) throw std::invalid_argument("summaries of different paradigms");
    for (const auto& [position, name] : o.layerNames) {
        const auto [it, inserted] = s.layerNames.emplace(position, name);
        if (!inserted && it->second != name)
            throw std::invalid_argument("layer position " + std::to_string(position) + " is " + it->second +
                                        " in one summary and " + name + " in the other");
    }
    for (std::size_t p = 0; p < s.order.size(); ++p) {
        s.overall[p].merge(o.overall[p]);
        for (const auto& [key, aggregate] : o.perLayer[p]) s.perLayer[p][key].merge(aggregate);
        for (const auto& [key, aggregate] : o.perHead[p]) s.perHead[p][key].merge(aggregate);
        for (const auto& [key, aggregate] : o.perLabel[p]) s.perLabel[p][key].merge(aggregate);
        for (const auto& [model, perImage] : o.perModelImage[p])
            for (const auto& [image, count] : perImage) s.perModelImage[p][model][image] += count;
    }
    for (const auto& [image, label] : o.imageLabels) s.imageLabels[image] = label;
    s.anyConfusion = s.anyConfusion || o.anyConfusion;
    s.skipped += o.skipped;
}

void ReportSummary::addSkipped(std::int64_t imageLayers) { state_->skipped += imageLayers; }

std::vector<std::string> ReportSummary::models() const {
    std::vector<std::string> out;
    for (const auto& [position, name] : state_->layerNames) {
        std::string model = modelOfLayer(name);
        if (std::find(out.begin(), out.end(), model) == out.end()) out.push_back(std::move(model));
    }
    return out;
}

double ReportSummary::modelMean(int paradigm, const std::string& model, std::string_view field, int k) const {
    requireSummaryMean(field);
    FiniteMean pooled;
    for (const auto& [position, aggregate] : state_->perLayer.at(std::size_t(paradigm))) {
        if (modelOfLayer(state_->layerNames.at(position)) != model) continue;
        if (const FiniteMean* m = aggregate.meanOf(field, k)) {
            pooled.sum += m->sum;
            pooled.n += m->n;
        }
    }
    return pooled.mean();
}

std::map<int, std::int64_t> ReportSummary::confusionPerImage(int paradigm,
                                                             const std::optional<std::string>& model) const {
    const auto& perModel = state_->perModelImage.at(std::size_t(paradigm));
    if (model) {
        const auto it = perModel.find(*model);
        return it == perModel.end() ? std::map<int, std::int64_t>{} : it->second;
    }
    std::map<int, std::int64_t> total;
    for (const auto& [name, perImage] : perModel)
        for (const auto& [image, count] : perImage) total[image] += count;
    return total;
}

std::vector<std::int64_t> ReportSummary::confusionHistogram(int paradigm, int minBins,
                                                            const std::optional<std::string>& model) const {
    std::vector<std::int64_t> bins(std::size_t(std::max(0, minBins)), 0);
    for (const auto& [image, count] : confusionPerImage(paradigm, model)) {
        const auto bin = std::size_t(confusionBin(count));
        if (bins.size() <= bin) bins.resize(bin + 1, 0);
        ++bins[bin];
    }
    return bins;
}

nlohmann::json ReportSummary::toJson() const {
    const State& s = *state_;
    const std::vector<std::string> modelNames = models();
    auto histogramJson = [](const std::vector<std::int64_t>& hist) {
        json labels = json::array();
        for (int b = 0; b < int(hist.size()); ++b) labels.push_back(confusionBinLabel(b));
        return json{{"bins", labels}, {"images", hist}};
    };
    json out = json::array();
    for (std::size_t p = 0; p < s.order.size(); ++p) {
        json e = s.overall[p].toJson();
        e["paradigm"] = s.order[p];
        json layers = json::array();
        for (const auto& [lp, agg] : s.perLayer[p]) {
            json le = agg.toJson();
            le.erase("magnitude_mean");
            le["layer"] = s.layerNames.at(lp);
            le["layer_position"] = lp;
            layers.push_back(le);
        }
        e["layers"] = layers;
        json heads = json::array();
        for (const auto& [key, agg] : s.perHead[p]) {
            json he = agg.toJson();
            he.erase("magnitude_mean");
            he["layer"] = s.layerNames.at(key.first);
            he["layer_position"] = key.first;
            he["head"] = key.second;
            heads.push_back(std::move(he));
        }
        e["heads"] = std::move(heads);
        if (!s.perLabel[p].empty()) {
            const std::map<std::int64_t, std::int64_t> images = imagesPerLabel();
            json labels = json::array();
            for (const auto& [label, agg] : s.perLabel[p]) {
                json be = agg.toJson();
                be.erase("magnitude_mean");
                be["label"] = label;
                be["images"] = images.count(label) ? images.at(label) : 0;
                labels.push_back(std::move(be));
            }
            e["labels"] = std::move(labels);
        }
        if (s.anyConfusion) {
            json perImg = json::array();
            for (const auto& [img, count] : confusionPerImage(int(p)))
                perImg.push_back({{"image", img}, {"confused_pairs", count}});
            e["confusion_per_image"] = perImg;
            e["confusion_histogram"] = histogramJson(confusionHistogram(int(p), 0));
            // Several models in one dump (layer names <model>.<block>): their images' counts
            // summed over all layers mix the models, so each model gets its own histogram too.
            if (modelNames.size() > 1) {
                json perModel = json::array();
                for (const std::string& model : modelNames) {
                    json h = histogramJson(confusionHistogram(int(p), 0, model));
                    h["model"] = model;
                    perModel.push_back(std::move(h));
                }
                e["confusion_histogram_per_model"] = std::move(perModel);
            }
        }
        out.push_back(e);
    }
    json summary = {
        {"per_paradigm", out},
        {"note",
         "means over (image, layer, head) records (per_paradigm[].layers: per layer; .heads: per (layer, "
         "head); .labels: per image label, for dumps with /labels); confusion counts summed over layers and "
         "heads per image"}};
    if (s.skipped > 0) {
        summary["skipped_image_layers"] = s.skipped;
        summary["note"] = summary["note"].get<std::string>() +
                          "; (image, layer)s listed in \"skipped\" could not be read and have no records";
    }
    return summary;
}

std::map<int, std::int64_t> imageLabelsOf(const nlohmann::json& report) {
    std::map<int, std::int64_t> out;
    if (report.contains("image_labels"))
        for (const json& e : report["image_labels"]) out[e.at("image").get<int>()] = e.at("label").get<std::int64_t>();
    return out;
}

nlohmann::json summarize(const nlohmann::json& report) {
    std::vector<std::string> order;
    for (const auto& p : report.at("paradigms")) order.push_back(p.at("name").get<std::string>());
    ReportSummary summary(std::move(order));
    const std::map<int, std::int64_t> labels = imageLabelsOf(report);
    for (const auto& r : report.at("results")) {
        const auto it = labels.find(r.at("image").get<int>());
        summary.add(r, it == labels.end() ? std::nullopt : std::optional<std::int64_t>(it->second));
    }
    if (report.contains("skipped")) summary.addSkipped(std::int64_t(report["skipped"].size()));
    return summary.toJson();
}

}  // namespace attnlens
