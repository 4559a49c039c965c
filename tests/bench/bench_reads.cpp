// What reading in AttnLens's reading process costs (DumpReader::isolateReads, issue 47 item 1): one
// head's q, k and v (N = 197, d = 32, float16, as the bundled example), and a whole layer's
// (N = 3137, 8 heads, d = 64, float32: 6.4 MB per tensor), read in-process and isolated. Not a test:
// run build-*/tests/bench/bench_reads and read the table (README, Performance).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "attnlens/dump/dump.h"
#include "attnlens/dump/open_check.h"
#include "attnlens/dump/synth.h"

namespace {

std::string benchDump(const char* name, int grid, int heads, int dim, attnlens::DType dtype) {
    const std::string path =
        (std::filesystem::temp_directory_path() / ("attnlens-bench-reads-" + std::to_string(::getpid()) + name))
            .string();
    if (!std::filesystem::exists(path)) {
        attnlens::SynthOptions o;
        o.layers = 1;
        o.heads = heads;
        o.gridH = o.gridW = grid;
        o.dim = dim;
        o.images = 2;
        o.dtype = dtype;
        attnlens::writeSynthDump(path, o);
    }
    return path;
}

std::unique_ptr<attnlens::DumpReader> openReader(const std::string& path, bool isolated) {
    auto reader = attnlens::DumpReader::open(path);
    if (isolated) reader->isolateReads("/proc/self/exe");
    return reader;
}

void BM_ReadHead(benchmark::State& state) {
    const auto reader = openReader(benchDump("head.h5", 14, 3, 32, attnlens::DType::Float16), state.range(0) != 0);
    (void)reader->readHead(0, 0, 0, true);  // the reading process's start is not counted
    int head = 0;
    for (auto _ : state) {
        benchmark::DoNotOptimize(reader->readHead(head & 1, 0, head % 3, true));
        ++head;
    }
    state.SetBytesProcessed(std::int64_t(state.iterations()) * 3 * 197 * 32 * 2);
    state.SetLabel(state.range(0) ? "isolated" : "in-process");
}
BENCHMARK(BM_ReadHead)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

void BM_ReadLayer(benchmark::State& state) {
    const auto reader = openReader(benchDump("layer.h5", 56, 8, 64, attnlens::DType::Float32), state.range(0) != 0);
    (void)reader->readLayer(0, 0, true);
    int image = 0;
    for (auto _ : state) benchmark::DoNotOptimize(reader->readLayer(image++ & 1, 0, true));
    state.SetBytesProcessed(std::int64_t(state.iterations()) * 3 * 8 * 3137 * 64 * 4);
    state.SetLabel(state.range(0) ? "isolated" : "in-process");
}
BENCHMARK(BM_ReadLayer)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
    // The reading process is this program started again.
    if (const auto code = attnlens::runOpenCheckChildIfRequested(argc, argv)) return *code;
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    for (const char* name : {"head.h5", "layer.h5"})
        std::filesystem::remove(std::filesystem::temp_directory_path() /
                                ("attnlens-bench-reads-" + std::to_string(::getpid()) + name));
    return 0;
}
