// The analyze report streamed record by record (issue 14: memory bounded by the work in flight),
// through core's AtomicFileWriter.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>

#include "attnlens/analysis/report.h"
#include "attnlens/io/error.h"
#include "attnlens/io/name_table.h"
#include "attnlens/io/output_path.h"
#include "attnlens/io/text.h"

namespace attnlens {

using nlohmann::json;

namespace {

// A top-level field as reportText() writes it: one space of indentation, nested fields one deeper.
void appendField(std::string& out, const std::string& key, const json& value) {
    out += json(key).dump();
    out += ": ";
    const std::string text = value.dump(1, ' ', false, json::error_handler_t::replace);
    for (char c : text) {
        out += c;
        if (c == '\n') out += ' ';
    }
}

}  // namespace

namespace {
constexpr NameTable<RecordDetail, 3> kRecordDetailNames{
    {{{RecordDetail::Json, "json"}, {RecordDetail::Hdf5, "hdf5"}, {RecordDetail::None, "none"}}}};
}  // namespace

RecordDetail parseRecordDetail(const std::string& text) { return kRecordDetailNames.parse(text, "record detail"); }

std::string recordTableOf(const nlohmann::json& report, const std::string& reportPath) {
    namespace fs = std::filesystem;
    if (!report.contains("record_detail") || report["record_detail"].value("format", "") != "hdf5") return {};
    const fs::path file(report["record_detail"].at("file").get<std::string>());
    if (file.is_absolute()) return file.string();
    const fs::path folder = fs::path(reportPath).parent_path();
    return (folder.empty() ? file : folder / file).string();
}

ReportStream::ReportStream(const std::string& path, const std::vector<std::string>& inputs,
                           const AnalysisReport& header, const ToolInfo& tool, RecordDetail detail,
                           const std::string& tablePath)
    : report_(&header), summary_(header.paradigms), path_(path), detail_(detail) {
    namespace fs = std::filesystem;
    provenance_ = reportProvenanceJson(header, tool);
    if (path.empty()) {
        if (detail != RecordDetail::Json)
            throwUsage("record detail: " + std::string(detail == RecordDetail::Hdf5 ? "hdf5" : "none") +
                       " needs a report file (the summary and the records' place are written there)");
        return;
    }
    if (detail == RecordDetail::Hdf5) {
        const std::string table = tablePath.empty() ? defaultRecordTablePath(path) : tablePath;
        std::vector<std::string> forbidden = inputs;
        forbidden.push_back(path);
        checkOutputPath(table, forbidden);
        const fs::path folder = fs::absolute(fs::path(path)).parent_path();
        const fs::path relative = fs::absolute(fs::path(table)).lexically_relative(folder);
        tableFile_ = relative.empty() ? fs::absolute(fs::path(table)).string() : relative.string();
        table_ = std::make_unique<RecordTableWriter>(table, header);
    }
    file_.emplace(path, inputs);
    std::string text = "{";
    bool first = true;
    for (const auto& [key, value] : provenance_.items()) {
        text += first ? "\n " : ",\n ";
        first = false;
        appendField(text, key, value);
    }
    text += ",\n \"results\": [";
    file_->append(text);
}

ReportStream::~ReportStream() = default;

void ReportStream::write(std::vector<HeadRecord>&& records) {
    std::string lines;
    const bool jsonRecords = file_ && detail_ == RecordDetail::Json;
    for (const HeadRecord& r : records) {
        const auto label = report_->labels.find(r.image);
        summary_.add(r, report_->dump.layers[std::size_t(r.layer)].name,
                     label == report_->labels.end() ? std::nullopt : std::optional<std::int64_t>(label->second));
        if (jsonRecords) {
            lines += records_ == 0 ? "\n  " : ",\n  ";
            lines += recordJson(*report_, r).dump(-1, ' ', false, json::error_handler_t::replace);
        }
        if (table_) table_->add(r);
        ++records_;
    }
    if (jsonRecords) file_->append(lines);
}

json ReportStream::finish(const AnalysisReport& report) {
    json tail = reportOutcomeJson(report);
    summary_.addSkipped(std::int64_t(report.skipped.size()));
    tail["summary"] = summary_.toJson();
    if (detail_ == RecordDetail::Hdf5) {
        tail["record_detail"] = recordTableJson(table_->columns(), tableFile_, records_);
    } else if (detail_ == RecordDetail::None) {
        tail["record_detail"] = {{"format", "none"},
                                 {"records", records_},
                                 {"note", "records were summarised only (analyze --records none)"}};
    }
    if (detail_ != RecordDetail::Json) tail["summary_state"] = summary_.stateJson();
    // The table and the report are renamed as a pair: another run to the same -o cannot put its
    // report beside this run's table (or the other way round).
    std::optional<OutputDirectoryLock> pair;
    if (table_ && file_) pair.emplace(path_);
    if (table_) table_->commit();  // before the report that names it
    if (file_) {
        std::string text = records_ == 0 ? "]" : "\n ]";
        for (const auto& [key, value] : tail.items()) {
            text += ",\n ";
            appendField(text, key, value);
        }
        text += "\n}\n";
        file_->append(text);
        file_->commit();
    }
    json all = provenance_;
    for (const auto& [key, value] : tail.items()) all[key] = value;
    return all;
}

}  // namespace attnlens
