// Report files written as the analysis runs: the atomic file writer behind every output file, and
// the analyze report streamed record by record (issue 14: memory bounded by the work in flight).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>

#include "attnlens/analysis/report.h"
#include "attnlens/io/error.h"
#include "attnlens/io/output_path.h"
#include "attnlens/io/text.h"

namespace attnlens {

using nlohmann::json;

AtomicFileWriter::AtomicFileWriter(const std::string& path, const std::vector<std::string>& forbidden)
    : path_(path), shown_("'" + printableText(path) + "'") {
    namespace fs = std::filesystem;
    // Not the input, a directory, a symbolic link or a device node (checked again here: the
    // callers check before their work starts, which can take hours).
    checkOutputPath(path, forbidden);
    const fs::path target(path);
    const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
    temporary_ = (dir / ("." + target.filename().string() + ".tmp-" + std::to_string(::getpid()))).string();
    registration_ = TemporaryFileRegistration(temporary_);
    fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) throwOutput("cannot write " + shown_ + ": " + std::strerror(errno));
}

AtomicFileWriter::~AtomicFileWriter() { discard(); }

void AtomicFileWriter::discard() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    if (!temporary_.empty()) ::unlink(temporary_.c_str());
    temporary_.clear();
    registration_.release();
}

void AtomicFileWriter::fail(const std::string& why) {
    discard();
    throwOutput("cannot write " + shown_ + ": " + why);
}

void AtomicFileWriter::append(std::string_view text) {
    if (fd_ < 0) throwOutput("cannot write " + shown_ + ": the file was already closed");
    buffer_.append(text);
    if (buffer_.size() >= kFlushBytes) flush();
}

void AtomicFileWriter::flush() {
    std::size_t done = 0;
    while (done < buffer_.size()) {
        const ssize_t n = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) fail(n < 0 ? std::strerror(errno) : "nothing was written");
        done += std::size_t(n);
    }
    buffer_.clear();
}

void AtomicFileWriter::commit() {
    if (fd_ < 0) throwOutput("cannot write " + shown_ + ": the file was already closed");
    flush();
    const bool synced = ::fsync(fd_) == 0;
    const int syncError = errno;
    const int closed = ::close(fd_);
    const int closeError = errno;
    fd_ = -1;
    if (!synced || closed != 0) fail(std::strerror(synced ? closeError : syncError));
    if (::rename(temporary_.c_str(), path_.c_str()) != 0) fail(std::strerror(errno));
    temporary_.clear();
    registration_.release();
}

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

RecordDetail parseRecordDetail(const std::string& text) {
    if (text == "json") return RecordDetail::Json;
    if (text == "hdf5") return RecordDetail::Hdf5;
    if (text == "none") return RecordDetail::None;
    throwUsage("record detail: must be json, hdf5 or none, got '" + printableText(text) + "'");
}

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
