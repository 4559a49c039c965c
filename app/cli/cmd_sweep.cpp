// attnlens-cli sweep: analyze's statistics as curves over one paradigm parameter (sweep.h).
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>

#include "attnlens/analysis/report.h"
#include "attnlens/analysis/sweep.h"
#include "attnlens/io/atomic_file.h"
#include "attnlens/io/error.h"
#include "attnlens/io/text.h"
#include "cli_support.h"
#include "option_text.h"

using nlohmann::json;

namespace attnlens::cli {

namespace {

std::string shownValue(const json& v) {
    if (!v.is_number()) return "-";
    char text[32];
    std::snprintf(text, sizeof text, "%.4g", v.get<double>());
    return text;
}

// Per layer, the mean curves of a few statistics: what the run shows without opening the file.
void printCurves(const json& sweep) {
    const json& values = sweep["parameter"]["values"];
    const std::string name = sweep["parameter"]["name"];
    for (const char* statistic :
         {"normalised_entropy", "rank", "total_variation", "local_mass_k3", "branch_rank_median"}) {
        bool header = false;
        for (const json& layer : sweep["layers"]) {
            if (!layer["statistics"].contains(statistic)) continue;
            if (!header) {
                std::printf("\n%s (mean over heads and images) at %s =", statistic, name.c_str());
                for (const json& v : values) std::printf(" %s", shownValue(v).c_str());
                std::printf("\n");
                header = true;
            }
            std::printf("  %-24s", printableText(layer["layer"].get<std::string>(), 24).c_str());
            for (const json& v : layer["statistics"][statistic]) std::printf(" %9s", shownValue(v).c_str());
            std::printf("\n");
        }
    }
}

}  // namespace

int cmdSweep(int argc, char** argv) {
    const CommandOptions options = sweepOptions().with({{"-o", "--output", "--paradigm", "--param"}, {"--quiet"}});
    Args a = parseArgs(argc, argv, 2, options.values, options.flags, "sweep");
    if (a.positional.size() != 1) throwUsage("sweep: expected one FILE");
    const std::string input = a.positional[0];
    std::optional<std::string> output = a.get("-o");
    if (!output) output = a.get("--output");
    SweepRequest request = sweepRequestFromText(a);

    auto reader = openDump(input);
    const DumpInfo& info = reader->info();
    sweepSelectionFromText(a, info, request);
    if (output) checkOutputWritable(*output, {input});

    ProgressBar bar(!a.flag("--quiet"));
    ToolInfo tool;
    tool.name = "attnlens-cli";
    tool.command = commandLine(argc, argv);
    const json sweep = sweepDump(
        *reader, request, tool,
        [&](const SweepProgress& p) {
            AnalysisProgress whole = p.analysis;
            whole.done = std::int64_t(p.point) * p.analysis.total + p.analysis.done;
            whole.total = std::int64_t(p.points) * p.analysis.total;
            whole.current =
                "point " + std::to_string(p.point + 1) + "/" + std::to_string(p.points) + ", " + p.analysis.current;
            bar(whole);
        },
        &gInterrupted);
    if (output) writeFileAtomically(*output, sweep.dump(1) + "\n", {input});
    for (const json& note : sweep["notes"]) std::fprintf(stderr, "note: %s\n", note.get<std::string>().c_str());
    printCurves(sweep);
    std::printf("%zu points, %.2f s on %d threads\n", request.values.size(), sweep["timing"]["seconds"].get<double>(),
                sweep["timing"]["threads"].get<int>());
    if (output) std::printf("wrote %s\n", printableText(*output).c_str());
    return kExitOk;
}

}  // namespace attnlens::cli
