// Structured synthetic dumps. For a grid token at (y, x) of image b, layer l, head h:
//   q = m_b(y, x) * (amp_h * A_h (w_h . p(y, x)) + gamma_l R_l e_b(y, x) + noise)
//   k = m_b(y, x) * (amp_h * (A_h + 0.2 E_h) (w_h . p(y, x)) + gamma_l R_l e_b(y, x) + noise)
// p: sines and cosines of y and x at K frequencies, so p(i).p(j) = sum_f cos(pi f dy/H) +
//    cos(pi f dx/W) peaks at the token itself: softmax attention is local;
// A_h: d x 4K with orthonormal columns (or rows when d < 4K), a random per-head mix that keeps
//    that kernel; w_h: per-head frequency weights; amp_h: set so that the self logit
//    scale * q.q is about 6 for m = 1;
// e_b: the content of the image under the token (patch brightness and its gradient), R_l a
//    per-layer random projection, gamma_l growing with depth;
// m_b: a per-token magnitude in [0.5, 2], smooth across the grid, different per image.
// Prefix tokens get per-(layer, head, prefix) random vectors of similar norm. v is standard normal.
// Randomness: std::mt19937_64 with our own Box-Muller, so the output depends only on the seed.
#include <Eigen/QR>
#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>

#include "attnlens/dump/synth.h"
#include "attnlens/io/error.h"
#include "attnlens/io/text.h"

namespace attnlens {

namespace {

constexpr std::uint64_t kMaxValuesPerTensor = 1ull << 26;  // 256 MiB of float per dataset
constexpr std::uint64_t kMaxTokens = 1ull << 20;
constexpr double kSelfLogit = 6.0;
constexpr double kNoise = 0.1;  // relative to the positional amplitude
constexpr double kKeyPerturbation = 0.2;
constexpr int kContentFeatures = 3;

class Rng {
public:
    explicit Rng(std::uint64_t seed) : engine_(seed) {}
    double uniform() { return double(engine_() >> 11) * 0x1p-53; }  // [0, 1)
    double normal() {
        if (hasSpare_) {
            hasSpare_ = false;
            return spare_;
        }
        const double u1 = 1.0 - uniform();  // (0, 1]: log is finite
        const double u2 = uniform();
        const double radius = std::sqrt(-2.0 * std::log(u1));
        const double angle = 2.0 * std::numbers::pi * u2;
        spare_ = radius * std::sin(angle);
        hasSpare_ = true;
        return radius * std::cos(angle);
    }
    Matrix normalMatrix(Index rows, Index cols) {
        Matrix m(rows, cols);
        for (Index i = 0; i < rows; ++i)
            for (Index j = 0; j < cols; ++j) m(i, j) = normal();
        return m;
    }

private:
    std::mt19937_64 engine_;
    double spare_ = 0.0;
    bool hasSpare_ = false;
};

void requireRange(const char* name, long long value, long long low, long long high) {
    if (value < low || value > high) {
        throwUsage("synth: " + std::string(name) + " must be between " + std::to_string(low) + " and " +
                   std::to_string(high) + ", got " + std::to_string(value));
    }
}

// d x f with orthonormal columns (d >= f) or orthonormal rows (d < f).
Matrix randomMix(Rng& rng, Index d, Index f) {
    const Index tall = std::max(d, f), narrow = std::min(d, f);
    const Matrix gaussian = rng.normalMatrix(tall, narrow);
    Eigen::HouseholderQR<Eigen::MatrixXd> qr(gaussian);
    const Eigen::MatrixXd q = qr.householderQ() * Eigen::MatrixXd::Identity(tall, narrow);
    return d >= f ? Matrix(q) : Matrix(q.transpose());
}

struct SynthImage {
    std::vector<std::uint8_t> pixels;  // h x w
    std::int64_t label = 0;
    Matrix content;                 // tokens on the grid (H*W) x kContentFeatures
    std::vector<double> magnitude;  // H*W, in [0.5, 2]
};

SynthImage makeImage(Rng& rng, const SynthOptions& o) {
    const int h = 2 * o.gridH, w = 2 * o.gridW;
    SynthImage image;
    image.pixels.resize(std::size_t(h) * std::size_t(w));
    const double angle = 2.0 * std::numbers::pi * rng.uniform();
    const double diskY = h * (0.2 + 0.6 * rng.uniform()), diskX = w * (0.2 + 0.6 * rng.uniform());
    const double radius = std::max(1.0, std::min(h, w) * (0.12 + 0.1 * rng.uniform()));
    const double boxY0 = h * 0.7 * rng.uniform(), boxX0 = w * 0.7 * rng.uniform();
    const double boxY1 = boxY0 + h * (0.15 + 0.15 * rng.uniform());
    const double boxX1 = boxX0 + w * (0.15 + 0.15 * rng.uniform());
    for (int r = 0; r < h; ++r) {
        for (int c = 0; c < w; ++c) {
            const double gy = (r + 0.5) / h - 0.5, gx = (c + 0.5) / w - 0.5;
            double value = 100.0 + 120.0 * (std::cos(angle) * gy + std::sin(angle) * gx);
            if (r + 0.5 >= boxY0 && r + 0.5 < boxY1 && c + 0.5 >= boxX0 && c + 0.5 < boxX1) {
                value = 60.0;
            }
            const double dy = r + 0.5 - diskY, dx = c + 0.5 - diskX;
            if (dy * dy + dx * dx <= radius * radius) value = 235.0;
            image.pixels[std::size_t(r) * w + c] = std::uint8_t(std::clamp(value, 0.0, 255.0));
        }
    }
    // The class is the quadrant of the disk centre (synthQuadrantClassNames).
    image.label = (diskY >= h / 2.0 ? 2 : 0) + (diskX >= w / 2.0 ? 1 : 0);

    const int gh = o.gridH, gw = o.gridW;
    std::vector<double> brightness(std::size_t(gh) * gw);
    for (int y = 0; y < gh; ++y) {
        for (int x = 0; x < gw; ++x) {
            double sum = 0;
            for (int r = 2 * y; r < 2 * y + 2; ++r)
                for (int c = 2 * x; c < 2 * x + 2; ++c) sum += image.pixels[std::size_t(r) * w + c];
            brightness[std::size_t(y) * gw + x] = sum / (4.0 * 255.0);
        }
    }
    auto at = [&](int y, int x) {
        return brightness[std::size_t(std::clamp(y, 0, gh - 1)) * gw + std::clamp(x, 0, gw - 1)];
    };
    image.content.resize(Index(gh) * gw, kContentFeatures);
    image.magnitude.resize(std::size_t(gh) * gw);
    const double phaseY = 2.0 * std::numbers::pi * rng.uniform();
    const double phaseX = 2.0 * std::numbers::pi * rng.uniform();
    const double cyclesY = 0.5 + rng.uniform(), cyclesX = 0.5 + rng.uniform();
    for (int y = 0; y < gh; ++y) {
        for (int x = 0; x < gw; ++x) {
            const Index t = Index(y) * gw + x;
            image.content(t, 0) = 2.0 * (at(y, x) - 0.5);
            image.content(t, 1) = 2.0 * (at(y, x + 1) - at(y, x - 1));
            image.content(t, 2) = 2.0 * (at(y + 1, x) - at(y - 1, x));
            const double wave = std::sin(2.0 * std::numbers::pi * cyclesY * (y + 0.5) / gh + phaseY) *
                                std::cos(2.0 * std::numbers::pi * cyclesX * (x + 0.5) / gw + phaseX);
            image.magnitude[std::size_t(t)] = 0.5 + 1.5 * (0.5 + 0.5 * wave);
        }
    }
    return image;
}

// The options in range and the dump's size within the limits (Error(Usage) naming what is wrong);
// the tokens per image.
std::uint64_t checkSynthOptions(const SynthOptions& o) {
    requireRange("layers", o.layers, 1, 1024);
    requireRange("heads", o.heads, 1, 1024);
    requireRange("grid height", o.gridH, 1, 4096);
    requireRange("grid width", o.gridW, 1, 4096);
    requireRange("prefix tokens", o.prefix, 0, 1024);
    requireRange("dim", o.dim, 1, 4096);
    requireRange("images", o.images, 1, 1000000);
    if (!o.localBranch.empty() && o.localBranch != "dwc" && o.localBranch != "lepe" &&
        o.localBranch != "inline_residual")
        throwUsage("synth: --local-branch must be dwc, lepe or inline_residual, got '" + printableText(o.localBranch) +
                   "'");
    if (o.withClassNames && !o.withImages)
        throwUsage("synth: --class-names names the labels, which are written with the images; drop --no-images");
    if (!o.localBranch.empty() && !o.withValues)
        throwUsage("synth: --local-branch needs values (the branch acts on V); drop --no-values");
    if (o.window != 0) {
        requireRange("window", o.window, 1, 64);
        if (o.prefix != 0) throwUsage("synth: --window needs --prefix 0 (Swin's windows cover the grid only)");
        if (o.gridH % o.window != 0 || o.gridW % o.window != 0)
            throwUsage("synth: --window " + std::to_string(o.window) + " does not divide the grid " +
                       std::to_string(o.gridH) + " x " + std::to_string(o.gridW));
    }
    requireRange("reduction", o.reduction, 1, 64);
    if (o.reduction > 1) {
        if (o.window != 0) throwUsage("synth: --reduction and --window are different layouts; give one");
        if (!o.localBranch.empty() && o.prefix != 0)
            throwUsage(
                "synth: --local-branch with --reduction needs --prefix 0 (the branch convolves V interpolated "
                "from the reduced keys to the grid, as FLatten-PVT, which has no prefix tokens)");
    }
    const std::uint64_t tokens = std::uint64_t(o.prefix) + std::uint64_t(o.gridH) * o.gridW;
    if (tokens > kMaxTokens) {
        throwUsage("synth: prefix + grid height x width = " + std::to_string(tokens) +
                   " tokens, more than the limit of " + std::to_string(kMaxTokens));
    }
    const double valuesPerTensor = double(o.images) * o.heads * double(tokens) * o.dim;
    if (valuesPerTensor > double(kMaxValuesPerTensor)) {
        throwUsage("synth: images x heads x tokens x dim = " + std::to_string(o.images) + " x " +
                   std::to_string(o.heads) + " x " + std::to_string(tokens) + " x " + std::to_string(o.dim) +
                   " values per tensor, more than the limit of " + std::to_string(kMaxValuesPerTensor));
    }
    return tokens;
}

// The token sets of one synthetic layer: queries on the grid, keys on the reduced grid.
struct SynthGeometry {
    Index n = 0, d = 0, keyCount = 0;
    int frequencies = 0;
    Index features = 0;
    double scale = 0;
    TokenLayout queryLayout, keyLayout;
    AttentionLayout geometry;
    std::vector<std::vector<Index>> cellTokens;  // each key cell's full-grid tokens
    Matrix positional;                           // positional code per grid token

    // A strided reduction (kernel = stride = r) exists when r fits the grid on both sides.
    static bool strided(const SynthOptions& o) {
        return o.reduction > 1 && o.reduction <= o.gridH && o.reduction <= o.gridW;
    }

    explicit SynthGeometry(const SynthOptions& o, std::uint64_t tokens)
        : n(Index(tokens)),
          d(o.dim),
          queryLayout{o.gridH, o.gridW, o.prefix},
          // The keys' grid: PVT's strided reduction (floor), at least one cell.
          keyLayout{std::max(1, o.gridH / o.reduction), std::max(1, o.gridW / o.reduction), o.prefix},
          // Written as @key_stride when the convolution fits the grid (format.md 1c).
          geometry(queryLayout, keyLayout, strided(o) ? o.reduction : 0, strided(o) ? o.reduction : 0) {
        keyCount = keyLayout.tokens();
        frequencies = std::clamp(o.dim / 4, 1, 6);
        features = 4 * frequencies;
        scale = 1.0 / std::sqrt(double(d));
        cellTokens.resize(std::size_t(keyLayout.spatialTokens()));
        // A key averages the tokens of its receptive field: those the convolution drops (rows and
        // columns beyond h r) go into no key, as in the model.
        for (int y = 0; y < geometry.coveredRows(); ++y)
            for (int x = 0; x < geometry.coveredCols(); ++x)
                cellTokens[std::size_t(geometry.keyToken(y, x) - keyLayout.prefix)].push_back(Index(y) * o.gridW + x);
        positional.resize(Index(o.gridH) * o.gridW, features);
        for (int y = 0; y < o.gridH; ++y) {
            for (int x = 0; x < o.gridW; ++x) {
                const Index t = Index(y) * o.gridW + x;
                for (int f = 0; f < frequencies; ++f) {
                    const double ay = std::numbers::pi * (f + 1) * (y + 0.5) / o.gridH;
                    const double ax = std::numbers::pi * (f + 1) * (x + 0.5) / o.gridW;
                    positional(t, 4 * f + 0) = std::sin(ay);
                    positional(t, 4 * f + 1) = std::cos(ay);
                    positional(t, 4 * f + 2) = std::sin(ax);
                    positional(t, 4 * f + 3) = std::cos(ax);
                }
            }
        }
    }
};

struct SynthLayer {
    std::vector<float> q, k, v;
};

// Layer l's q, k (and v) of every image and head, drawn from rng in a fixed order (a seed's dump
// does not change when this code is reorganised: tests and screenshots rely on it).
SynthLayer synthLayer(Rng& rng, const SynthOptions& o, const SynthGeometry& g, const std::vector<SynthImage>& images,
                      int l) {
    const Index n = g.n, d = g.d, keyCount = g.keyCount, features = g.features;
    const int frequencies = g.frequencies;
    const double scale = g.scale;
    const std::size_t count = std::size_t(o.images) * std::size_t(o.heads) * std::size_t(n * d);
    const std::size_t keyValues = std::size_t(o.images) * std::size_t(o.heads) * std::size_t(keyCount * d);
    Matrix fullK(n, d);
    const double gamma = 0.5 + double(l) / std::max(1, o.layers - 1);
    const Matrix contentMix = rng.normalMatrix(d, kContentFeatures) * (gamma / std::sqrt(3.0));
    SynthLayer out;
    out.q.resize(count);
    out.k.resize(keyValues);
    out.v.resize(o.withValues ? keyValues : 0);
    float* q = out.q.data();
    float* k = out.k.data();
    float* v = out.v.data();
    for (int h = 0; h < o.heads; ++h) {
        Vector weights(features);
        for (int f = 0; f < frequencies; ++f) {
            weights.segment(4 * f, 4).setConstant(0.5 + rng.uniform());
        }
        const Matrix mixQ = randomMix(rng, d, features);
        const Matrix mixK = mixQ + rng.normalMatrix(d, features) * (kKeyPerturbation / std::sqrt(double(features)));
        // scale * amp^2 * |w . p|^2 = kSelfLogit, with |w . p|^2 = 2 sum_f w_f^2.
        const double selfNorm = 0.5 * weights.squaredNorm();
        const double amplitude = std::sqrt(kSelfLogit / (scale * selfNorm));
        const Matrix prefixQ = rng.normalMatrix(o.prefix, d) * (amplitude * std::sqrt(selfNorm / d));
        const Matrix prefixK = rng.normalMatrix(o.prefix, d) * (amplitude * std::sqrt(selfNorm / d));
        const Matrix weighted = g.positional * weights.asDiagonal();
        const Matrix baseQ = weighted * mixQ.transpose() * amplitude;  // spatial x d
        const Matrix baseK = weighted * mixK.transpose() * amplitude;
        for (int b = 0; b < o.images; ++b) {
            const SynthImage& image = images[std::size_t(b)];
            const Matrix content = image.content * contentMix.transpose();  // spatial x d
            const std::size_t offset = (std::size_t(b) * o.heads + h) * n * d;
            const std::size_t keyOffset = (std::size_t(b) * o.heads + h) * std::size_t(keyCount * d);
            for (Index t = 0; t < n; ++t) {
                float* qRow = q + offset + std::size_t(t * d);
                if (t < o.prefix) {
                    for (Index j = 0; j < d; ++j) {
                        qRow[j] = float(prefixQ(t, j) + kNoise * amplitude * rng.normal());
                        fullK(t, j) = prefixK(t, j) + kNoise * amplitude * rng.normal();
                    }
                    continue;
                }
                const Index s = t - o.prefix;
                const double m = image.magnitude[std::size_t(s)];
                for (Index j = 0; j < d; ++j) {
                    qRow[j] = float(m * (baseQ(s, j) + content(s, j) + kNoise * amplitude * rng.normal()));
                    fullK(t, j) = m * (baseK(s, j) + content(s, j) + kNoise * amplitude * rng.normal());
                }
            }
            for (Index t = 0; t < keyCount; ++t) {
                RowVector key = fullK.row(t);
                if (t >= o.prefix && g.geometry.reducedKeys()) {
                    const std::vector<Index>& cell = g.cellTokens[std::size_t(t - o.prefix)];
                    key.setZero();
                    for (Index s : cell) key += fullK.row(o.prefix + s);
                    key /= double(cell.size());
                }
                for (Index j = 0; j < d; ++j) k[keyOffset + std::size_t(t * d + j)] = float(key(j));
            }
            if (o.withValues) {
                float* vData = v + keyOffset;
                for (std::size_t i = 0; i < std::size_t(keyCount * d); ++i) vData[i] = float(rng.normal());
            }
        }
    }
    return out;
}

// Layer l's local branch (format.md 1a) from its own generator.
void writeSynthLocalBranch(DumpWriter& writer, const std::string& group, const SynthOptions& o, int l) {
    // Own generator, so that the branch does not change the activations of a seed.
    Rng branchRng(o.seed * 1000003ull + 7919ull * std::uint64_t(l + 1));
    const bool perHead = o.localBranch == "dwc", perImage = o.localBranch == "inline_residual";
    const int kernel = perImage ? 3 : 5;
    const int channels = perHead ? o.dim : o.heads * o.dim;
    const int batches = perImage ? o.images : 1;
    // On window layers the branch convolves inside each window (its default scope there), and
    // InLine-Swin's residual kernel comes from each window's mean: one kernel per window.
    const int windows = perImage && o.window > 0 ? (o.gridH / o.window) * (o.gridW / o.window) : 1;
    std::vector<float> weight(std::size_t(batches) * std::size_t(windows) * std::size_t(channels) *
                              std::size_t(kernel * kernel));
    for (std::size_t i = 0; i < weight.size(); ++i) {
        const int tap = int(i % std::size_t(kernel * kernel));
        const bool centre = tap == (kernel * kernel) / 2;
        weight[i] = float((centre ? 0.5 : 0.0) + 0.2 * branchRng.normal());
    }
    const std::string branch = group + "/local_branch";
    writer.setGroupAttribute(branch, "kind", o.localBranch);
    if (o.reduction > 1) writer.setGroupAttribute(branch, "values", std::string("interpolated"));
    writer.setGroupAttribute(branch, "channels", std::string(perHead ? "per_head" : "all"));
    std::vector<std::uint64_t> weightShape = {std::uint64_t(channels), std::uint64_t(kernel), std::uint64_t(kernel)};
    if (windows > 1) weightShape.insert(weightShape.begin(), std::uint64_t(windows));
    if (perImage) weightShape.insert(weightShape.begin(), std::uint64_t(o.images));
    writer.writeFloatDataset(branch + "/weight", weightShape, weight, o.dtype);
    if (!perImage) {
        std::vector<float> bias(static_cast<std::size_t>(channels));
        for (float& b : bias) b = float(0.1 * branchRng.normal());
        writer.writeFloatDataset(branch + "/bias", {std::uint64_t(channels)}, bias, o.dtype);
    }
}

// Layer l's windows (Swin: shifted on odd layers) and relative position bias.
void writeSynthWindows(DumpWriter& writer, const std::string& group, const SynthOptions& o, int l) {
    const int shift = l % 2 == 1 ? o.window / 2 : 0;
    writer.setGroupAttribute(group, "window_size", std::vector<std::int64_t>{o.window, o.window});
    writer.setGroupAttribute(group, "window_shift", std::vector<std::int64_t>{shift, shift});
    writer.setGroupBoolAttribute(group, "window_mask", shift > 0);
    // Own generator (the activations of a seed stay as they are): a smooth bias that
    // favours near positions, plus noise, as a trained relative position bias looks.
    Rng biasRng(o.seed * 7919ull + 104729ull * std::uint64_t(l + 1));
    const std::size_t m = std::size_t(o.window) * std::size_t(o.window);
    std::vector<float> bias(std::size_t(o.heads) * m * m);
    for (int h = 0; h < o.heads; ++h)
        for (std::size_t p = 0; p < m; ++p)
            for (std::size_t r = 0; r < m; ++r) {
                const double dy = double(p / std::size_t(o.window)) - double(r / std::size_t(o.window));
                const double dx = double(p % std::size_t(o.window)) - double(r % std::size_t(o.window));
                bias[(std::size_t(h) * m + p) * m + r] = float(-0.3 * std::hypot(dy, dx) + 0.2 * biasRng.normal());
            }
    writer.writeFloatDataset(group + "/position_bias", {std::uint64_t(o.heads), m, m}, bias, DType::Float32);
}

void writeSynthImages(DumpWriter& writer, const SynthOptions& o, const std::vector<SynthImage>& images) {
    std::vector<std::uint8_t> pixels;
    std::vector<std::int64_t> labels;
    for (const SynthImage& image : images) {
        pixels.insert(pixels.end(), image.pixels.begin(), image.pixels.end());
        labels.push_back(image.label);
    }
    writer.writeUInt8Dataset("/images",
                             {std::uint64_t(o.images), std::uint64_t(2 * o.gridH), std::uint64_t(2 * o.gridW)}, pixels);
    writer.writeInt64Dataset("/labels", {std::uint64_t(o.images)}, labels);
    if (o.withClassNames) writer.writeStringDataset("/class_names", synthQuadrantClassNames());
}

}  // namespace

void writeSynthDump(const std::string& path, const SynthOptions& o) {
    const std::uint64_t tokens = checkSynthOptions(o);
    const SynthGeometry g(o, tokens);
    Rng rng(o.seed);
    std::vector<SynthImage> images;
    images.reserve(std::size_t(o.images));
    for (int b = 0; b < o.images; ++b) images.push_back(makeImage(rng, o));

    DumpWriter writer(path);
    writer.setRootAttribute("format", std::string("attnlens.dump"));
    writer.setRootAttribute("format_version", std::int64_t(1));
    writer.setRootAttribute("model", o.model);
    writer.setRootAttribute("grid", std::vector<std::int64_t>{o.gridH, o.gridW});
    writer.setRootAttribute("prefix_tokens", std::int64_t(o.prefix));
    const std::vector<std::uint64_t> shape = {std::uint64_t(o.images), std::uint64_t(o.heads), tokens,
                                              std::uint64_t(g.d)};
    const std::vector<std::uint64_t> keyShape = {std::uint64_t(o.images), std::uint64_t(o.heads),
                                                 std::uint64_t(g.keyCount), std::uint64_t(g.d)};
    for (int l = 0; l < o.layers; ++l) {
        const SynthLayer layer = synthLayer(rng, o, g, images, l);
        const std::string group = "/layers/blocks." + std::to_string(l);
        writer.writeFloatDataset(group + "/q", shape, layer.q, o.dtype);
        writer.writeFloatDataset(group + "/k", keyShape, layer.k, o.dtype);
        if (o.withValues) writer.writeFloatDataset(group + "/v", keyShape, layer.v, o.dtype);
        if (g.geometry.reducedKeys()) {
            writer.setGroupAttribute(group, "key_grid",
                                     std::vector<std::int64_t>{g.keyLayout.gridH, g.keyLayout.gridW});
            if (g.keyLayout.prefix > 0)
                writer.setGroupAttribute(group, "key_prefix_tokens", std::int64_t(g.keyLayout.prefix));
            if (g.geometry.strideY > 0)
                writer.setGroupAttribute(group, "key_stride",
                                         std::vector<std::int64_t>{g.geometry.strideY, g.geometry.strideX});
        }
        if (!o.localBranch.empty()) writeSynthLocalBranch(writer, group, o, l);
        if (o.window > 0) writeSynthWindows(writer, group, o, l);
        writer.setGroupAttribute(group, "index", std::int64_t(l));
        writer.setGroupAttribute(group, "attention", std::string("softmax"));
        writer.setGroupAttribute(group, "scale", g.scale);
    }
    if (o.withImages) writeSynthImages(writer, o, images);
    writer.commit();
}

std::vector<std::string> synthQuadrantClassNames() { return {"top-left", "top-right", "bottom-left", "bottom-right"}; }

}  // namespace attnlens
