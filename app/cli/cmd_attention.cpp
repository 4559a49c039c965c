// attnlens-cli attention (its --help text is in commands.cpp).
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

int cmdAttention(int argc, char** argv) {
    Args a = parseArgs(argc, argv, 2, {"-o", "--output", "--image", "--layer", "--head", "--paradigm", "--channel"},
                       {"--values", "--local-branch"}, "attention");
    if (a.positional.size() != 1) throwUsage("attention: expected one FILE");
    for (const char* required : {"--image", "--layer", "--head", "--paradigm"})
        if (!a.get(required)) throwUsage(std::string("attention: ") + required + " is required");
    auto output = a.get("-o") ? a.get("-o") : a.get("--output");
    if (!output) throwUsage("attention: -o OUT.json is required");
    const Paradigm paradigm = Paradigm::parse(*a.get("--paradigm"));
    auto reader = openDump(a.positional[0]);
    const DumpInfo& info = reader->info();
    const std::vector<int> images = parseIndexList(*a.get("--image"), info.images, "--image");
    if (images.size() != 1) throwUsage("--image: name one image, got " + quotedText(*a.get("--image")));
    const int image = images.front();
    const int layerIndex = parseLayer(*a.get("--layer"), info, "--layer");
    const LayerInfo& layer = info.layers[std::size_t(layerIndex)];
    const int head = parseInt(*a.get("--head"), 0, layer.heads - 1, "--head");
    AttentionRequest request;
    request.image = image;
    request.layer = layerIndex;
    request.head = head;
    request.paradigm = paradigm;
    request.values = a.flag("--values");
    request.localBranch = a.flag("--local-branch");
    if (auto c = a.get("--channel")) {
        if (!request.localBranch) throwUsage("attention: --channel needs --local-branch");
        request.channel = parseInt(*c, 0, layer.valueDim - 1, "--channel");
    }
    checkOutputWritable(*output, {a.positional[0]});
    std::vector<std::string> warnings;
    const json j = attentionOfHead(*reader, request, &warnings);
    for (const std::string& w : warnings) std::fprintf(stderr, "warning: non-finite value: %s\n", w.c_str());
    writeFileAtomically(*output, j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n", {a.positional[0]});
    return kExitOk;
}

}  // namespace attnlens::cli
