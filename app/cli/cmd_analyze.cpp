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

}  // namespace

int cmdAnalyze(int argc, char** argv) {
    const CommandOptions options = analyzeOptions().with(
        {{"-o", "--output", "--records", "--records-file", "--shard"}, {"--no-hash", "--quiet", "--skip-existing"}});
    Args a = parseArgs(argc, argv, 2, options.values, options.flags, "analyze");
    if (a.positional.size() != 1) throwUsage("analyze: expected one FILE");
    const std::string input = a.positional[0];
    std::optional<std::string> output = a.get("-o");
    if (!output) output = a.get("--output");

    const RecordDetail detail = parseRecordDetail(a.get("--records").value_or("json"));
    if (detail != RecordDetail::Json && !output)
        throwUsage("analyze: --records " + *a.get("--records") + " needs -o OUT.json (the report that names it)");
    if (a.get("--records-file") && detail != RecordDetail::Hdf5)
        throwUsage("analyze: --records-file is for --records hdf5");
    const std::string tablePath =
        detail == RecordDetail::Hdf5 ? a.get("--records-file").value_or(defaultRecordTablePath(*output)) : "";
    AnalyzeRequest req = analyzeRequestFromText(a);
    auto reader = openDump(input);
    const DumpInfo& info = reader->info();
    analyzeSelectionFromText(a, info, req);
    if (auto s = a.get("--shard")) {
        const auto [shard, shards] = parseShard(*s, "--shard");
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
    if (a.flag("--skip-existing")) {
        if (!output) throwUsage("analyze: --skip-existing needs -o OUT.json (the report it looks for)");
        if (std::filesystem::exists(*output)) {
            const std::string why =
                whyNotThisRunsReport(*output, commandLine(argc, argv), input, info, req.images, tablePath);
            if (why.empty()) {
                std::printf("kept %s: it holds this same run's report (--skip-existing)\n",
                            printableText(*output).c_str());
                return kExitOk;
            }
            std::fprintf(stderr, "note: redoing %s: %s\n", printableText(*output).c_str(), why.c_str());
        }
    }
    // Fail before hours of work, not after: the output must be writable and not the input.
    if (output) checkOutputWritable(*output, {input});
    if (!tablePath.empty()) {
        checkRecordTableIsNotTheReport(tablePath, *output);
        checkOutputWritable(tablePath, {input, *output});
    }

    // Declared sizes too large for this machine are refused before anything is allocated (analyzeDump
    // checks the same; asked here first, so that the note comes before the progress bar).
    const AnalysisPlan plan = planAnalysis(info, req);
    if (!plan.memory.note.empty()) std::fprintf(stderr, "note: %s\n", plan.memory.note.c_str());

    ProgressBar bar(!a.flag("--quiet"));
    // The input's SHA-256 is computed beside the analysis (for a dump of many gigabytes it takes as
    // long as reading it) and stops with it.
    std::atomic<bool> stopHash{false};
    std::future<std::string> hash;
    if (!a.flag("--no-hash") && output)  // the hash is provenance for the report file
        hash = std::async(std::launch::async, [&] { return sha256File(input, &stopHash); });
    ToolInfo tool;
    tool.name = "attnlens-cli";
    tool.command = commandLine(argc, argv);
    // Records go into the report file as they finish (a temporary file, renamed at the end), and
    // into the running summary; none is kept, so memory does not grow with the image count.
    std::optional<ReportStream> stream;
    RecordSink sink;
    sink.begin = [&](const AnalysisReport& header) {
        stream.emplace(output ? *output : std::string(), std::vector<std::string>{input}, header, tool, detail,
                       tablePath);
    };
    sink.write = [&](std::vector<HeadRecord>&& records) { stream->write(std::move(records)); };
    AnalysisReport report;
    try {
        report = analyzeDump(
            *reader, plan, [&](const AnalysisProgress& p) { bar(p); }, &gInterrupted, &sink);
    } catch (...) {
        stopHash = true;
        if (hash.valid()) hash.wait();
        throw;  // the stream's destructor removes its temporary file
    }
    if (hash.valid()) report.sha256 = hash.get();
    const json j = stream->finish(report);

    for (const auto& nf : j["non_finite"])
        std::fprintf(stderr, "warning: non-finite value: %s\n", nf["message"].get<std::string>().c_str());
    for (const auto& note : j.value("notes", json::array()))  // the memory plan's is out already
        if (note.get<std::string>() != plan.memory.note)
            std::fprintf(stderr, "note: %s\n", printableText(note.get<std::string>(), 1000).c_str());
    for (const auto& skipped : j.value("skipped", json::array()))
        std::fprintf(stderr, "warning: skipped image %d, layer %s: %s\n", skipped["image"].get<int>(),
                     printableText(skipped["layer"].get<std::string>()).c_str(),
                     printableText(skipped["message"].get<std::string>(), 1000).c_str());
    std::cout << formatSummary(j);
    std::printf("%lld records, %.2f s on %d threads\n", (long long)stream->records(), report.seconds,
                report.request.threads.count());
    if (output) std::printf("wrote %s\n", printableText(*output).c_str());
    if (!tablePath.empty()) std::printf("wrote %s\n", printableText(tablePath).c_str());
    return kExitOk;
}

}  // namespace attnlens::cli
