// attnlens-cli claims (its --help text is in commands.cpp): the papers' claims as measured
// inequalities on the dump's own models (analysis/claims.h).
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>

#include "attnlens/analysis/claims.h"
#include "attnlens/analysis/dump_analysis.h"
#include "attnlens/analysis/execution.h"
#include "attnlens/dump/dump.h"
#include "attnlens/io/atomic_file.h"
#include "attnlens/io/error.h"
#include "attnlens/io/text.h"
#include "option_text.h"

#include "cli_support.h"

using nlohmann::json;

namespace attnlens::cli {

int cmdClaims(int argc, char** argv) {
    const CommandOptions options = claimsOptions().with({{"-o", "--output"}, {"--quiet"}});
    Args a = parseArgs(argc, argv, 2, options.values, options.flags, "claims");
    if (a.positional.size() != 1) throwUsage("claims: expected one FILE");
    const std::string input = a.positional[0];
    std::optional<std::string> output = a.get("-o");
    if (!output) output = a.get("--output");
    AnalyzeRequest req = claimsRequestFromText(a);
    auto reader = openDump(input);
    analyzeSelectionFromText(a, reader->info(), req);
    if (output) checkOutputWritable(*output, {input});
    const AnalysisPlan plan = planAnalysis(reader->info(), req);
    if (!plan.memory.note.empty()) std::fprintf(stderr, "note: %s\n", plan.memory.note.c_str());
    ProgressBar bar(!a.flag("--quiet"));
    const AnalysisReport report = analyzeDump(
        *reader, plan, [&](const AnalysisProgress& p) { bar(p); }, &gInterrupted);
    ToolInfo tool;
    tool.name = "attnlens-cli";
    tool.command = commandLine(argc, argv);
    const json j = evaluateClaims(report, input, tool);
    for (const json& c : j["claims"]) {
        std::printf("%-15s %-42s %s\n", c["verdict"].get<std::string>().c_str(), c["id"].get<std::string>().c_str(),
                    (c["paper"].get<std::string>() + " " + c["reference"].get<std::string>()).c_str());
        if (c["verdict"] == "not_measurable")
            std::printf("%17s%s\n", "", printableText(c["evidence"]["reason"].get<std::string>(), 300).c_str());
    }
    std::printf("%d hold, %d fail, %d not measurable (trained models only; what-ifs never decide)\n",
                j["counts"]["holds"].get<int>(), j["counts"]["fails"].get<int>(),
                j["counts"]["not_measurable"].get<int>());
    if (output) {
        writeFileAtomically(*output, j.dump(1) + "\n", {input});
        std::printf("wrote %s\n", printableText(*output).c_str());
    }
    return kExitOk;
}

}  // namespace attnlens::cli
