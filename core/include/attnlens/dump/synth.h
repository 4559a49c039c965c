#pragma once
// Synthetic but structured dumps for tests and benchmarks: queries and keys carry a smooth 2-D
// positional code (so attention is local), a per-token magnitude that varies across the grid, a
// per-head random mixing, and a little noise. Deterministic for a given seed.
#include <cstdint>
#include <string>
#include <vector>

#include "attnlens/dump/dump.h"

namespace attnlens {

struct SynthOptions {
    int layers = 2;
    int heads = 2;
    int gridH = 14;
    int gridW = 14;
    int prefix = 1;
    int dim = 16;
    int images = 2;
    DType dtype = DType::Float32;
    std::uint64_t seed = 1;
    bool withValues = true;
    bool withImages = true;  // /images and /labels (the quadrant of a disk drawn in the image)
    // /class_names for the labels: synthQuadrantClassNames(). Needs withImages.
    bool withClassNames = false;
    std::string model = "synthetic";
    // A local branch in every layer (resources/format.md 1a), with seeded random kernels: "" (none),
    // "dwc" (5x5, per_head, shared, bias; FLatten), "lepe" (5x5, all channels, shared, bias; MALA) or
    // "inline_residual" (3x3, all channels, per image, no bias; InLine). Needs withValues. With
    // window attention the branch convolves inside each window (scope "window", as FLatten-Swin and
    // InLine-Swin do), and inline_residual has one kernel per (image, window), as InLine-Swin.
    std::string localBranch;
    // Window attention (resources/format.md 1b) in every layer when > 0: windows of M x M, odd
    // layers shifted by M / 2 with Swin's mask (as Swin alternates), a seeded position bias per
    // head. Needs prefix 0 and a grid divisible by M.
    int window = 0;
    // Spatial-reduction attention (resources/format.md 1c) in every layer when > 1, as PVT's
    // sr_ratio: keys and values on the grid reduced by R (h = H / R, w = W / R rounded down, at
    // least 1), each key the mean of the keys of its cell of the full grid (a strided average, as
    // PVT's strided convolution after training roughly is), prefix keys kept. No window; a local
    // branch convolves V interpolated from the keys (values "interpolated", FLatten-PVT; prefix 0).
    int reduction = 1;
};

// The names of synth's labels 0 to 3: the quadrant of the image that holds the disk's centre.
std::vector<std::string> synthQuadrantClassNames();

// Writes atomically (temporary file + rename). Error(Usage) for invalid options, Error(Output) on I/O.
void writeSynthDump(const std::string& path, const SynthOptions& options);

}  // namespace attnlens
