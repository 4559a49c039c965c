// attnlens-cli analyze (its --help text is in commands.cpp).
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "attnlens/analysis/blas_threads.h"
#include "attnlens/analysis/dump_analysis.h"
#include "attnlens/analysis/execution.h"
#include "attnlens/analysis/formats.h"
#include "attnlens/analysis/locality.h"
#include "attnlens/analysis/report.h"
#include "attnlens/analysis/rollout.h"
#include "attnlens/dump/dump.h"
#include "attnlens/dump/list_parser.h"
#include "attnlens/dump/open_check.h"
#include "attnlens/dump/synth.h"
#include "attnlens/io/error.h"
#include "attnlens/io/json_message.h"
#include "attnlens/io/output_path.h"
#include "attnlens/io/sha256.h"
#include "attnlens/io/signal_stack.h"
#include "attnlens/io/temporary_files.h"
#include "attnlens/io/text.h"
#include "option_text.h"

#include "cli_support.h"

using nlohmann::json;

namespace attnlens::cli {

namespace {

// --skip-existing: why `output` does not hold the whole report of this same run ("" when it does).
// Same command line, same dump (path, size, description, not changed since), same images, and its
// record table there; reports and their tables are renamed into place as a pair, so one that is
// there and parses is whole.
std::string whyNotThisRunsReport(const std::string& output, const std::string& command, const std::string& input,
                                 const DumpInfo& info, const std::vector<int>& images, const std::string& tablePath) {
    namespace fs = std::filesystem;
    json r;
    try {
        r = readJsonFile(output, "analyze");
    } catch (const Error& e) {
        return std::string("it is not a whole report (") + e.what() + ")";
    }
    if (!r.is_object() || r.value("schema", json()) != "attnlens.analysis" || r.value("schema_version", json()) != 1)
        return "it is not an attnlens analysis report";
    const json tool = r.value("tool", json::object());
    if (!tool.is_object() || tool.value("command", json()) != command)
        return "it was made by another command (" + printableText(tool.value("command", json()).dump(), 300) + ")";
    const json in = r.value("input", json::object());
    if (!in.is_object() || in.value("path", json()) != input || in.value("size_bytes", json()) != json(info.fileSize) ||
        in.value("dump", json()) != info.toJson())
        return "it is of another dump, or the dump changed size or layout";
    std::error_code ec;
    const auto dumpTime = fs::last_write_time(input, ec);
    const auto reportTime = fs::last_write_time(output, ec);
    if (!ec && dumpTime > reportTime) return "the dump was modified after it was written";
    std::vector<int> wanted = images;
    if (wanted.empty())
        for (int b = 0; b < info.images; ++b) wanted.push_back(b);
    const json selection = r.value("selection", json::object());
    if (!selection.is_object() || selection.value("images", json()) != json(wanted)) return "it covers other images";
    if (!tablePath.empty()) {
        const std::string table = recordTableOf(r, output);
        if (table.empty() || !fs::exists(table, ec) || !fs::equivalent(table, tablePath, ec) || ec ||
            fs::file_size(table, ec) == 0)
            return "its record table " + printableText(tablePath) + " is not there";
    }
    return {};
}

// Where the report and its records go (-o, --records, --records-file), checked against each other.
struct AnalyzeOutputs {
    std::optional<std::string> report;
    RecordDetail detail = RecordDetail::Json;
    std::string table;  // the record table of --records hdf5, else ""
};

AnalyzeOutputs analyzeOutputs(const Args& a) {
    AnalyzeOutputs out;
    out.report = a.get("-o");
    if (!out.report) out.report = a.get("--output");
    out.detail = parseRecordDetail(a.get("--records").value_or("json"));
    if (out.detail != RecordDetail::Json && !out.report)
        throwUsage("analyze: --records " + *a.get("--records") + " needs -o OUT.json (the report that names it)");
    if (a.get("--records-file") && out.detail != RecordDetail::Hdf5)
        throwUsage("analyze: --records-file is for --records hdf5");
    if (out.detail == RecordDetail::Hdf5)
        out.table = a.get("--records-file").value_or(defaultRecordTablePath(*out.report));
    return out;
}

// --shard K/N: the request's images become shard K of the selected images (the whole dump when none).
void applyShard(const std::string& text, const DumpInfo& info, AnalyzeRequest& req) {
    const auto [shard, shards] = parseShard(text, "--shard");
    StudyShard study;
    study.images = req.images;
    if (study.images.empty()) {  // the whole dump: planned before its list is made
        checkSelectionFits(info, std::size_t(std::max(info.images, 0)),
                           req.layers.empty() ? info.layers.size() : req.layers.size());
        for (int b = 0; b < info.images; ++b) study.images.push_back(b);
    }
    study.shards = shards;
    study.indices = {shard};
    req.images = shardImages(study.images, shard, shards);
    req.study = std::move(study);
}

// --skip-existing: whether the report there is this same run's (then it is kept), said either way.
bool keepsExistingReport(const std::string& command, const std::string& input, const DumpInfo& info,
                         const AnalyzeRequest& req, const AnalyzeOutputs& outputs) {
    if (!outputs.report) throwUsage("analyze: --skip-existing needs -o OUT.json (the report it looks for)");
    if (!std::filesystem::exists(*outputs.report)) return false;
    const std::string why = whyNotThisRunsReport(*outputs.report, command, input, info, req.images, outputs.table);
    if (why.empty()) {
        std::printf("kept %s: it holds this same run's report (--skip-existing)\n",
                    printableText(*outputs.report).c_str());
        return true;
    }
    std::fprintf(stderr, "note: redoing %s: %s\n", printableText(*outputs.report).c_str(), why.c_str());
    return false;
}

// Runs the plan with its records streamed into the outputs (a temporary file, renamed at the end,
// and the running summary: none is kept, so memory does not grow with the image count), and the
// input's SHA-256 computed beside it (for a dump of many gigabytes it takes as long as reading it;
// it stops with the analysis). Returns the report's JSON and the records written.
std::pair<json, std::int64_t> runStreamed(const DumpReader& reader, const AnalysisPlan& plan, const std::string& input,
                                          const AnalyzeOutputs& outputs, const ToolInfo& tool, bool hashInput,
                                          bool quiet, AnalysisReport& report) {
    ProgressBar bar(!quiet);
    std::atomic<bool> stopHash{false};
    std::future<std::string> hash;
    if (hashInput) hash = std::async(std::launch::async, [&] { return sha256File(input, &stopHash); });
    std::optional<ReportStream> stream;
    RecordSink sink;
    sink.begin = [&](const AnalysisReport& header) {
        stream.emplace(outputs.report.value_or(std::string()), std::vector<std::string>{input}, header, tool,
                       outputs.detail, outputs.table);
    };
    sink.write = [&](std::vector<HeadRecord>&& records) { stream->write(std::move(records)); };
    try {
        report = analyzeDump(
            reader, plan, [&](const AnalysisProgress& p) { bar(p); }, &gInterrupted, &sink);
    } catch (...) {
        stopHash = true;
        if (hash.valid()) hash.wait();
        throw;  // the stream's destructor removes its temporary file
    }
    if (hash.valid()) report.sha256 = hash.get();
    json j = stream->finish(report);
    return {std::move(j), stream->records()};
}

// What the terminal gets after a run: warnings, notes (the memory plan's is out already), the
// summary table, the record count and the files written.
void printAnalyzeOutcome(const json& j, const std::string& planNote, std::int64_t records, const AnalysisReport& report,
                         const AnalyzeOutputs& outputs) {
    for (const auto& nf : j["non_finite"])
        std::fprintf(stderr, "warning: non-finite value: %s\n", nf["message"].get<std::string>().c_str());
    for (const auto& note : j.value("notes", json::array()))
        if (note.get<std::string>() != planNote)
            std::fprintf(stderr, "note: %s\n", printableText(note.get<std::string>(), 1000).c_str());
    for (const auto& skipped : j.value("skipped", json::array()))
        std::fprintf(stderr, "warning: skipped image %d, layer %s: %s\n", skipped["image"].get<int>(),
                     printableText(skipped["layer"].get<std::string>()).c_str(),
                     printableText(skipped["message"].get<std::string>(), 1000).c_str());
    std::cout << formatSummary(j);
    std::printf("%lld records, %.2f s on %d threads\n", (long long)records, report.seconds,
                report.request.threads.count());
    if (outputs.report) std::printf("wrote %s\n", printableText(*outputs.report).c_str());
    if (!outputs.table.empty()) std::printf("wrote %s\n", printableText(outputs.table).c_str());
}

}  // namespace

int cmdAnalyze(int argc, char** argv) {
    const CommandOptions options = analyzeOptions().with(
        {{"-o", "--output", "--records", "--records-file", "--shard"}, {"--no-hash", "--quiet", "--skip-existing"}});
    Args a = parseArgs(argc, argv, 2, options.values, options.flags, "analyze");
    if (a.positional.size() != 1) throwUsage("analyze: expected one FILE");
    const std::string input = a.positional[0];
    const AnalyzeOutputs outputs = analyzeOutputs(a);
    AnalyzeRequest req = analyzeRequestFromText(a);
    auto reader = openDump(input);
    const DumpInfo& info = reader->info();
    analyzeSelectionFromText(a, info, req);
    if (auto s = a.get("--shard")) applyShard(*s, info, req);
    if (a.flag("--skip-existing") && keepsExistingReport(commandLine(argc, argv), input, info, req, outputs))
        return kExitOk;
    // Fail before hours of work, not after: the output must be writable and not the input.
    if (outputs.report) checkOutputWritable(*outputs.report, {input});
    if (!outputs.table.empty()) {
        checkRecordTableIsNotTheReport(outputs.table, *outputs.report);
        checkOutputWritable(outputs.table, {input, *outputs.report});
    }

    // Declared sizes too large for this machine are refused before anything is allocated (analyzeDump
    // checks the same; asked here first, so that the note comes before the progress bar).
    const AnalysisPlan plan = planAnalysis(info, req);
    if (!plan.memory.note.empty()) std::fprintf(stderr, "note: %s\n", plan.memory.note.c_str());

    ToolInfo tool;
    tool.name = "attnlens-cli";
    tool.command = commandLine(argc, argv);
    AnalysisReport report;
    // The hash is provenance for the report file.
    const auto [j, records] =
        runStreamed(*reader, plan, input, outputs, tool, !a.flag("--no-hash") && outputs.report.has_value(),
                    a.flag("--quiet"), report);
    printAnalyzeOutcome(j, plan.memory.note, records, report, outputs);
    return kExitOk;
}

}  // namespace attnlens::cli
