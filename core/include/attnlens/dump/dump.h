#pragma once
// Reading "attnlens.dump" version 1 files (HDF5). See resources/format.md for the format.
//
// DumpReader::open validates the whole structure (attributes, dataset ranks, shapes, dtypes, sizes)
// without reading any tensor data, so opening a 100 GB dump costs a few metadata reads. Tensor data
// is read per (image, layer) or per (image, layer, head) as HDF5 hyperslabs.
//
// Thread safety: the Debian HDF5 build is not thread-safe, so every HDF5 call in the process goes
// through one mutex (hdf5Mutex()). A DumpReader may be shared between threads.
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "attnlens/attention/local_branch.h"
#include "attnlens/attention/token_layout.h"
#include "attnlens/attention/window.h"
#include "attnlens/math/tensor.h"

namespace attnlens {

enum class DType { Float16, Float32, Float64 };
const char* toString(DType t);            // "float16", "float32", "float64" ("?" for none of them)
DType parseDType(std::string_view text);  // Error(Usage) "unknown dtype 'TEXT' (known: ...)"

// The layer's optional local branch (resources/format.md, section 1a), from metadata only.
struct LocalBranchInfo {
    std::string kind;  // "dwc", "inline_residual", "lepe" or other text
    LocalChannelMap channelMap = LocalChannelMap::PerHead;
    int channels = 0;  // C
    int kernelH = 0, kernelW = 0;
    bool perImage = false;     // weight [B, C, kh, kw], or [B, windows, C, kh, kw] when perWindow
    bool windowScope = false;  // @scope "window": the convolution runs inside each window (window layers)
    bool perWindow = false;    // one kernel per (image, window) (InLine-Swin's residual)
    // @values "interpolated" (format.md 1c): V interpolated from the layer's n keys to its grid
    // tokens before the convolution (FLatten-PVT); M_c is then N x n.
    bool interpolatedValues = false;
    int windows = 1;  // kernels per channel: the layer's windows when perWindow
    bool hasBias = false;
    bool biasPerImage = false;  // bias [B, C]
    DType weightType = DType::Float32;
    int weightChannel(int head, int channel, int valueDim) const {
        return localWeightChannel(channelMap, head, channel, valueDim);
    }
};

// The layer's window attention (resources/format.md, section 1b).
struct WindowInfo {
    // @window_size layers: the layer's rule and partition, the same for every head. @head_windows
    // layers (format.md 1b, CSwin's stripes): head 0's; use ruleOf(head) / partitionOf(head).
    WindowRule rule;
    std::shared_ptr<const WindowPartition> partition;
    // @head_windows: one partition per head (heads with one window size share it); empty otherwise.
    std::vector<std::shared_ptr<const WindowPartition>> headPartitions;
    bool perHead() const { return !headPartitions.empty(); }
    const WindowPartition& partitionOf(int head) const {
        return perHead() ? *headPartitions.at(std::size_t(head)) : *partition;
    }
    const WindowRule& ruleOf(int head) const { return partitionOf(head).rule(); }
    std::shared_ptr<const WindowPartition> sharedPartitionOf(int head) const {
        return perHead() ? headPartitions.at(std::size_t(head)) : partition;
    }
    // position_bias [heads, Mh*Mw, Mh*Mw] (Swin's relative position bias, model parameters): read
    // and checked on open; empty when the dump has none.
    std::shared_ptr<const std::vector<Matrix>> positionBias;
    bool hasPositionBias() const { return positionBias && !positionBias->empty(); }
};

struct LayerInfo {
    std::string name;  // group name under /layers
    int index = 0;     // the `index` attribute, or the natural-sort position when absent
    int batch = 0;     // B
    int heads = 0;
    int tokens = 0;    // N
    int dim = 0;       // d of q and k
    int valueDim = 0;  // d of v, 0 when v is absent
    DType qkType = DType::Float32;
    std::optional<DType> vType;
    std::string attention;  // the paradigm the model used ("" when not recorded)
    double scale = 0.0;     // softmax logit scale (attribute or 1/sqrt(d))
    bool scaleFromFile = false;
    TokenLayout layout;  // root grid/prefix, or the layer's override (the queries' tokens)
    // The keys' (and values') tokens: the same as layout, or the reduced key grid of
    // spatial-reduction attention (@key_grid, @key_prefix_tokens; format.md 1c).
    TokenLayout keyLayout;
    // The strided convolution's stride behind keyLayout (@key_stride [ry, rx], format.md 1c): which
    // key cell a query belongs to (AttentionLayout); 0 when the dump does not say (the centre rule).
    int keyStrideY = 0, keyStrideX = 0;
    bool kernelApplied = false;
    // Normaliser features (format.md 1d, MALA's released RoPE): q_normaliser N x dz and
    // k_normaliser n x dz, from which the kernel paradigms take their normaliser
    // phi(qz_i) . sum_m phi(kz_m) instead of phi(q_i) . sum_m phi(k_m). 0 when absent.
    int normaliserDim = 0;
    // output_gate [B, heads, N, d_v] (format.md 1d): the layer multiplies (A V + branch) by it
    // element-wise before its projection (MALA's `o`). Described and checked, not part of A.
    bool hasOutputGate = false;
    std::optional<LocalBranchInfo> localBranch;
    std::optional<WindowInfo> window;

    bool hasValues() const { return valueDim > 0; }
    bool hasNormaliserFeatures() const { return normaliserDim > 0; }
    int keyTokens() const { return int(keyLayout.tokens()); }  // n (N unless the keys are reduced)
    bool reducedKeys() const { return !(keyLayout == layout); }
    AttentionLayout attentionLayout() const { return {layout, keyLayout, keyStrideY, keyStrideX}; }
};

struct ImageInfo {
    bool present = false;
    int height = 0, width = 0, channels = 0;  // channels 1 for [B,h,w], 3 for [B,h,w,3]
};

// /class_names: at most this many classes, each name at most this many bytes (format.md).
inline constexpr int kMaxClassNames = 65536;
inline constexpr std::size_t kMaxClassNameBytes = 256;

struct DumpInfo {
    std::string path;
    std::uint64_t fileSize = 0;
    int formatVersion = 1;
    std::string model;
    TokenLayout layout;             // root grid and prefix
    int images = 0;                 // B (the same for every layer)
    std::vector<LayerInfo> layers;  // in order (index attribute, then natural sort of names)
    ImageInfo imageInfo;
    bool hasLabels = false;
    // /class_names: the name of label value c at index c; empty when the dump has none.
    std::vector<std::string> classNames;

    // Everything above as JSON, for provenance in exports and for `inspect --json`.
    nlohmann::json toJson() const;
};

// Models within one dump (resources/format.md, "Models"): layer names <model>.<block> group the
// layers, so one file can hold several models of the same images (the bundled example holds five).
// The model of a layer is the text before the first '.', "" when the name has none.
std::string modelOfLayer(std::string_view layerName);
struct LayerModel {
    std::string name;         // "" for the layers whose names name no model
    std::vector<int> layers;  // positions in DumpInfo::layers, in order
};
// The dump's models in the order their first layers appear.
std::vector<LayerModel> layerModels(const DumpInfo& info);

// A non-finite value found while reading; reported, never silently replaced.
struct NonFiniteValue {
    int image = 0;
    int layer = 0;  // position in DumpInfo::layers
    int head = 0;
    Index token = 0;
    char tensor = 'q';  // 'q', 'k', 'v', or 'Q' / 'K' for q_normaliser / k_normaliser (format.md 1d)
    std::string describe(const DumpInfo& info) const;  // "image 3, layer blocks.2, head 1, token 17 of k"
};

// The dataset a NonFiniteValue::tensor names: "q", "k", "v", "q_normaliser", "k_normaliser".
const char* tensorName(char tensor);

struct HeadActivations {
    Matrix q, k, v;  // q N x d, k and v n x d; v is empty when the layer has none or it was not requested
    // The layer's normaliser features (format.md 1d): N x dz and n x dz, empty when it has none.
    Matrix qNormaliser, kNormaliser;
    std::vector<NonFiniteValue> nonFinite;  // at most one entry per (tensor, token)
};

struct ImageData {
    int height = 0, width = 0, channels = 0;
    std::vector<std::uint8_t> pixels;  // row-major, interleaved channels
};

class DumpReader {
public:
    // Throws Error(Input) with a message naming the file and what is wrong.
    static std::unique_ptr<DumpReader> open(const std::string& path);
    ~DumpReader();
    DumpReader(const DumpReader&) = delete;
    DumpReader& operator=(const DumpReader&) = delete;

    const DumpInfo& info() const { return info_; }

    // One head of one image: reads the [image, head, :, :] hyperslabs of q, k (and v when asked).
    HeadActivations readHead(int image, int layer, int head, bool withValues = false) const;
    // All heads of one image in one hyperslab read per tensor (faster for whole-layer analyses).
    std::vector<HeadActivations> readLayer(int image, int layer, bool withValues = false) const;

    // The local branch's weights for one image (shared weights: the copy read and checked on open).
    // Error(Usage) when the layer has no branch; Error(Input) on a failed read or non-finite weights.
    LocalBranchWeights readLocalBranch(int image, int layer) const;

    // Error(Input) when the dump has no images. maxSide > 0: an image larger than maxSide on a side
    // is box-averaged by a whole factor while it is read, a band of rows at a time (a 16384^2 overlay
    // costs its band, not its gigabytes; issue 47 item 4). 0: every pixel.
    ImageData readImage(int image, int maxSide = 0) const;
    std::optional<std::int64_t> label(int image) const;
    // The labels of images [first, first + out.size()) in one read, each checked as label() checks
    // it. Error(Usage) when the dump has no labels or the block is out of range.
    void readLabels(int first, std::span<std::int64_t> out) const;

    // The datasets read after opening, in a fixed order: every layer's q, k, v, normaliser
    // features, output gate, position bias and local-branch weight and bias, then /images and
    // /labels (those the dump has). What the open check walks (open_check.h).
    std::vector<std::string> datasetsReadLater() const;
    // Visits every node of the chunk index of datasetsReadLater()[which] (nothing for contiguous
    // and compact storage), so that a damaged index fails here, in the open check's child, rather
    // than in a read later. Error(Input) naming the dataset when HDF5 reports a failure.
    void walkChunkIndex(std::size_t which) const;
    // A dataset that must not be read (the open check found its chunk index damaged): every read
    // that needs it throws Error(Input) with `message`. Call before sharing the reader.
    void markUnreadable(const std::string& dataset, const std::string& message);
    // The datasets marked unreadable, with their messages.
    const std::map<std::string, std::string>& unreadableDatasets() const;

    // From now on every read of a dataset's data (heads, layers, branch weights, images, labels)
    // runs in AttnLens's reading process, `executable` started again with kReadServerArgument
    // (open_check.h), at the first read. HDF5 crashing or stalling on a damaged file there ends only
    // that process: the read is an Error(Input) naming the dataset, later reads of that dataset are
    // refused, and other datasets stay readable. For callers that must outlive a damaged file (the
    // desktop program, a Python interpreter). A read with no answer after `stallSeconds` plus a
    // second per 10 MB of its block counts as stuck. Call before sharing the reader.
    void isolateReads(const std::string& executable, double stallSeconds = 30);
    bool readsIsolated() const;

private:
    friend struct DumpReaderAccess;
    DumpReader() = default;
    struct Impl;
    std::unique_ptr<Impl> impl_;
    DumpInfo info_;
};

// The process-wide lock around every HDF5 call.
std::mutex& hdf5Mutex();

// Writing dumps: used by `attnlens-cli synth` and by tests that need valid or deliberately broken
// files. Everything is written to a TemporaryOutputFile (io/atomic_file.h: `.NAME.tmp-<pid>` beside
// `path`), synced and renamed by commit(); a writer destroyed without commit() removes it.
class DumpWriter {
public:
    explicit DumpWriter(const std::string& path);  // Error(Output) when it cannot be created
    ~DumpWriter();
    DumpWriter(const DumpWriter&) = delete;
    DumpWriter& operator=(const DumpWriter&) = delete;

    void setRootAttribute(const std::string& name, const std::string& value);
    void setRootAttribute(const std::string& name, std::int64_t value);
    void setRootAttribute(const std::string& name, const std::vector<std::int64_t>& value);
    // path like "/layers/blocks.0"; groups are created as needed
    void setGroupAttribute(const std::string& group, const std::string& name, const std::string& value);
    void setGroupAttribute(const std::string& group, const std::string& name, std::int64_t value);
    void setGroupAttribute(const std::string& group, const std::string& name, double value);
    void setGroupAttribute(const std::string& group, const std::string& name, const std::vector<std::int64_t>& value);
    // A float dataset of the given shape stored as dtype, chunked one leading index per chunk.
    void writeFloatDataset(const std::string& path, const std::vector<std::uint64_t>& shape,
                           const std::vector<float>& data, DType storedAs);
    void writeUInt8Dataset(const std::string& path, const std::vector<std::uint64_t>& shape,
                           const std::vector<std::uint8_t>& data);
    void writeInt64Dataset(const std::string& path, const std::vector<std::uint64_t>& shape,
                           const std::vector<std::int64_t>& data);
    void writeInt32Dataset(const std::string& path, const std::vector<std::uint64_t>& shape,
                           const std::vector<std::int32_t>& data);
    // A rank-1 string dataset (/class_names): variable-length UTF-8 (h5py's str), or fixed-length
    // NUL-padded ASCII as long as the longest value after setFixedLengthStrings(true).
    void writeStringDataset(const std::string& path, const std::vector<std::string>& values);
    // Creates a float dataset without writing data (chunks stay unallocated, reads give 0), so a
    // file can declare huge sizes while staying small: for tests of the reader's size checks.
    void declareFloatDataset(const std::string& path, const std::vector<std::uint64_t>& shape, DType storedAs);
    // A boolean stored as h5py stores numpy bools: an int8 enum {FALSE = 0, TRUE = 1}.
    void setGroupBoolAttribute(const std::string& group, const std::string& name, bool value);
    // String attributes and datasets are variable-length UTF-8 (as h5py writes str); after
    // setFixedLengthStrings(true) they are fixed-length, NUL-padded ASCII (as numpy bytes_).
    void setFixedLengthStrings(bool fixed);
    // Extendible columns, for tables written while their rows arrive (record tables, analyze
    // --records hdf5): a dataset of shape [0] (width 0) or [0, width], chunked `chunkRows` rows at a
    // time, byte-shuffled and deflated (level 1), grown by each append. Float columns are stored as
    // little-endian float64, integer columns as int32; `rows` rows of `width` (or 1) values each.
    void createColumn(const std::string& path, bool integer, std::uint64_t width, std::uint64_t chunkRows);
    void appendColumn(const std::string& path, const double* values, std::uint64_t rows);
    void appendColumn(const std::string& path, const std::int32_t* values, std::uint64_t rows);
    void commit();  // close and rename into place

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// True while the calling thread is inside the HDF5 library (holds the lock that serialises every
// HDF5 call). Async-signal-safe: attnlens-cli's SIGSEGV handler uses it to tell a crash of HDF5 on
// a file with damaged metadata (HDF5 1.10 trusts some sizes it reads, e.g. global heap objects of
// variable-length strings) from a bug of its own.
bool insideHdf5() noexcept;

}  // namespace attnlens
