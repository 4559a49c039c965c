#pragma once
// The JSON form of an analysis ("attnlens.analysis" version 1, resources/analysis.schema.json), its
// summary tables, merging of sharded runs, and atomic file output.
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <memory>

#include <nlohmann/json.hpp>

#include "attnlens/analysis/dump_analysis.h"
#include "attnlens/analysis/record_table.h"
#include "attnlens/analysis/study.h"
#include "attnlens/io/atomic_file.h"

namespace attnlens {

struct ToolInfo {
    std::string name = "attnlens";
    std::string version = ATTNLENS_VERSION;
    std::string command;  // the command line, for provenance
};

nlohmann::json reportToJson(const AnalysisReport& report, const ToolInfo& tool);
// The parts of reportToJson(), for writing a report while its records arrive: the provenance known
// before any record (schema, tool, created_utc, selection, paradigms, options), one "results" entry,
// and what is known only at the end (input with its SHA-256, non_finite, timing).
nlohmann::json reportProvenanceJson(const AnalysisReport& report, const ToolInfo& tool);
nlohmann::json recordJson(const AnalysisReport& report, const HeadRecord& record);
nlohmann::json reportOutcomeJson(const AnalysisReport& report);

// One "results" entry of a report as the record analyze made it from (the inverse of recordJson:
// null read as NaN, values recordJson derives from others left to be derived again). `paradigms`
// are the report's paradigm names; a name not among them gives paradigm -1.
HeadRecord recordFromJson(const nlohmann::json& record, const std::vector<std::string>& paradigms);

// A mean the summary gives per cell (a paradigm, layer, head, label or model: ReportSummary::layerMean
// and the others): its field in a cell of the summary JSON ("entropy_mean",
// "distance.jensen_shannon_mean"; "local[k].mean" for those per window size k, the k a number in the
// JSON), the built-in statistic whose running sums hold it, and its title. Each statistic lists its own.
struct SummaryMean {
    std::string_view field;
    std::string_view statistic;
    const char* title;  // UTF-8
    bool perK = false;
};
// Every built-in statistic's summary means, in the order of the statistics.
std::span<const SummaryMean> summaryMeans();
// nullptr when no summary mean is this field.
const SummaryMean* findSummaryMean(std::string_view field);

// The summary tables, accumulated one record at a time: per paradigm and per (paradigm, layer)
// means, confusion counts per image and their histogram. Holds one aggregate per (paradigm, layer)
// and one count per (paradigm, image), never the records. The one aggregation of records: the
// report's "summary" (analyze, merge) and the desktop program's per-layer and confusion plots.
class ReportSummary {
public:
    explicit ReportSummary(const std::vector<Paradigm>& paradigms);
    explicit ReportSummary(std::vector<std::string> paradigmOrder);
    // Over every record of the report.
    explicit ReportSummary(const AnalysisReport& report);
    ~ReportSummary();
    ReportSummary(ReportSummary&&) noexcept;
    ReportSummary& operator=(ReportSummary&&) noexcept;
    // record.paradigm indexes the paradigm order; records of other paradigms are left out. `label`:
    // the record's image label (the dump's /labels), for the per-label tables.
    void add(const HeadRecord& record, const std::string& layerName, std::optional<std::int64_t> label = std::nullopt);
    // A "results" entry of a report (recordFromJson).
    void add(const nlohmann::json& record, std::optional<std::int64_t> label = std::nullopt);
    nlohmann::json toJson() const;
    // Every running sum and count ("summary_state" of reports written without JSON records):
    // fromStateJson(stateJson()) summarises exactly as this, and merge() adds another set of
    // records' summary as if its records had been added here. fromStateJson throws
    // std::invalid_argument or json::exception on a malformed state; merge std::invalid_argument
    // for another paradigm order or other layer names.
    nlohmann::json stateJson() const;
    static ReportSummary fromStateJson(const nlohmann::json& state);
    void merge(const ReportSummary& other);
    std::int64_t records() const;

    // Mean over the records of (paradigm, layer position), finite values only; NaN where there is
    // nothing to average.
    // `field` is a summary mean's (summaryMeans(); k for the per-k ones); std::invalid_argument
    // naming the fields where no statistic has it.
    double layerMean(int paradigm, int layerPosition, std::string_view field, int k = 0) const;
    // The queries behind a layer's Jensen-Shannon mean: `used` (rows without a negative weight under
    // either paradigm) of `of` compared (ok under both, total variation's); of = 0 where there is
    // no distance or a merged state from before it cannot say.
    struct QueryCoverage {
        std::int64_t used = 0, of = 0;
    };
    QueryCoverage layerJensenShannonCoverage(int paradigm, int layerPosition) const;
    // The same over the records of one head of a layer, and over the records of images with a label.
    double headMean(int paradigm, int layerPosition, int head, std::string_view field, int k = 0) const;
    double labelMean(int paradigm, std::int64_t label, std::string_view field, int k = 0) const;
    // Images with a record, per label.
    std::map<std::int64_t, std::int64_t> imagesPerLabel() const;
    // Mean over the records of `paradigm` in the layers of `model` (modelOfLayer of the layer's
    // name; "" for layers whose names name no model), finite values only; NaN where there is none.
    double modelMean(int paradigm, const std::string& model, std::string_view field, int k = 0) const;
    // Confused pairs per image (summed over layers and heads), for every image with a record; with
    // a model, over that model's layers only (and its images with a record).
    std::map<int, std::int64_t> confusionPerImage(int paradigm,
                                                  const std::optional<std::string>& model = std::nullopt) const;
    // Number of images per bin of confusionPerImage (confusionBin), at least `minBins` bins.
    std::vector<std::int64_t> confusionHistogram(int paradigm, int minBins = 1,
                                                 const std::optional<std::string>& model = std::nullopt) const;
    // The models of the layers with records (modelOfLayer), in layer order.
    std::vector<std::string> models() const;
    // (image, layer)s that had no records because they could not be read (AnalysisReport::skipped):
    // counted in toJson()'s "skipped_image_layers".
    void addSkipped(std::int64_t imageLayers);

private:
    struct State;
    std::unique_ptr<State> state_;
};

// Summary tables derived from the "results" array of a report JSON (a ReportSummary over them).
// Recomputed by merge.
nlohmann::json summarize(const nlohmann::json& report);
// A report's "image_labels" (image -> label; empty when it has none).
std::map<int, std::int64_t> imageLabelsOf(const nlohmann::json& report);
// Combines reports of disjoint image sets of one dump (same SHA-256, layers, heads, paradigms and
// options; reports without a SHA-256, from analyze --no-hash, need the same input path, size and
// dump description instead). Error(Input) naming the file and the mismatch otherwise.
// Reports without JSON records (record_detail) merge through their summary_state; `folded` holds the
// states foldSummaryState() already took out of them. The merged report's "coverage" says what the
// reports cover of the images they were meant to (checkMergeCoverage, study.h: a gap is refused
// unless `coverage.allowPartial`).
nlohmann::json mergeReports(const std::vector<nlohmann::json>& reports, const std::vector<std::string>& names,
                            const ToolInfo& tool, std::optional<ReportSummary> folded = std::nullopt,
                            const MergeCoverageOptions& coverage = {});
// For merging many shards in bounded memory: adds `report`'s summary_state to `into` (checked as
// merge checks it: Error(Input) naming `name`) and removes its summary_state and summary, which a
// report of many labels and images makes the bulk of its size, so that only the light parts of
// every shard are held at once. Nothing for reports without a summary_state (JSON records).
void foldSummaryState(nlohmann::json& report, const std::string& name, std::optional<ReportSummary>& into);
// For merged reports with record tables (record_detail format "hdf5"): concatenates the inputs'
// tables (each found through recordTableOf(reports[i], names[i])) into `outputTable`, in image
// order and block by block, checking every row against its report, and points the merged report's
// record_detail.file at it (relative to `outputReport`'s folder). Nothing for other reports.
void mergeRecordTables(const std::vector<nlohmann::json>& reports, const std::vector<std::string>& names,
                       nlohmann::json& merged, const std::string& outputReport, const std::string& outputTable,
                       const std::vector<std::string>& forbidden);
// The text of a report file: top-level fields indented by one space, and the "results" array with
// one record per line, so that a file of thousands of records stays greppable (one line per
// (image, layer, head, paradigm)) and is written fast. Records are serialised on the budget's
// threads (execution.h; by default every processor).
std::string reportText(const nlohmann::json& report, ThreadBudget threads = {});
// A readable table of the summary for terminals.
std::string formatSummary(const nlohmann::json& report);

// An analyze report written while the analysis runs (attnlens-cli analyze): the provenance first,
// then each record as analyzeDump's RecordSink hands it over, then the outcome and the summary.
// The same text and fields as reportText(reportToJson(...)), in another key order; memory stays
// bounded by the records in flight whatever the image count. An empty path keeps only the
// summary (for the terminal table).
//
// Record detail (analyze --records): Json puts every record in "results" (the default, as always);
// Hdf5 writes them to a record table at `tablePath` instead (record_table.h) and None keeps none.
// Both leave "results" empty and add "record_detail" (what and where) and "summary_state" (the
// summary's exact running sums, from which merge combines shards without records).
enum class RecordDetail { Json, Hdf5, None };
// "json", "hdf5", "none"; Error(Usage) "record detail: ..." otherwise (the CLI names --records).
RecordDetail parseRecordDetail(const std::string& text);

class ReportStream {
public:
    // `header` is the report analyzeDump passes to RecordSink::begin; it must outlive the stream.
    ReportStream(const std::string& path, const std::vector<std::string>& inputs, const AnalysisReport& header,
                 const ToolInfo& tool, RecordDetail detail = RecordDetail::Json, const std::string& tablePath = {});
    ~ReportStream();
    void write(std::vector<HeadRecord>&& records);
    // Writes the rest and renames the file into place; returns the report without "results"
    // (for formatSummary and the warnings).
    nlohmann::json finish(const AnalysisReport& report);
    std::int64_t records() const { return records_; }

private:
    const AnalysisReport* report_;
    ReportSummary summary_;
    nlohmann::json provenance_;
    std::optional<AtomicFileWriter> file_;
    std::string path_;  // the report's
    RecordDetail detail_ = RecordDetail::Json;
    std::string tableFile_;  // as the report names it: relative to the report's folder
    std::unique_ptr<RecordTableWriter> table_;
    std::int64_t records_ = 0;
};

// The record table a report names (its "record_detail" with format "hdf5"), as a path usable from
// here: relative names are relative to the report's folder. Empty for reports without one.
std::string recordTableOf(const nlohmann::json& report, const std::string& reportPath);

}  // namespace attnlens
