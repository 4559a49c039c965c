// attnlens-cli confusion (its --help text is in commands.cpp).
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

int cmdConfusion(int argc, char** argv) {
    Args a =
        parseArgs(argc, argv, 2, {"-o", "--output", "--image", "--layer", "--head", "--paradigm", "--tau", "--pairs"},
                  {}, "confusion");
    if (a.positional.size() != 1) throwUsage("confusion: expected one FILE");
    for (const char* required : {"--image", "--layer", "--head", "--paradigm"})
        if (!a.get(required)) throwUsage(std::string("confusion: ") + required + " is required");
    auto output = a.get("-o") ? a.get("-o") : a.get("--output");
    ConfusionRequest req;
    req.paradigm = Paradigm::parse(*a.get("--paradigm"));
    if (auto t = a.get("--tau")) req.options.tau = parseNumber(*t, "--tau");
    validate(req.options);
    if (auto n = a.get("--pairs")) req.maxPairs = parseInt(*n, 0, 1000000, "--pairs");
    auto reader = openDump(a.positional[0]);
    const DumpInfo& info = reader->info();
    const std::vector<int> images = parseIndexList(*a.get("--image"), info.images, "--image");
    if (images.size() != 1) throwUsage("--image: name one image, got " + quotedText(*a.get("--image")));
    req.image = images.front();
    req.layer = parseLayer(*a.get("--layer"), info, "--layer");
    const LayerInfo& layer = info.layers[std::size_t(req.layer)];
    req.head = parseInt(*a.get("--head"), 0, layer.heads - 1, "--head");
    if (output) checkOutputWritable(*output, {a.positional[0]});
    const json j = confusionOfHead(*reader, req);
    const TokenLayout& l = layer.layout;
    auto where = [&l](Index t) {
        return l.isSpatial(t) ? "(y " + std::to_string(l.row(t)) + ", x " + std::to_string(l.col(t)) + ")"
                              : "prefix " + std::to_string(t);
    };
    const json& c = j["injectivity"];
    std::printf("%s, image %d, layer %s, head %d: %lld confused pairs (tau %g), %lld pairs with identical queries\n",
                req.paradigm.name.c_str(), req.image, printableText(layer.name).c_str(), req.head,
                j["confused_pairs"].get<long long>(), j["tau"].get<double>(),
                j["identical_query_pairs"].get<long long>());
    std::printf("rank of the key features %d of %lld, with a ones column %d of %lld (over %s%lld keys): %s\n",
                c["rank_features"].get<int>(), c["features"].get<long long>(), c["rank_with_ones"].get<int>(),
                c["features"].get<long long>() + 1, c.contains("key_set_rank_features") ? "at least " : "",
                c["keys"].get<long long>(), c["proposition"].get<std::string>().c_str());
    for (const json& pair : j["pairs"]) {
        const Index p = pair["p"].get<Index>(), q = pair["q"].get<Index>();
        std::printf("  %5lld %-16s %5lld %-16s row distance %.3e  query distance %.4g\n", (long long)p,
                    where(p).c_str(), (long long)q, where(q).c_str(), pair["row_distance"].get<double>(),
                    pair["query_distance"].get<double>());
    }
    if (output) {
        writeFileAtomically(*output, j.dump(1) + "\n", {a.positional[0]});
        std::printf("wrote %s\n", printableText(*output).c_str());
    }
    return kExitOk;
}

}  // namespace attnlens::cli
