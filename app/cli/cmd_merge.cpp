// attnlens-cli merge (its --help text is in commands.cpp).
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

int cmdMerge(int argc, char** argv) {
    Args a =
        parseArgs(argc, argv, 2, {"-o", "--output", "--records-file", "--expect-images"}, {"--allow-partial"}, "merge");
    auto output = a.get("-o") ? a.get("-o") : a.get("--output");
    if (!output) throwUsage("merge: -o OUT.json is required");
    // One report merges too: the study's coverage is checked all the same (a study of one shard).
    if (a.positional.empty()) throwUsage("merge: expected at least one report");
    MergeCoverageOptions coverage;
    coverage.expectImages = a.get("--expect-images");
    coverage.allowPartial = a.flag("--allow-partial");
    checkOutputWritable(*output, a.positional);
    if (a.get("--records-file")) checkRecordTableIsNotTheReport(*a.get("--records-file"), *output);
    // Each report's summary state is folded in as it is read, so that only the light parts of the
    // shards (selection, labels, provenance) are held at once, whatever their labels and images.
    std::vector<json> reports;
    std::optional<ReportSummary> folded;
    for (const auto& f : a.positional) {
        reports.push_back(readJsonFile(f, "merge"));
        foldSummaryState(reports.back(), f, folded);
    }
    ToolInfo tool;
    tool.name = "attnlens-cli";
    tool.command = commandLine(argc, argv);
    json merged;
    try {
        // Validates every record of every input (mergeReports); this catch is a last resort.
        merged = mergeReports(reports, a.positional, tool, std::move(folded), coverage);
    } catch (const json::exception& e) {
        throwInput("merge: a report lacks a field or has one of the wrong type (" + jsonErrorText(e) +
                   "); merge takes reports written by attnlens-cli analyze");
    }
    // Reports with record tables: the tables are concatenated first (the report names the result).
    const bool tables = merged.contains("record_detail") && merged["record_detail"].value("format", "") == "hdf5";
    if (a.get("--records-file") && !tables)
        throwUsage("merge: --records-file is for reports written with --records hdf5");
    const std::string tablePath = tables ? a.get("--records-file").value_or(defaultRecordTablePath(*output)) : "";
    // The table and the report are renamed as a pair (OutputDirectoryLock): another run to the same
    // -o cannot put its report beside this run's table.
    std::optional<OutputDirectoryLock> pair;
    if (tables) {
        std::vector<std::string> forbidden = a.positional;
        checkOutputWritable(tablePath, forbidden);
        pair.emplace(*output);
        mergeRecordTables(reports, a.positional, merged, *output, tablePath, forbidden);
    }
    std::cout << formatSummary(merged);
    writeFileAtomically(*output, reportText(merged), a.positional);
    pair.reset();
    if (tables)
        std::printf("wrote %s (%lld rows)\n", printableText(tablePath).c_str(),
                    (long long)merged["record_detail"]["records"].get<std::int64_t>());
    const json& c = merged["coverage"];
    std::printf(
        "merged %zu report%s (%zu of the %zu intended images%s) into %s\n", reports.size(),
        reports.size() == 1 ? "" : "s", c["covered_count"].get<std::size_t>(), c["intended_count"].get<std::size_t>(),
        c["complete"].get<bool>()
            ? ""
            : ("; PARTIAL (--allow-partial), missing " + printableText(c["missing_images"].get<std::string>(), 200))
                  .c_str(),
        printableText(*output).c_str());
    return kExitOk;
}

}  // namespace attnlens::cli
