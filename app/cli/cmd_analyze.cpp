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

int cmdAnalyze(int argc, char** argv) {
    Args a = parseArgs(argc, argv, 2, {"-o",          "--output",       "--paradigms",      "--config",
                                       "--layers",    "--heads",        "--images",         "--stats",
                                       "--threads",   "--rank-tol",     "--local-k",        "--tau",
                                       "--magnitude", "--local-branch", "--local-channels", "--local-spectra",
                                       "--model",     "--distance-ref", "--records",        "--records-file"},
                       {"--spatial-only", "--per-query-maps", "--no-hash", "--quiet", "--skip-unreadable"}, "analyze");
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
    // Fail before hours of work, not after: the output must be writable and not the input.
    if (output) checkOutputWritable(*output, {input});
    if (!tablePath.empty()) {
        checkRecordTableIsNotTheReport(tablePath, *output);
        checkOutputWritable(tablePath, {input, *output});
    }

    // Declared sizes too large for this machine are refused before anything is allocated (analyzeDump
    // checks the same; asked here first, so that the note comes before the progress bar).
    const MemoryPlan memory = planMemory(info, req, memoryBudget());
    if (!memory.note.empty()) std::fprintf(stderr, "note: %s\n", memory.note.c_str());
    req.threads = memory.threads;

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
            *reader, req, [&](const AnalysisProgress& p) { bar(p); }, &gInterrupted, &sink);
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
        if (note.get<std::string>() != memory.note)
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
