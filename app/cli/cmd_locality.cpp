// attnlens-cli locality (its --help text is in commands.cpp).
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
#include "attnlens/io/atomic_file.h"
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

int cmdLocality(int argc, char** argv) {
    const CommandOptions options = localityOptions().with({{"-o", "--output"}, {"--quiet"}});
    Args a = parseArgs(argc, argv, 2, options.values, options.flags, "locality");
    if (a.positional.size() != 1) throwUsage("locality: expected one FILE");
    const std::string input = a.positional[0];
    std::optional<std::string> output = a.get("-o");
    if (!output) output = a.get("--output");
    int radius = 3;
    LocalityRequest req = localityRequestFromText(a, radius);
    auto reader = openDump(input);
    const DumpInfo& info = reader->info();
    localitySelectionFromText(a, info, req);
    if (output) checkOutputWritable(*output, {input});

    const LocalityPlan plan = planLocality(info, req);
    if (!plan.memory.note.empty()) std::fprintf(stderr, "note: %s\n", plan.memory.note.c_str());
    ProgressBar bar(!a.flag("--quiet"));
    const LocalityReport report = localityOverDump(
        *reader, plan, [&](const AnalysisProgress& p) { bar(p); }, &gInterrupted);
    for (const std::string& note : report.notes) std::fprintf(stderr, "note: %s\n", printableText(note).c_str());
    json j = localityToJson(report, radius);
    j["tool"] = {{"name", "attnlens-cli"}, {"version", ATTNLENS_VERSION}, {"command", commandLine(argc, argv)}};

    // Summary: the "all" group's mean distance per layer (mean over heads) and paradigm.
    const LocalityGroup& all = report.groups.front();
    std::printf(
        "mean attention distance (grid units), %d images, mean over heads; uniform: attention uniform over "
        "each row's admissible keys (its window on window layers)\n",
        all.images);
    std::printf("%-28s", "layer");
    for (const Paradigm& p : report.paradigms) std::printf(" %12.12s", p.name.c_str());
    std::printf(" %12s\n", "uniform");
    for (int l : report.request.layers) {
        std::printf("%-28.28s", printableText(info.layers[std::size_t(l)].name).c_str());
        for (int p = 0; p < int(report.paradigms.size()); ++p) {
            double sum = 0;
            int heads = 0;
            for (const LocalityCell& c : all.cells)
                if (c.layer == l && c.paradigm == p && std::isfinite(c.sums.meanDistance())) {
                    sum += c.sums.meanDistance();
                    ++heads;
                }
            std::printf(" %12.4f", heads ? sum / heads : std::nan(""));
        }
        std::printf(" %12.4f\n", report.layerUniformDistance(l));
    }
    std::printf("%zu groups (all%s), %.2f s on %d threads\n", report.groups.size(),
                report.groups.size() > 1 ? " and per label" : "", report.seconds, report.request.threads.count());
    if (output) {
        writeFileAtomically(*output, localityText(j), {input});
        std::printf("wrote %s\n", printableText(*output).c_str());
    }
    return kExitOk;
}

}  // namespace attnlens::cli
