// Report files written as the analysis runs: the atomic file writer behind every output file, and
// the analyze report streamed record by record (issue 14: memory bounded by the work in flight).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "attnlens/analysis/report.h"
#include "attnlens/error.h"
#include "attnlens/output_path.h"
#include "attnlens/text.h"

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

ReportStream::ReportStream(const std::string& path, const std::vector<std::string>& inputs,
                           const AnalysisReport& header, const ToolInfo& tool)
    : report_(&header), summary_(header.paradigms) {
    provenance_ = reportProvenanceJson(header, tool);
    if (path.empty()) return;
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

void ReportStream::write(std::vector<HeadRecord>&& records) {
    std::string lines;
    for (const HeadRecord& r : records) {
        const json record = recordJson(*report_, r);
        summary_.add(r, report_->dump.layers[std::size_t(r.layer)].name);
        if (file_) {
            lines += records_ == 0 ? "\n  " : ",\n  ";
            lines += record.dump(-1, ' ', false, json::error_handler_t::replace);
        }
        ++records_;
    }
    if (file_) file_->append(lines);
}

json ReportStream::finish(const AnalysisReport& report) {
    json tail = reportOutcomeJson(report);
    summary_.addSkipped(std::int64_t(report.skipped.size()));
    tail["summary"] = summary_.toJson();
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
