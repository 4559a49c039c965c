// attnlens-cli synth (its --help text is in commands.cpp).
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

int cmdSynth(int argc, char** argv) {
    Args a = parseArgs(argc, argv, 2,
                       {"-o", "--output", "--layers", "--heads", "--grid", "--prefix", "--dim", "--images", "--dtype",
                        "--seed", "--model", "--local-branch", "--window", "--reduction"},
                       {"--no-values", "--no-images", "--class-names"}, "synth");
    if (!a.positional.empty()) throwUsage("synth: unexpected argument " + quotedText(a.positional[0]));
    auto output = a.get("-o") ? a.get("-o") : a.get("--output");
    if (!output) throwUsage("synth: -o FILE is required");
    SynthOptions o;
    if (auto s = a.get("--layers")) o.layers = parseInt(*s, 1, 1000, "--layers");
    if (auto s = a.get("--heads")) o.heads = parseInt(*s, 1, 1024, "--heads");
    if (auto s = a.get("--prefix")) o.prefix = parseInt(*s, 0, 1024, "--prefix");
    if (auto s = a.get("--dim")) o.dim = parseInt(*s, 1, 4096, "--dim");
    if (auto s = a.get("--images")) o.images = parseInt(*s, 1, 100000, "--images");
    if (auto s = a.get("--seed")) o.seed = std::uint64_t(parseInt(*s, 0, 2147483647, "--seed"));
    if (auto s = a.get("--model")) o.model = *s;
    if (auto s = a.get("--grid")) {
        const auto x = s->find('x');
        if (x == std::string::npos) throwUsage("--grid: expected HxW, e.g. 14x14, got " + quotedText(*s));
        o.gridH = parseInt(s->substr(0, x), 1, 4096, "--grid");
        o.gridW = parseInt(s->substr(x + 1), 1, 4096, "--grid");
    }
    if (auto s = a.get("--dtype")) {
        try {
            o.dtype = parseDType(*s);
        } catch (const Error& e) {
            throwUsage(std::string("--dtype: ") + e.what());
        }
    }
    o.withValues = !a.flag("--no-values");
    o.withImages = !a.flag("--no-images");
    o.withClassNames = a.flag("--class-names");
    if (auto s = a.get("--local-branch")) o.localBranch = *s;
    if (auto s = a.get("--window")) o.window = parseInt(*s, 1, 64, "--window");
    if (auto s = a.get("--reduction")) o.reduction = parseInt(*s, 1, 64, "--reduction");
    checkOutputWritable(*output, {});  // DumpWriter checks the path again when it creates the file
    writeSynthDump(*output, o);
    std::printf("wrote %s: %d layers x %d heads, %d images, N = %d, d = %d, %s\n", printableText(*output).c_str(),
                o.layers, o.heads, o.images, o.prefix + o.gridH * o.gridW, o.dim, toString(o.dtype));
    return kExitOk;
}

}  // namespace attnlens::cli
