// attnlens-cli rollout (its --help text is in commands.cpp).
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

int cmdRollout(int argc, char** argv) {
    const CommandOptions options = rolloutOptions().with({{"-o", "--output", "--image", "--query"}, {}});
    Args a = parseArgs(argc, argv, 2, options.values, options.flags, "rollout");
    if (a.positional.size() != 1) throwUsage("rollout: expected one FILE");
    for (const char* required : {"--image", "--query"})
        if (!a.get(required)) throwUsage(std::string("rollout: ") + required + " is required");
    auto output = a.get("-o") ? a.get("-o") : a.get("--output");
    RolloutRequest req = rolloutRequestFromText(a);
    auto reader = openDump(a.positional[0]);
    const DumpInfo& info = reader->info();
    const std::vector<int> images = parseIndexList(*a.get("--image"), info.images, "--image");
    if (images.size() != 1) throwUsage("--image: name one image, got " + quotedText(*a.get("--image")));
    req.image = images.front();
    req.layers = layersFromText(a, info, true);
    req.query = parseQueryToken(*a.get("--query"), info.layers[std::size_t(req.layers.front())].layout, "--query");
    if (output) checkOutputWritable(*output, {a.positional[0]});
    const json j = rolloutOverDump(*reader, req, &gInterrupted);
    for (const json& result : j["results"]) {
        const json& row = result["row"];
        std::size_t top = 0;
        double sum = 0, best = -std::numeric_limits<double>::infinity();
        for (std::size_t t = 0; t < row.size(); ++t) {
            const double w = row[t].is_null() ? std::numeric_limits<double>::quiet_NaN() : row[t].get<double>();
            sum += w;
            if (w > best) best = w, top = t;
        }
        std::printf("%-12s rollout of query %lld over %zu layers: largest weight %.4g on token %lld, sum %.6f\n",
                    result["paradigm"]["name"].get<std::string>().c_str(), (long long)req.query, req.layers.size(),
                    row.empty() || row[top].is_null() ? std::numeric_limits<double>::quiet_NaN() : best, (long long)top,
                    sum);
    }
    if (output) {
        writeFileAtomically(*output, j.dump(1) + "\n", {a.positional[0]});
        std::printf("wrote %s\n", printableText(*output).c_str());
    }
    return kExitOk;
}

}  // namespace attnlens::cli
