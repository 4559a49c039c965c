// DumpReader: validates an "attnlens.dump" file on open (metadata only) and reads hyperslabs.
// The format and every message are documented in resources/format.md.
#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "attnlens/dump.h"
#include "attnlens/error.h"
#include "attnlens/text.h"
#include "float16.h"
#include "hdf5_util.h"

namespace attnlens {

namespace {

constexpr const char* kFormatName = "attnlens.dump";
constexpr std::int64_t kSupportedVersion = 1;
// One (image, layer) read in double (q, k and v, all heads) must stay below this: larger declared
// sizes are rejected on open, before anything is allocated.
constexpr double kMaxLayerReadBytes = 8.0 * double(1ull << 30);
// The same bound for one image of /images.
constexpr double kMaxImageBytes = 1.0 * double(1ull << 30);
// A compressed chunk is decompressed whole by every read that touches it, so chunks larger than
// this (uncompressed) are refused on open: a dataset chunked over many images would otherwise cost
// a gigabyte of memory and seconds per (image, head) read.
constexpr double kMaxFilteredChunkBytes = 256.0 * double(1u << 20);
// Per-thread read buffers larger than this are freed after use instead of being kept for reuse.
constexpr std::size_t kKeptScratchBytes = 64u << 20;

std::string formatGiB(double bytes) {
    std::ostringstream out;
    out.precision(3);
    out << bytes / double(1ull << 30) << " GiB";
    return out.str();
}

std::string joinInts(const std::vector<std::int64_t>& values) {
    std::string s = "[";
    for (std::size_t i = 0; i < values.size(); ++i) {
        s += (i ? ", " : "") + std::to_string(values[i]);
    }
    return s + "]";
}

// Natural order: digit runs compare as numbers, so "blocks.2" < "blocks.10".
int naturalCompare(const std::string& a, const std::string& b) {
    auto isDigit = [](char c) { return c >= '0' && c <= '9'; };
    std::size_t i = 0, j = 0;
    while (i < a.size() && j < b.size()) {
        if (isDigit(a[i]) && isDigit(b[j])) {
            std::size_t iEnd = i, jEnd = j;
            while (iEnd < a.size() && isDigit(a[iEnd])) ++iEnd;
            while (jEnd < b.size() && isDigit(b[jEnd])) ++jEnd;
            std::size_t iStart = i, jStart = j;
            while (iStart + 1 < iEnd && a[iStart] == '0') ++iStart;
            while (jStart + 1 < jEnd && b[jStart] == '0') ++jStart;
            const std::size_t iLength = iEnd - iStart, jLength = jEnd - jStart;
            if (iLength != jLength) return iLength < jLength ? -1 : 1;
            const int c = a.compare(iStart, iLength, b, jStart, jLength);
            if (c != 0) return c < 0 ? -1 : 1;
            i = iEnd;
            j = jEnd;
        } else {
            if (a[i] != b[j]) return (unsigned char)a[i] < (unsigned char)b[j] ? -1 : 1;
            ++i;
            ++j;
        }
    }
    if (i < a.size()) return 1;
    if (j < b.size()) return -1;
    return 0;
}

std::optional<DType> floatDType(hid_t type) {
    if (H5Tget_class(type) != H5T_FLOAT) return std::nullopt;
    switch (H5Tget_size(type)) {
        case 2:
            return h5::isIeeeHalf(type) ? std::optional(DType::Float16) : std::nullopt;
        case 4:
            return h5::isIeeeFloat(type) ? std::optional(DType::Float32) : std::nullopt;
        case 8:
            return h5::isIeeeFloat(type) ? std::optional(DType::Float64) : std::nullopt;
        default:
            return std::nullopt;
    }
}

std::size_t bytesOf(DType type) {
    switch (type) {
        case DType::Float16:
            return 2;
        case DType::Float32:
            return 4;
        case DType::Float64:
            return 8;
    }
    return 8;
}

// Converts `count` stored values starting at element `offset` of `raw` to double.
void toDouble(const unsigned char* raw, DType type, std::size_t offset, std::size_t count, double* out) {
    switch (type) {
        case DType::Float16: {
            // All 65536 halves, decoded once (512 KiB): a lookup beats the branchy decoder ~2x.
            static const std::vector<double> table = [] {
                std::vector<double> t(1u << 16);
                for (std::uint32_t h = 0; h < t.size(); ++h) t[h] = float16::toDouble(std::uint16_t(h));
                return t;
            }();
            const unsigned char* p = raw + offset * 2;
            for (std::size_t i = 0; i < count; ++i) {
                std::uint16_t h;
                std::memcpy(&h, p + 2 * i, 2);
                out[i] = table[h];
            }
            break;
        }
        case DType::Float32: {
            const unsigned char* p = raw + offset * 4;
            for (std::size_t i = 0; i < count; ++i) {
                float f;
                std::memcpy(&f, p + 4 * i, 4);
                out[i] = double(f);
            }
            break;
        }
        case DType::Float64:
            std::memcpy(out, raw + offset * 8, count * 8);
            break;
    }
}

void collectNonFinite(const Matrix& m, char tensor, int image, int layer, int head, std::vector<NonFiniteValue>& out) {
    for (Index row = 0; row < m.rows(); ++row) {
        if (!m.row(row).allFinite()) out.push_back({image, layer, head, row, tensor});
    }
}

// Reused per thread so that repeated reads do not allocate; large buffers are released.
std::vector<unsigned char>& scratchBuffer() {
    thread_local std::vector<unsigned char> buffer;
    return buffer;
}

void releaseLargeScratch() {
    std::vector<unsigned char>& buffer = scratchBuffer();
    if (buffer.capacity() > kKeptScratchBytes) std::vector<unsigned char>().swap(buffer);
}

struct Tensor {
    h5::Handle dataset;
    DType type = DType::Float32;
    std::string path;  // "/layers/blocks.0/q"
};

struct LayerHandles {
    Tensor q, k, v;
    Tensor branchWeight, branchBias;  // local_branch/weight and bias (invalid when absent)
    // Weights and bias shared by all images, read and checked on open; per-image parts are empty.
    LocalBranchWeights sharedBranch;
};

// One channel of a branch's weights or bias with a non-finite value, or -1.
int firstNonFiniteChannel(const std::vector<double>& values, std::size_t perChannel) {
    for (std::size_t i = 0; i < values.size(); ++i)
        if (!std::isfinite(values[i])) return int(i / perChannel);
    return -1;
}

}  // namespace

const char* toString(DType t) {
    switch (t) {
        case DType::Float16:
            return "float16";
        case DType::Float32:
            return "float32";
        case DType::Float64:
            return "float64";
    }
    return "unknown";
}

std::string NonFiniteValue::describe(const DumpInfo& info) const {
    const std::string layerName = layer >= 0 && std::size_t(layer) < info.layers.size()
                                      ? info.layers[std::size_t(layer)].name
                                      : "#" + std::to_string(layer);
    return "image " + std::to_string(image) + ", layer " + layerName + ", head " + std::to_string(head) + ", token " +
           std::to_string(token) + " of " + std::string(1, tensor);
}

nlohmann::json DumpInfo::toJson() const {
    nlohmann::json layersJson = nlohmann::json::array();
    for (const LayerInfo& l : layers) {
        layersJson.push_back({
            {"name", l.name},
            {"index", l.index},
            {"batch", l.batch},
            {"heads", l.heads},
            {"tokens", l.tokens},
            {"dim", l.dim},
            {"value_dim", l.valueDim},
            {"qk_dtype", toString(l.qkType)},
            {"v_dtype", l.vType ? nlohmann::json(toString(*l.vType)) : nlohmann::json(nullptr)},
            {"attention", l.attention},
            {"scale", l.scale},
            {"scale_from_file", l.scaleFromFile},
            {"grid", {l.layout.gridH, l.layout.gridW}},
            {"prefix_tokens", l.layout.prefix},
            {"kernel_applied", l.kernelApplied},
            {"local_branch", l.localBranch
                                 ? nlohmann::json{{"kind", l.localBranch->kind},
                                                  {"channels", toString(l.localBranch->channelMap)},
                                                  {"weight_channels", l.localBranch->channels},
                                                  {"kernel", {l.localBranch->kernelH, l.localBranch->kernelW}},
                                                  {"per_image", l.localBranch->perImage},
                                                  {"bias", l.localBranch->hasBias
                                                               ? (l.localBranch->biasPerImage ? "per_image" : "shared")
                                                               : "none"},
                                                  {"dtype", toString(l.localBranch->weightType)}}
                                 : nlohmann::json(nullptr)},
        });
    }
    return {
        {"path", path},
        {"file_size", fileSize},
        {"format", kFormatName},
        {"format_version", formatVersion},
        {"model", model},
        {"grid", {layout.gridH, layout.gridW}},
        {"prefix_tokens", layout.prefix},
        {"tokens", layout.tokens()},
        {"images", images},
        {"layers", layersJson},
        {"image_data",
         {{"present", imageInfo.present},
          {"height", imageInfo.height},
          {"width", imageInfo.width},
          {"channels", imageInfo.channels}}},
        {"labels", hasLabels},
    };
}

struct DumpReader::Impl {
    std::string path;
    h5::Handle file;
    h5::Handle halfMemoryType;
    std::vector<LayerHandles> layers;  // in DumpInfo::layers order
    h5::Handle images;
    h5::Handle labels;

    ~Impl() {
        h5::Lock lock;
        layers.clear();
        images.reset();
        labels.reset();
        halfMemoryType.reset();
        file.reset();
    }

    hid_t memoryType(DType type) const {
        switch (type) {
            case DType::Float16:
                return halfMemoryType.get();
            case DType::Float32:
                return H5T_NATIVE_FLOAT;
            case DType::Float64:
                return H5T_NATIVE_DOUBLE;
        }
        return H5T_NATIVE_DOUBLE;
    }

    // Reads the hyperslab start/extent (any rank) of a float dataset and converts it to double.
    std::vector<double> readBlock(const Tensor& tensor, const std::vector<hsize_t>& start,
                                  const std::vector<hsize_t>& extent, const std::string& what) const {
        std::size_t count = 1;
        for (hsize_t e : extent) count *= std::size_t(e);
        std::vector<unsigned char> buffer(count * bytesOf(tensor.type));
        {
            std::optional<h5::Lock> lock;  // open() reads shared branch weights with the lock held
            if (!h5::lockHeldByThisThread()) lock.emplace();
            h5::Handle fileSpace(H5Dget_space(tensor.dataset.get()));
            h5::Handle memorySpace(H5Screate_simple(int(extent.size()), extent.data(), nullptr));
            if (!fileSpace.valid() || !memorySpace.valid() ||
                H5Sselect_hyperslab(fileSpace.get(), H5S_SELECT_SET, start.data(), nullptr, extent.data(), nullptr) <
                    0 ||
                H5Dread(tensor.dataset.get(), memoryType(tensor.type), memorySpace.get(), fileSpace.get(), H5P_DEFAULT,
                        buffer.data()) < 0) {
                throwInput(path + ": reading " + tensor.path + " (" + what +
                           ") failed: the file is truncated or corrupt" + h5::errorSuffix());
            }
        }
        std::vector<double> out(count);
        toDouble(buffer.data(), tensor.type, 0, count, out.data());
        return out;
    }

    void checkBranchValues(const Tensor& tensor, const std::vector<double>& values, std::size_t perChannel,
                           int image) const {
        const int channel = firstNonFiniteChannel(values, perChannel);
        if (channel < 0) return;
        const auto begin = values.begin() + std::ptrdiff_t(std::size_t(channel) * perChannel);
        const double bad =
            *std::find_if(begin, begin + std::ptrdiff_t(perChannel), [](double x) { return !std::isfinite(x); });
        std::ostringstream value;
        value << bad;
        throwInput(path + ": " + tensor.path + (image >= 0 ? " (image " + std::to_string(image) + ")" : "") +
                   ": channel " + std::to_string(channel) + " holds a non-finite value (" + value.str() +
                   "); the branch's weights must be finite");
    }

    // Reads the hyperslab [image, headBegin:headBegin+headCount, :, :] of one tensor in its stored
    // type into the calling thread's scratch buffer. Only the HDF5 part holds the lock.
    const unsigned char* readSlab(const Tensor& tensor, int image, int headBegin, int headCount, Index tokens,
                                  Index dim, const std::string& what) const {
        const std::size_t count = std::size_t(headCount) * std::size_t(tokens) * std::size_t(dim);
        std::vector<unsigned char>& buffer = scratchBuffer();
        buffer.resize(count * bytesOf(tensor.type));
        h5::Lock lock;
        h5::Handle fileSpace(H5Dget_space(tensor.dataset.get()));
        const hsize_t start[4] = {hsize_t(image), hsize_t(headBegin), 0, 0};
        const hsize_t extent[4] = {1, hsize_t(headCount), hsize_t(tokens), hsize_t(dim)};
        // The memory space has the selection's shape: with a flat one HDF5 1.10 walks the
        // selection element by element (~20x slower).
        h5::Handle memorySpace(H5Screate_simple(4, extent, nullptr));
        if (!fileSpace.valid() || !memorySpace.valid() ||
            H5Sselect_hyperslab(fileSpace.get(), H5S_SELECT_SET, start, nullptr, extent, nullptr) < 0 ||
            H5Dread(tensor.dataset.get(), memoryType(tensor.type), memorySpace.get(), fileSpace.get(), H5P_DEFAULT,
                    buffer.data()) < 0) {
            throwInput(path + ": reading " + tensor.path + " (" + what + ") failed: the file is truncated or corrupt" +
                       h5::errorSuffix());
        }
        return buffer.data();
    }
};

DumpReader::~DumpReader() = default;

namespace {

struct LayerCandidate {
    LayerInfo info;
    std::optional<std::int64_t> index;
    LayerHandles handles;
};

class Validator {
public:
    explicit Validator(std::string path) : path_(std::move(path)) {}

    [[noreturn]] void fail(const std::string& message) const { throwInput(path_ + ": " + message); }

    TokenLayout readLayout(hid_t object, const std::string& where, const TokenLayout& fallback, bool gridRequired,
                           std::string* gridSource, std::string* prefixSource) const {
        TokenLayout layout = fallback;
        if (h5::hasAttribute(object, "grid", where)) {
            const std::vector<std::int64_t> grid = h5::readIntegerArrayAttribute(object, "grid", where);
            if (grid.size() != 2 || grid[0] <= 0 || grid[1] <= 0 || grid[0] > INT_MAX || grid[1] > INT_MAX) {
                throwInput(where + " attribute 'grid' must be two positive integers [H, W], got " + joinInts(grid));
            }
            layout.gridH = int(grid[0]);
            layout.gridW = int(grid[1]);
            if (gridSource) *gridSource = "the layer";
        } else if (gridRequired) {
            throwInput(where + " attribute 'grid' is missing (the spatial token grid [H, W])");
        }
        if (h5::hasAttribute(object, "prefix_tokens", where)) {
            const std::int64_t prefix = h5::readIntegerAttribute(object, "prefix_tokens", where);
            if (prefix < 0 || prefix > INT_MAX) {
                throwInput(where + " attribute 'prefix_tokens' must be an integer >= 0, got " + std::to_string(prefix));
            }
            layout.prefix = int(prefix);
            if (prefixSource) *prefixSource = "the layer";
        }
        return layout;
    }

    Tensor openTensor(hid_t group, const std::string& layerPath, const char* name) const {
        Tensor tensor;
        tensor.path = layerPath + "/" + name;
        tensor.dataset = h5::Handle(H5Dopen2(group, name, H5P_DEFAULT));
        if (!tensor.dataset.valid()) {
            fail(tensor.path + " cannot be opened as a dataset" + h5::errorSuffix());
        }
        h5::Handle type(H5Dget_type(tensor.dataset.get()));
        const std::optional<DType> dtype = floatDType(type.get());
        if (!dtype) {
            fail(tensor.path + " has dtype " + h5::describeType(type.get()) +
                 "; q, k and v must be float16, float32 or float64");
        }
        tensor.type = *dtype;
        requireFilters(tensor.dataset.get(), tensor.path);
        return tensor;
    }

    // A dataset compressed with a filter this HDF5 library lacks (e.g. h5py's built-in lzf) would
    // only fail on the first read; say so on open instead.
    void requireFilters(hid_t dataset, const std::string& datasetPath) const {
        h5::Handle properties(H5Dget_create_plist(dataset));
        if (!properties.valid()) fail(datasetPath + " has damaged storage properties" + h5::errorSuffix());
        // Raw data must live in the dump: external files and virtual datasets would let a crafted
        // dump make AttnLens read (and export) any file on the machine.
        const int external = H5Pget_external_count(properties.get());
        if (external != 0) {
            fail(datasetPath + " keeps its data in " +
                 (external > 0 ? std::to_string(external) + " external file(s)" : "damaged external-file settings") +
                 "; AttnLens reads only data stored in the dump itself (h5repack copies it in)");
        }
        const H5D_layout_t layout = H5Pget_layout(properties.get());
        if (layout == H5D_VIRTUAL) {
            fail(datasetPath +
                 " is a virtual dataset that maps data from other files; AttnLens reads only data "
                 "stored in the dump itself (h5repack copies it in)");
        }
        if (layout != H5D_CONTIGUOUS && layout != H5D_CHUNKED && layout != H5D_COMPACT) {
            fail(datasetPath + " has a damaged storage layout" + h5::errorSuffix());
        }
        const int filters = properties.valid() ? H5Pget_nfilters(properties.get()) : 0;
        for (int i = 0; i < filters; ++i) {
            unsigned flags = 0, config = 0;
            size_t values = 0;
            char name[128] = {};
            const H5Z_filter_t filter =
                H5Pget_filter2(properties.get(), unsigned(i), &flags, &values, nullptr, sizeof name, name, &config);
            // Optional filters too (h5py adds lzf as optional): chunks it did compress are
            // unreadable without it.
            if (filter < 0 || H5Zfilter_avail(filter) > 0) continue;
            fail(datasetPath + " is compressed with HDF5 filter " + std::to_string(filter) +
                 (name[0] ? " (" + std::string(name) + ")" : std::string()) +
                 ", which this HDF5 library does not provide; store it uncompressed or with gzip");
        }
        if (filters > 0 && H5Pget_layout(properties.get()) == H5D_CHUNKED) {
            const int rank = H5Pget_chunk(properties.get(), 0, nullptr);
            std::vector<hsize_t> chunk(std::size_t(std::max(rank, 0)));
            h5::Handle type(H5Dget_type(dataset));
            if (rank > 0 && type.valid() && H5Pget_chunk(properties.get(), rank, chunk.data()) == rank) {
                double bytes = double(H5Tget_size(type.get()));
                for (hsize_t c : chunk) bytes *= double(c);
                if (bytes > kMaxFilteredChunkBytes) {
                    std::vector<hsize_t> suggested = h5::datasetDims(dataset);
                    if (!suggested.empty()) suggested[0] = 1;
                    std::string dims;
                    for (std::size_t i = 0; i < suggested.size(); ++i)
                        dims += (i ? "x" : "") + std::to_string(suggested[i]);
                    fail(datasetPath + " is compressed in chunks of " + h5::describeDims(chunk) + " (" +
                         formatGiB(bytes) + " uncompressed), more than the limit of " +
                         formatGiB(kMaxFilteredChunkBytes) +
                         ": every read would decompress a whole chunk; store one image per chunk, e.g. "
                         "h5repack -l " +
                         datasetPath + ":CHUNK=" + dims + " IN.h5 OUT.h5");
                }
            }
        }
    }

    std::vector<hsize_t> rank4Dims(const Tensor& tensor) const {
        const std::vector<hsize_t> dims = h5::datasetDims(tensor.dataset.get());
        if (dims.size() != 4) {
            fail(tensor.path + " has rank " + std::to_string(dims.size()) + " (shape " + h5::describeDims(dims) +
                 "); expected rank 4 [B, heads, N, d]");
        }
        static const char* const names[4] = {"B (images)", "heads", "N (tokens)", "d"};
        for (std::size_t i = 0; i < 4; ++i) {
            if (dims[i] == 0) {
                fail(tensor.path + " has shape " + h5::describeDims(dims) + ": " + names[i] + " must be at least 1");
            }
            if (dims[i] > hsize_t(INT_MAX)) {
                fail(tensor.path + " has shape " + h5::describeDims(dims) + ": " + names[i] + " is larger than " +
                     std::to_string(INT_MAX));
            }
        }
        return dims;
    }

    LayerCandidate layer(hid_t layersGroup, const std::string& name, const TokenLayout& root) const {
        LayerCandidate candidate;
        LayerInfo& info = candidate.info;
        info.name = name;
        const std::string layerPath = "/layers/" + name;
        const std::string where = path_ + ": " + layerPath;

        h5::Handle group(H5Oopen(layersGroup, name.c_str(), H5P_DEFAULT));
        if (!group.valid()) fail(layerPath + " cannot be opened" + h5::errorSuffix());
        if (H5Iget_type(group.get()) != H5I_GROUP) {
            fail(layerPath + " is not a group (each layer is a group holding q, k and optionally v)");
        }
        for (const char* required : {"q", "k"}) {
            if (!h5::linkExists(group.get(), required, where)) {
                fail(layerPath + ": dataset '" + required + "' is missing (q and k are required)");
            }
        }
        candidate.handles.q = openTensor(group.get(), layerPath, "q");
        candidate.handles.k = openTensor(group.get(), layerPath, "k");
        const std::vector<hsize_t> q = rank4Dims(candidate.handles.q);
        const std::vector<hsize_t> k = rank4Dims(candidate.handles.k);
        if (q != k) {
            fail(layerPath + ": q has shape " + h5::describeDims(q) + " but k has shape " + h5::describeDims(k) +
                 "; q and k must have the same shape");
        }
        info.batch = int(q[0]);
        info.heads = int(q[1]);
        info.tokens = int(q[2]);
        info.dim = int(q[3]);
        info.qkType = candidate.handles.q.type;
        if (candidate.handles.k.type != candidate.handles.q.type) {
            fail(layerPath + ": q is " + toString(candidate.handles.q.type) + " but k is " +
                 toString(candidate.handles.k.type) + "; q and k must have the same dtype");
        }

        if (h5::linkExists(group.get(), "v", where)) {
            candidate.handles.v = openTensor(group.get(), layerPath, "v");
            const std::vector<hsize_t> v = rank4Dims(candidate.handles.v);
            if (v[0] != q[0] || v[1] != q[1] || v[2] != q[2]) {
                fail(layerPath + ": v has shape " + h5::describeDims(v) + " but q has shape " + h5::describeDims(q) +
                     "; v must have the same B, heads and N as q");
            }
            info.valueDim = int(v[3]);
            info.vType = candidate.handles.v.type;
        }

        const double readBytes =
            double(info.heads) * double(info.tokens) * (2.0 * double(info.dim) + double(info.valueDim)) * 8.0;
        if (readBytes > kMaxLayerReadBytes) {
            fail(layerPath + ": reading one (image, layer) would need " + formatGiB(readBytes) + " as double (heads " +
                 std::to_string(info.heads) + " x N " + std::to_string(info.tokens) + " x (2 x d " +
                 std::to_string(info.dim) + " + v d " + std::to_string(info.valueDim) +
                 ") x 8 bytes), more than the limit of " + formatGiB(kMaxLayerReadBytes) +
                 "; the declared sizes are not plausible");
        }

        std::string gridSource = "the root", prefixSource = "the root";
        info.layout = readLayout(group.get(), where, root, false, &gridSource, &prefixSource);
        if (Index(info.tokens) != info.layout.tokens()) {
            fail(layerPath + ": N = " + std::to_string(info.tokens) + " tokens but prefix_tokens + H*W = " +
                 std::to_string(info.layout.prefix) + " + " + std::to_string(info.layout.gridH) + "*" +
                 std::to_string(info.layout.gridW) + " = " + std::to_string(info.layout.tokens()) + " (grid from " +
                 gridSource + ", prefix_tokens from " + prefixSource + ")");
        }

        if (h5::hasAttribute(group.get(), "index", where)) {
            candidate.index = h5::readIntegerAttribute(group.get(), "index", where);
            if (*candidate.index < INT_MIN || *candidate.index > INT_MAX) {
                throwInput(where + " attribute 'index' is out of range: " + std::to_string(*candidate.index));
            }
        }
        if (h5::hasAttribute(group.get(), "attention", where)) {
            info.attention = h5::readStringAttribute(group.get(), "attention", where);
        }
        info.scale = 1.0 / std::sqrt(double(info.dim));
        if (h5::hasAttribute(group.get(), "scale", where)) {
            const double scale = h5::readNumberAttribute(group.get(), "scale", where);
            if (!(scale > 0) || !std::isfinite(scale)) {
                std::ostringstream value;
                value << scale;
                throwInput(where + " attribute 'scale' must be a positive finite number, got " + value.str());
            }
            info.scale = scale;
            info.scaleFromFile = true;
        }
        if (h5::hasAttribute(group.get(), "kernel_applied", where)) {
            info.kernelApplied = h5::readBoolAttribute(group.get(), "kernel_applied", where);
        }
        if (h5::linkExists(group.get(), "local_branch", where)) localBranch(group.get(), layerPath, candidate);
        return candidate;
    }

    // resources/format.md, section 1a. Shapes and attributes only; the weights are read by open().
    void localBranch(hid_t layerGroup, const std::string& layerPath, LayerCandidate& candidate) const {
        LayerInfo& info = candidate.info;
        const std::string branchPath = layerPath + "/local_branch";
        const std::string where = path_ + ": " + branchPath;
        h5::Handle group(H5Oopen(layerGroup, "local_branch", H5P_DEFAULT));
        if (!group.valid()) fail(branchPath + " cannot be opened" + h5::errorSuffix());
        if (H5Iget_type(group.get()) != H5I_GROUP)
            fail(branchPath + " is not a group (the local branch is a group holding weight and optionally bias)");
        LocalBranchInfo branch;
        for (const char* required : {"kind", "channels"})
            if (!h5::hasAttribute(group.get(), required, where))
                fail(branchPath + " attribute '" + required +
                     "' is missing (kind: dwc, inline_residual, lepe or "
                     "other text; channels: per_head or all)");
        branch.kind = h5::readStringAttribute(group.get(), "kind", where);
        const std::string channels = h5::readStringAttribute(group.get(), "channels", where);
        if (channels == "per_head")
            branch.channelMap = LocalChannelMap::PerHead;
        else if (channels == "all")
            branch.channelMap = LocalChannelMap::All;
        else
            fail(branchPath + " attribute 'channels' must be \"per_head\" or \"all\", got \"" + channels + "\"");
        if (!info.hasValues()) fail(branchPath + " needs the dataset v (the branch acts on V's channels)");
        if (!h5::linkExists(group.get(), "weight", where)) fail(branchPath + ": dataset 'weight' is missing");

        Tensor weight = openBranchTensor(group.get(), branchPath, "weight");
        const std::vector<hsize_t> w = h5::datasetDims(weight.dataset.get());
        if (w.size() != 3 && w.size() != 4)
            fail(weight.path + " has shape " + h5::describeDims(w) + "; expected [C, kh, kw] or [B, C, kh, kw]");
        branch.perImage = w.size() == 4;
        const std::size_t o = branch.perImage ? 1 : 0;
        if (branch.perImage && w[0] != hsize_t(info.batch))
            fail(weight.path + " has shape " + h5::describeDims(w) +
                 ": per-image weights [B, C, kh, kw] need B = " + std::to_string(info.batch) + " (the layer's images)");
        const hsize_t kh = w[o + 1], kw = w[o + 2];
        if (kh == 0 || kw == 0 || kh % 2 == 0 || kw % 2 == 0)
            fail(weight.path + " has shape " + h5::describeDims(w) +
                 ": kernel sizes must be odd (PyTorch's 'same' padding (k-1)/2 is symmetric only for odd k)");
        if (kh > 255 || kw > 255)
            fail(weight.path + " has shape " + h5::describeDims(w) + ": kernel sizes above 255 are not plausible");
        const hsize_t expected = branch.channelMap == LocalChannelMap::PerHead
                                     ? hsize_t(info.valueDim)
                                     : hsize_t(info.heads) * hsize_t(info.valueDim);
        if (w[o] != expected)
            fail(weight.path + " has C = " + std::to_string(w[o]) + " channels but channels = \"" + channels +
                 "\" needs C = " +
                 (branch.channelMap == LocalChannelMap::PerHead
                      ? "d_v = " + std::to_string(info.valueDim)
                      : "heads x d_v = " + std::to_string(info.heads) + " x " + std::to_string(info.valueDim) + " = " +
                            std::to_string(expected)));
        branch.channels = int(expected);
        branch.kernelH = int(kh);
        branch.kernelW = int(kw);
        branch.weightType = weight.type;
        candidate.handles.branchWeight = std::move(weight);

        if (h5::linkExists(group.get(), "bias", where)) {
            Tensor bias = openBranchTensor(group.get(), branchPath, "bias");
            const std::vector<hsize_t> b = h5::datasetDims(bias.dataset.get());
            const bool shared = b.size() == 1 && b[0] == expected;
            const bool perImage = b.size() == 2 && b[0] == hsize_t(info.batch) && b[1] == expected;
            if (!shared && !perImage)
                fail(bias.path + " has shape " + h5::describeDims(b) + "; expected [C] = [" + std::to_string(expected) +
                     "] or [B, C] = [" + std::to_string(info.batch) + ", " + std::to_string(expected) + "]");
            branch.hasBias = true;
            branch.biasPerImage = perImage;
            candidate.handles.branchBias = std::move(bias);
        }
        info.localBranch = branch;
    }

    Tensor openBranchTensor(hid_t group, const std::string& branchPath, const char* name) const {
        Tensor tensor;
        tensor.path = branchPath + "/" + name;
        tensor.dataset = h5::Handle(H5Dopen2(group, name, H5P_DEFAULT));
        if (!tensor.dataset.valid()) fail(tensor.path + " cannot be opened as a dataset" + h5::errorSuffix());
        h5::Handle type(H5Dget_type(tensor.dataset.get()));
        const std::optional<DType> dtype = floatDType(type.get());
        if (!dtype)
            fail(tensor.path + " has dtype " + h5::describeType(type.get()) +
                 "; the local branch's weight and bias must be float16, float32 or float64");
        tensor.type = *dtype;
        requireFilters(tensor.dataset.get(), tensor.path);
        return tensor;
    }

private:
    std::string path_;
};

}  // namespace

std::unique_ptr<DumpReader> DumpReader::open(const std::string& path) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::file_status status = fs::status(path, ec);
    if (!fs::exists(status)) throwInput(path + ": no such file");
    if (fs::is_directory(status)) throwInput(path + ": is a directory, not a dump file");
    {
        std::ifstream probe(path, std::ios::binary);
        if (!probe) throwInput(path + ": cannot be read (" + std::strerror(errno) + ")");
    }

    std::unique_ptr<DumpReader> reader(new DumpReader());
    reader->impl_ = std::make_unique<Impl>();
    Impl& impl = *reader->impl_;
    DumpInfo& info = reader->info_;
    impl.path = path;
    info.path = path;
    const std::uintmax_t size = fs::file_size(path, ec);
    info.fileSize = ec ? 0 : std::uint64_t(size);
    const Validator validator(path);

    h5::Lock lock;
    const htri_t isHdf5 = H5Fis_hdf5(path.c_str());
    if (isHdf5 == 0) throwInput(path + ": not an HDF5 file");
    if (isHdf5 < 0) throwInput(path + ": cannot be read as HDF5" + h5::errorSuffix());

    h5::Handle access(H5Pcreate(H5P_FILE_ACCESS));
#if H5_VERSION_GE(1, 10, 7)
    // Read-only use: go on where the file system does not support locks (some cluster mounts).
    H5Pset_file_locking(access.get(), true, true);
#endif
    impl.file = h5::Handle(H5Fopen(path.c_str(), H5F_ACC_RDONLY, access.get()));
    if (!impl.file.valid()) {
        const std::string detail = h5::lastErrorDetail();
        const std::string suffix = detail.empty() ? "" : " (HDF5: " + detail + ")";
        std::string lower = detail;
        std::transform(lower.begin(), lower.end(), lower.begin(),
                       [](unsigned char c) { return char(std::tolower(c)); });
        if (lower.find("unable to lock") != std::string::npos && lower.find("file") != std::string::npos) {
            throwInput(path + ": cannot open: the file is locked by another program" + suffix);
        }
        throwInput(path + ": HDF5 cannot open the file: it is truncated or corrupt" + suffix);
    }
    impl.halfMemoryType = h5::makeHalfType(true);
    if (!impl.halfMemoryType.valid()) throwInput(path + ": HDF5 could not build the float16 type");

    const std::string rootWhere = path + ": root";
    h5::Handle root(H5Gopen2(impl.file.get(), "/", H5P_DEFAULT));
    if (!root.valid()) {
        throwInput(path + ": the root group cannot be read: the file is truncated or corrupt" + h5::errorSuffix());
    }
    if (!h5::hasAttribute(root.get(), "format", rootWhere)) {
        throwInput(path + ": not an AttnLens dump: the root attribute 'format' is missing");
    }
    const std::string format = h5::readStringAttribute(root.get(), "format", rootWhere);
    if (format != kFormatName) {
        throwInput(path + ": not an AttnLens dump: the root attribute 'format' is \"" + format + "\", expected \"" +
                   kFormatName + "\"");
    }
    if (!h5::hasAttribute(root.get(), "format_version", rootWhere)) {
        throwInput(path + ": the root attribute 'format_version' is missing");
    }
    const std::int64_t version = h5::readIntegerAttribute(root.get(), "format_version", rootWhere);
    if (version > kSupportedVersion) {
        throwInput(path + ": format_version " + std::to_string(version) + " is newer than this AttnLens supports (" +
                   std::to_string(kSupportedVersion) + ")");
    }
    if (version < 1) {
        throwInput(path + ": format_version " + std::to_string(version) + " is not valid (expected " +
                   std::to_string(kSupportedVersion) + ")");
    }
    info.formatVersion = int(version);
    if (h5::hasAttribute(root.get(), "model", rootWhere)) {
        info.model = h5::readStringAttribute(root.get(), "model", rootWhere);
    }
    info.layout = validator.readLayout(root.get(), rootWhere, TokenLayout{}, true, nullptr, nullptr);

    if (!h5::linkExists(impl.file.get(), "layers", rootWhere)) {
        throwInput(path + ": the group /layers is missing (it holds one group per attention layer)");
    }
    h5::Handle layersGroup(H5Oopen(impl.file.get(), "layers", H5P_DEFAULT));
    if (!layersGroup.valid() || H5Iget_type(layersGroup.get()) != H5I_GROUP) {
        throwInput(path + ": /layers is not a group" + h5::errorSuffix());
    }
    H5G_info_t groupInfo;
    if (H5Gget_info(layersGroup.get(), &groupInfo) < 0) {
        throwInput(path + ": /layers cannot be listed" + h5::errorSuffix());
    }
    if (groupInfo.nlinks == 0) throwInput(path + ": /layers has no layer groups");

    std::vector<LayerCandidate> candidates;
    for (hsize_t i = 0; i < groupInfo.nlinks; ++i) {
        const ssize_t length =
            H5Lget_name_by_idx(layersGroup.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
        if (length < 0) throwInput(path + ": /layers cannot be listed" + h5::errorSuffix());
        std::string name(std::size_t(length) + 1, '\0');
        H5Lget_name_by_idx(layersGroup.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size(),
                           H5P_DEFAULT);
        name.resize(std::size_t(length));
        if (const auto problem = textProblem(name)) {
            throwInput(path + ": the layer name \"" + printableText(name, 80) +
                       "\" under /layers is not usable: " + *problem);
        }
        candidates.push_back(validator.layer(layersGroup.get(), name, info.layout));
    }

    // Layers with an index come first, by index; ties and layers without one by natural name order.
    std::sort(candidates.begin(), candidates.end(), [](const LayerCandidate& a, const LayerCandidate& b) {
        if (a.index.has_value() != b.index.has_value()) return a.index.has_value();
        if (a.index && *a.index != *b.index) return *a.index < *b.index;
        const int c = naturalCompare(a.info.name, b.info.name);
        return c != 0 ? c < 0 : a.info.name < b.info.name;
    });
    const std::string firstName = candidates.front().info.name;
    const int firstBatch = candidates.front().info.batch;
    for (std::size_t position = 0; position < candidates.size(); ++position) {
        LayerCandidate& c = candidates[position];
        c.info.index = c.index ? int(*c.index) : int(position);
        if (c.info.batch != firstBatch) {
            throwInput(path + ": /layers/" + c.info.name + " has B = " + std::to_string(c.info.batch) +
                       " images but /layers/" + firstName + " has B = " + std::to_string(firstBatch) +
                       "; every layer must hold the same images");
        }
        info.layers.push_back(std::move(c.info));
        impl.layers.push_back(std::move(c.handles));
    }
    info.images = info.layers.front().batch;

    // Shared local-branch weights and biases are model parameters of a few kilobytes: read and
    // check them now, so that a NaN kernel is an open error and later reads cost nothing.
    for (std::size_t l = 0; l < info.layers.size(); ++l) {
        const auto& branch = info.layers[l].localBranch;
        if (!branch) continue;
        LayerHandles& handles = impl.layers[l];
        LocalBranchWeights& shared = handles.sharedBranch;
        shared.channels = branch->channels;
        shared.kernelH = branch->kernelH;
        shared.kernelW = branch->kernelW;
        const hsize_t c = hsize_t(branch->channels), kh = hsize_t(branch->kernelH), kw = hsize_t(branch->kernelW);
        if (!branch->perImage) {
            shared.weights = impl.readBlock(handles.branchWeight, {0, 0, 0}, {c, kh, kw}, "all channels");
            impl.checkBranchValues(handles.branchWeight, shared.weights, std::size_t(kh * kw), -1);
        }
        if (branch->hasBias && !branch->biasPerImage) {
            shared.bias = impl.readBlock(handles.branchBias, {0}, {c}, "all channels");
            impl.checkBranchValues(handles.branchBias, shared.bias, 1, -1);
        }
    }

    if (h5::linkExists(impl.file.get(), "images", rootWhere)) {
        impl.images = h5::Handle(H5Dopen2(impl.file.get(), "images", H5P_DEFAULT));
        if (!impl.images.valid()) {
            throwInput(path + ": /images cannot be opened as a dataset" + h5::errorSuffix());
        }
        h5::Handle type(H5Dget_type(impl.images.get()));
        if (H5Tget_class(type.get()) != H5T_INTEGER || H5Tget_size(type.get()) != 1 ||
            H5Tget_sign(type.get()) != H5T_SGN_NONE) {
            throwInput(path + ": /images has dtype " + h5::describeType(type.get()) + "; expected uint8");
        }
        const std::vector<hsize_t> dims = h5::datasetDims(impl.images.get());
        const bool shapeOk = (dims.size() == 3 || (dims.size() == 4 && dims[3] == 3)) && dims[1] > 0 && dims[2] > 0 &&
                             dims[1] <= hsize_t(INT_MAX) && dims[2] <= hsize_t(INT_MAX);
        if (!shapeOk) {
            throwInput(path + ": /images has shape " + h5::describeDims(dims) +
                       "; expected [B, h, w] or [B, h, w, 3] with h, w >= 1");
        }
        if (dims[0] != hsize_t(info.images)) {
            throwInput(path + ": /images holds " + std::to_string(dims[0]) +
                       " images but the layers have B = " + std::to_string(info.images));
        }
        validator.requireFilters(impl.images.get(), "/images");
        info.imageInfo.present = true;
        info.imageInfo.height = int(dims[1]);
        info.imageInfo.width = int(dims[2]);
        info.imageInfo.channels = dims.size() == 4 ? 3 : 1;
        const double imageBytes = double(dims[1]) * double(dims[2]) * double(info.imageInfo.channels);
        if (imageBytes > kMaxImageBytes) {
            throwInput(path + ": /images has shape " + h5::describeDims(dims) + ": one image is " +
                       formatGiB(imageBytes) + ", more than the limit of " + formatGiB(kMaxImageBytes));
        }
    }

    if (h5::linkExists(impl.file.get(), "labels", rootWhere)) {
        impl.labels = h5::Handle(H5Dopen2(impl.file.get(), "labels", H5P_DEFAULT));
        if (!impl.labels.valid()) {
            throwInput(path + ": /labels cannot be opened as a dataset" + h5::errorSuffix());
        }
        h5::Handle type(H5Dget_type(impl.labels.get()));
        if (H5Tget_class(type.get()) != H5T_INTEGER) {
            throwInput(path + ": /labels has dtype " + h5::describeType(type.get()) + "; expected an integer type");
        }
        const std::vector<hsize_t> dims = h5::datasetDims(impl.labels.get());
        if (dims.size() != 1 || dims[0] != hsize_t(info.images)) {
            throwInput(path + ": /labels has shape " + h5::describeDims(dims) + "; expected [B] = [" +
                       std::to_string(info.images) + "]");
        }
        validator.requireFilters(impl.labels.get(), "/labels");
        info.hasLabels = true;
    }
    return reader;
}

namespace {

void checkRange(const std::string& path, const char* what, int value, int count, const std::string& owner) {
    if (value < 0 || value >= count) {
        throwUsage(path + ": " + what + " " + std::to_string(value) + " is out of range (" + owner + " has " +
                   std::to_string(count) + ", numbered from 0)");
    }
}

}  // namespace

HeadActivations DumpReader::readHead(int image, int layer, int head, bool withValues) const {
    checkRange(info_.path, "image", image, info_.images, "the dump");
    checkRange(info_.path, "layer", layer, int(info_.layers.size()), "the dump");
    const LayerInfo& l = info_.layers[std::size_t(layer)];
    checkRange(info_.path, "head", head, l.heads, "layer " + l.name);
    const LayerHandles& handles = impl_->layers[std::size_t(layer)];
    const std::string what = "image " + std::to_string(image) + ", head " + std::to_string(head);

    HeadActivations result;
    auto load = [&](const Tensor& tensor, Index dim, Matrix& out, char name) {
        const unsigned char* raw = impl_->readSlab(tensor, image, head, 1, l.tokens, dim, what);
        out.resize(l.tokens, dim);
        toDouble(raw, tensor.type, 0, std::size_t(out.size()), out.data());
        collectNonFinite(out, name, image, layer, head, result.nonFinite);
    };
    load(handles.q, l.dim, result.q, 'q');
    load(handles.k, l.dim, result.k, 'k');
    if (withValues && l.hasValues()) load(handles.v, l.valueDim, result.v, 'v');
    releaseLargeScratch();
    return result;
}

std::vector<HeadActivations> DumpReader::readLayer(int image, int layer, bool withValues) const {
    checkRange(info_.path, "image", image, info_.images, "the dump");
    checkRange(info_.path, "layer", layer, int(info_.layers.size()), "the dump");
    const LayerInfo& l = info_.layers[std::size_t(layer)];
    const LayerHandles& handles = impl_->layers[std::size_t(layer)];
    const std::string what = "image " + std::to_string(image) + ", all heads";

    std::vector<HeadActivations> heads(std::size_t(l.heads));
    auto load = [&](const Tensor& tensor, Index dim, Matrix HeadActivations::*member, char name) {
        const unsigned char* raw = impl_->readSlab(tensor, image, 0, l.heads, l.tokens, dim, what);
        const std::size_t perHead = std::size_t(l.tokens) * std::size_t(dim);
        for (int h = 0; h < l.heads; ++h) {
            Matrix& out = heads[std::size_t(h)].*member;
            out.resize(l.tokens, dim);
            toDouble(raw, tensor.type, std::size_t(h) * perHead, perHead, out.data());
            collectNonFinite(out, name, image, layer, h, heads[std::size_t(h)].nonFinite);
        }
    };
    load(handles.q, l.dim, &HeadActivations::q, 'q');
    load(handles.k, l.dim, &HeadActivations::k, 'k');
    if (withValues && l.hasValues()) load(handles.v, l.valueDim, &HeadActivations::v, 'v');
    releaseLargeScratch();
    return heads;
}

LocalBranchWeights DumpReader::readLocalBranch(int image, int layer) const {
    checkRange(info_.path, "image", image, info_.images, "the dump");
    checkRange(info_.path, "layer", layer, int(info_.layers.size()), "the dump");
    const LayerInfo& l = info_.layers[std::size_t(layer)];
    if (!l.localBranch) throwUsage(info_.path + ": layer " + l.name + " has no local branch");
    const LocalBranchInfo& branch = *l.localBranch;
    const LayerHandles& handles = impl_->layers[std::size_t(layer)];
    LocalBranchWeights out = handles.sharedBranch;
    const hsize_t c = hsize_t(branch.channels), kh = hsize_t(branch.kernelH), kw = hsize_t(branch.kernelW);
    const std::string what = "image " + std::to_string(image);
    if (branch.perImage) {
        out.weights = impl_->readBlock(handles.branchWeight, {hsize_t(image), 0, 0, 0}, {1, c, kh, kw}, what);
        impl_->checkBranchValues(handles.branchWeight, out.weights, std::size_t(kh * kw), image);
    }
    if (branch.hasBias && branch.biasPerImage) {
        out.bias = impl_->readBlock(handles.branchBias, {hsize_t(image), 0}, {1, c}, what);
        impl_->checkBranchValues(handles.branchBias, out.bias, 1, image);
    }
    return out;
}

ImageData DumpReader::readImage(int image) const {
    if (!info_.imageInfo.present) throwInput(info_.path + ": the dump has no /images");
    checkRange(info_.path, "image", image, info_.images, "the dump");
    ImageData result;
    result.height = info_.imageInfo.height;
    result.width = info_.imageInfo.width;
    result.channels = info_.imageInfo.channels;
    result.pixels.resize(std::size_t(result.height) * std::size_t(result.width) * std::size_t(result.channels));
    h5::Lock lock;
    h5::Handle fileSpace(H5Dget_space(impl_->images.get()));
    const hsize_t start[4] = {hsize_t(image), 0, 0, 0};
    const hsize_t extent[4] = {1, hsize_t(result.height), hsize_t(result.width), 3};
    const int rank = result.channels == 3 ? 4 : 3;
    h5::Handle memorySpace(H5Screate_simple(rank, extent, nullptr));
    if (!fileSpace.valid() || !memorySpace.valid() ||
        H5Sselect_hyperslab(fileSpace.get(), H5S_SELECT_SET, start, nullptr, extent, nullptr) < 0 ||
        H5Dread(impl_->images.get(), H5T_NATIVE_UINT8, memorySpace.get(), fileSpace.get(), H5P_DEFAULT,
                result.pixels.data()) < 0) {
        throwInput(info_.path + ": reading /images (image " + std::to_string(image) +
                   ") failed: the file is truncated or corrupt" + h5::errorSuffix());
    }
    return result;
}

std::optional<std::int64_t> DumpReader::label(int image) const {
    if (!info_.hasLabels) return std::nullopt;
    checkRange(info_.path, "image", image, info_.images, "the dump");
    std::int64_t value = 0;
    h5::Lock lock;
    h5::Handle fileSpace(H5Dget_space(impl_->labels.get()));
    const hsize_t start = hsize_t(image), one = 1;
    h5::Handle memorySpace(H5Screate_simple(1, &one, nullptr));
    if (!fileSpace.valid() || !memorySpace.valid() ||
        H5Sselect_hyperslab(fileSpace.get(), H5S_SELECT_SET, &start, nullptr, &one, nullptr) < 0 ||
        H5Dread(impl_->labels.get(), H5T_NATIVE_INT64, memorySpace.get(), fileSpace.get(), H5P_DEFAULT, &value) < 0) {
        throwInput(info_.path + ": reading /labels (image " + std::to_string(image) +
                   ") failed: the file is truncated or corrupt" + h5::errorSuffix());
    }
    return value;
}

}  // namespace attnlens

namespace attnlens {

bool insideHdf5() noexcept { return h5::lockHeldByThisThread(); }

}  // namespace attnlens
