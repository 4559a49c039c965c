// DumpReader's reads: q, k and v of one head or of all heads of a layer, the local branch's
// weights, images and labels, each one hyperslab read per dataset (h5::readHyperslab). Opening and
// validating a dump is in dump_validation.cpp; the format is documented in resources/format.md.
#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "attnlens/dump/dump.h"
#include "attnlens/io/error.h"
#include "dump_reader_impl.h"
#include "float16.h"
#include "hdf5_util.h"

namespace attnlens {

namespace {

// Per-thread read buffers larger than this are freed after use instead of being kept for reuse.
constexpr std::size_t kKeptScratchBytes = 64u << 20;

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

std::size_t elementCount(std::span<const hsize_t> extent) {
    std::size_t count = 1;
    for (hsize_t e : extent) count *= std::size_t(e);
    return count;
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

void checkRange(const std::string& path, const char* what, int value, int count, const std::string& owner) {
    if (value < 0 || value >= count) {
        throwUsage(path + ": " + what + " " + std::to_string(value) + " is out of range (" + owner + " has " +
                   std::to_string(count) + ", numbered from 0)");
    }
}

void checkImage(const DumpInfo& info, int image) { checkRange(info.path, "image", image, info.images, "the dump"); }

void checkLayer(const DumpInfo& info, int layer) {
    checkRange(info.path, "layer", layer, int(info.layers.size()), "the dump");
}

}  // namespace

DumpReader::Impl::~Impl() {
    h5::Lock lock;
    layers.clear();
    images.reset();
    labels.reset();
    halfMemoryType.reset();
    file.reset();
}

BlockType DumpReader::Impl::blockType(DType type) {
    switch (type) {
        case DType::Float16:
            return BlockType::Float16;
        case DType::Float32:
            return BlockType::Float32;
        case DType::Float64:
            return BlockType::Float64;
    }
    return BlockType::Float64;
}

hid_t DumpReader::Impl::memoryType(BlockType type) const {
    switch (type) {
        case BlockType::Float16:
            return halfMemoryType.get();
        case BlockType::Float32:
            return H5T_NATIVE_FLOAT;
        case BlockType::Float64:
            return H5T_NATIVE_DOUBLE;
        case BlockType::UInt8:
            return H5T_NATIVE_UINT8;
        case BlockType::Int64:
            return H5T_NATIVE_INT64;
        case BlockType::UInt64:
            return H5T_NATIVE_UINT64;
    }
    return H5T_NATIVE_DOUBLE;
}

hid_t DumpReader::Impl::datasetNamed(const std::string& name) const {
    if (name == "/images") return images.get();
    if (name == "/labels") return labels.get();
    for (const LayerHandles& l : layers)
        for (const FloatDataset* d : {&l.q, &l.k, &l.v, &l.qNormaliser, &l.kNormaliser, &l.outputGate, &l.positionBias,
                                      &l.branchWeight, &l.branchBias})
            if (d->dataset.valid() && d->path == name) return d->dataset.get();
    return H5I_INVALID_HID;
}

void DumpReader::Impl::readBlock(hid_t dataset, const std::string& name, BlockType type, std::span<const hsize_t> start,
                                 std::span<const hsize_t> extent, std::span<unsigned char> buffer,
                                 const std::string& what) const {
    if (server) {
        server->read({name, type, start, extent, what}, buffer);
        return;
    }
    readBlockHere(dataset, name, type, start, extent, buffer, what);
}

void DumpReader::Impl::readBlockHere(hid_t dataset, const std::string& name, BlockType type,
                                     std::span<const hsize_t> start, std::span<const hsize_t> extent,
                                     std::span<unsigned char> buffer, const std::string& what) const {
    if (dataset < 0) throwInput(path + ": reading " + name + " (" + what + ") failed: the dump has no such dataset");
    h5::Lock lock;
    h5::readHyperslab(dataset, memoryType(type), start, extent, buffer, {path, name, what});
}

const unsigned char* DumpReader::Impl::readStored(const FloatDataset& tensor, std::span<const hsize_t> start,
                                                  std::span<const hsize_t> extent, const std::string& what) const {
    requireReadable(tensor.path);
    std::vector<unsigned char>& buffer = scratchBuffer();
    buffer.resize(elementCount(extent) * bytesOf(tensor.type));
    readBlock(tensor.dataset.get(), tensor.path, blockType(tensor.type), start, extent, buffer, what);
    return buffer.data();
}

std::vector<double> DumpReader::Impl::readDoubles(const FloatDataset& tensor, std::span<const hsize_t> start,
                                                  std::span<const hsize_t> extent, const std::string& what) const {
    std::vector<double> out(elementCount(extent));
    toDouble(readStored(tensor, start, extent, what), tensor.type, 0, out.size(), out.data());
    releaseLargeScratch();
    return out;
}

void DumpReader::Impl::readBranchParts(const LayerHandles& handles, const LocalBranchInfo& branch, int image,
                                       LocalBranchWeights& out) const {
    const bool shared = image < 0;
    const std::string what = shared ? "all channels" : "image " + std::to_string(image);
    // The whole dataset when shared; [image, ...] of a per-image dataset's leading B dimension.
    const auto read = [&](const FloatDataset& tensor, std::vector<hsize_t> extent) {
        std::vector<hsize_t> start(extent.size(), 0);
        if (!shared) {
            start.insert(start.begin(), hsize_t(image));
            extent.insert(extent.begin(), 1);
        }
        return readDoubles(tensor, start, extent, what);
    };
    const hsize_t c = hsize_t(branch.channels), kh = hsize_t(branch.kernelH), kw = hsize_t(branch.kernelW);
    if (branch.perImage != shared) {
        if (branch.perWindow) {
            // Stored [windows, C, kh, kw]; held channel-major so that kernel(c) is one span.
            const hsize_t windows = hsize_t(branch.windows), taps = kh * kw;
            const std::vector<double> stored = read(handles.branchWeight, {windows, c, kh, kw});
            out.weights.resize(stored.size());
            for (hsize_t w = 0; w < windows; ++w)
                for (hsize_t ch = 0; ch < c; ++ch)
                    std::copy_n(stored.begin() + std::ptrdiff_t((w * c + ch) * taps), taps,
                                out.weights.begin() + std::ptrdiff_t((ch * windows + w) * taps));
        } else {
            out.weights = read(handles.branchWeight, {c, kh, kw});
        }
        requireFiniteBranchValues(path, handles.branchWeight, out.weights,
                                  std::size_t(kh * kw) * std::size_t(branch.windows), image);
    }
    if (branch.hasBias && branch.biasPerImage != shared) {
        out.bias = read(handles.branchBias, {c});
        requireFiniteBranchValues(path, handles.branchBias, out.bias, 1, image);
    }
}

DumpReader::~DumpReader() = default;

std::unique_ptr<DumpReader> DumpReader::open(const std::string& path) {
    std::unique_ptr<DumpReader> reader(new DumpReader());
    reader->impl_ = std::make_unique<Impl>();
    reader->impl_->open(path, reader->info_);
    return reader;
}

HeadActivations DumpReader::readHead(int image, int layer, int head, bool withValues) const {
    checkImage(info_, image);
    checkLayer(info_, layer);
    const LayerInfo& l = info_.layers[std::size_t(layer)];
    checkRange(info_.path, "head", head, l.heads, "layer " + l.name);
    const LayerHandles& handles = impl_->layers[std::size_t(layer)];
    const std::string what = "image " + std::to_string(image) + ", head " + std::to_string(head);

    HeadActivations result;
    auto load = [&](const FloatDataset& tensor, Index dim, Matrix& out, char name) {
        const int tokens = name == 'q' || name == 'Q' ? l.tokens : l.keyTokens();
        const hsize_t start[4] = {hsize_t(image), hsize_t(head), 0, 0};
        const hsize_t extent[4] = {1, 1, hsize_t(tokens), hsize_t(dim)};
        const unsigned char* raw = impl_->readStored(tensor, start, extent, what);
        out.resize(tokens, dim);
        toDouble(raw, tensor.type, 0, std::size_t(out.size()), out.data());
        collectNonFinite(out, name, image, layer, head, result.nonFinite);
    };
    load(handles.q, l.dim, result.q, 'q');
    load(handles.k, l.dim, result.k, 'k');
    if (l.hasNormaliserFeatures()) {
        load(handles.qNormaliser, l.normaliserDim, result.qNormaliser, 'Q');
        load(handles.kNormaliser, l.normaliserDim, result.kNormaliser, 'K');
    }
    if (withValues && l.hasValues()) load(handles.v, l.valueDim, result.v, 'v');
    releaseLargeScratch();
    return result;
}

std::vector<HeadActivations> DumpReader::readLayer(int image, int layer, bool withValues) const {
    checkImage(info_, image);
    checkLayer(info_, layer);
    const LayerInfo& l = info_.layers[std::size_t(layer)];
    const LayerHandles& handles = impl_->layers[std::size_t(layer)];
    const std::string what = "image " + std::to_string(image) + ", all heads";

    std::vector<HeadActivations> heads(std::size_t(l.heads));
    auto load = [&](const FloatDataset& tensor, Index dim, Matrix HeadActivations::*member, char name) {
        const int tokens = name == 'q' || name == 'Q' ? l.tokens : l.keyTokens();
        const hsize_t start[4] = {hsize_t(image), 0, 0, 0};
        const hsize_t extent[4] = {1, hsize_t(l.heads), hsize_t(tokens), hsize_t(dim)};
        const unsigned char* raw = impl_->readStored(tensor, start, extent, what);
        const std::size_t perHead = std::size_t(tokens) * std::size_t(dim);
        for (int h = 0; h < l.heads; ++h) {
            Matrix& out = heads[std::size_t(h)].*member;
            out.resize(tokens, dim);
            toDouble(raw, tensor.type, std::size_t(h) * perHead, perHead, out.data());
            collectNonFinite(out, name, image, layer, h, heads[std::size_t(h)].nonFinite);
        }
    };
    load(handles.q, l.dim, &HeadActivations::q, 'q');
    load(handles.k, l.dim, &HeadActivations::k, 'k');
    if (l.hasNormaliserFeatures()) {
        load(handles.qNormaliser, l.normaliserDim, &HeadActivations::qNormaliser, 'Q');
        load(handles.kNormaliser, l.normaliserDim, &HeadActivations::kNormaliser, 'K');
    }
    if (withValues && l.hasValues()) load(handles.v, l.valueDim, &HeadActivations::v, 'v');
    releaseLargeScratch();
    return heads;
}

LocalBranchWeights DumpReader::readLocalBranch(int image, int layer) const {
    checkImage(info_, image);
    checkLayer(info_, layer);
    const LayerInfo& l = info_.layers[std::size_t(layer)];
    if (!l.localBranch) throwUsage(info_.path + ": layer " + l.name + " has no local branch");
    const LayerHandles& handles = impl_->layers[std::size_t(layer)];
    LocalBranchWeights out = handles.sharedBranch;
    impl_->readBranchParts(handles, *l.localBranch, image, out);
    return out;
}

ImageData DumpReader::readImage(int image, int maxSide) const {
    if (!info_.imageInfo.present) throwInput(info_.path + ": the dump has no /images");
    checkImage(info_, image);
    impl_->requireReadable("/images");
    const int height = info_.imageInfo.height, width = info_.imageInfo.width, channels = info_.imageInfo.channels;
    const std::size_t rank = channels == 3 ? 4 : 3;
    const int factor = maxSide > 0 ? std::max(1, (std::max(height, width) + maxSide - 1) / maxSide) : 1;
    ImageData result;
    result.height = (height + factor - 1) / factor;
    result.width = (width + factor - 1) / factor;
    result.channels = channels;
    const std::size_t rowBytes = std::size_t(width) * std::size_t(channels);
    h5::Lock lock;
    const auto readRows = [&](int first, int rows, std::vector<std::uint8_t>& into) {
        const hsize_t start[4] = {hsize_t(image), hsize_t(first), 0, 0};
        const hsize_t extent[4] = {1, hsize_t(rows), hsize_t(width), 3};
        into.resize(std::size_t(rows) * rowBytes);
        impl_->readBlock(impl_->images.get(), "/images", BlockType::UInt8, std::span<const hsize_t>(start, rank),
                         std::span<const hsize_t>(extent, rank), into, "image " + std::to_string(image));
    };
    if (factor == 1) {
        readRows(0, height, result.pixels);
        return result;
    }
    // Bands of whole output rows that also cover whole chunks of rows: each chunk is inflated once.
    int chunkRows = 1;
    {
        h5::Handle properties(H5Dget_create_plist(impl_->images.get()));
        hsize_t chunk[4] = {0, 0, 0, 0};
        if (properties.valid() && H5Pget_layout(properties.get()) == H5D_CHUNKED &&
            H5Pget_chunk(properties.get(), int(rank), chunk) == int(rank))
            chunkRows = int(std::min<hsize_t>(chunk[1], hsize_t(height)));
    }
    const int band = (std::max(chunkRows, factor) + factor - 1) / factor * factor;
    std::vector<std::uint32_t> sums(std::size_t(result.width) * std::size_t(channels));
    std::vector<std::uint8_t> rows;
    result.pixels.resize(std::size_t(result.height) * std::size_t(result.width) * std::size_t(channels));
    for (int first = 0; first < height; first += band) {
        const int count = std::min(band, height - first);
        readRows(first, count, rows);
        for (int y0 = 0; y0 < count; y0 += factor) {
            const int ys = std::min(factor, count - y0);
            std::fill(sums.begin(), sums.end(), 0u);
            for (int y = y0; y < y0 + ys; ++y) {
                const std::uint8_t* row = rows.data() + std::size_t(y) * rowBytes;
                for (int x = 0; x < width; ++x)
                    for (int c = 0; c < channels; ++c)
                        sums[std::size_t(x / factor) * std::size_t(channels) + std::size_t(c)] +=
                            row[std::size_t(x) * std::size_t(channels) + std::size_t(c)];
            }
            std::uint8_t* out = result.pixels.data() +
                                std::size_t((first + y0) / factor) * std::size_t(result.width) * std::size_t(channels);
            for (int ox = 0; ox < result.width; ++ox) {
                const std::uint32_t n = std::uint32_t(ys) * std::uint32_t(std::min(factor, width - ox * factor));
                for (int c = 0; c < channels; ++c) {
                    const std::size_t i = std::size_t(ox) * std::size_t(channels) + std::size_t(c);
                    out[i] = std::uint8_t((sums[i] + n / 2) / n);
                }
            }
        }
    }
    return result;
}

std::optional<std::int64_t> DumpReader::label(int image) const {
    if (!info_.hasLabels) return std::nullopt;
    checkImage(info_, image);
    impl_->requireReadable("/labels");
    std::int64_t value = 0;
    h5::Lock lock;
    readLabelBlock(impl_->labels.get(), std::size_t(image), std::span(&value, 1), info_.path, impl_->labelReader());
    if (std::size_t(image) >= kLabelsCheckedOnOpen)
        if (const std::string problem = labelProblem(value, info_.classNames.size(), image); !problem.empty())
            throwInput(info_.path + ": " + problem);
    return value;
}

void DumpReader::readLabels(int first, std::span<std::int64_t> out) const {
    if (!info_.hasLabels) throwUsage(info_.path + ": the dump has no /labels");
    if (out.empty()) return;
    if (first < 0 || std::int64_t(first) + std::int64_t(out.size()) > std::int64_t(info_.images))
        throwUsage(info_.path + ": labels " + std::to_string(first) + " to " +
                   std::to_string(std::int64_t(first) + std::int64_t(out.size()) - 1) + " are not in the dump (" +
                   std::to_string(info_.images) + " images)");
    impl_->requireReadable("/labels");
    {
        h5::Lock lock;
        readLabelBlock(impl_->labels.get(), std::size_t(first), out, info_.path, impl_->labelReader());
    }
    for (std::size_t b = 0; b < out.size(); ++b)
        if (std::size_t(first) + b >= kLabelsCheckedOnOpen)
            if (const std::string problem = labelProblem(out[b], info_.classNames.size(), int(first + int(b)));
                !problem.empty())
                throwInput(info_.path + ": " + problem);
}

std::vector<std::string> DumpReader::datasetsReadLater() const {
    std::vector<std::string> out;
    for (const LayerHandles& l : impl_->layers) {
        for (const FloatDataset* d : {&l.q, &l.k, &l.v, &l.qNormaliser, &l.kNormaliser, &l.outputGate, &l.positionBias,
                                      &l.branchWeight, &l.branchBias})
            if (d->dataset.valid()) out.push_back(d->path);
    }
    if (impl_->images.valid()) out.emplace_back("/images");
    if (impl_->labels.valid()) out.emplace_back("/labels");
    return out;
}

void DumpReader::walkChunkIndex(std::size_t which) const {
    const std::vector<std::string> names = datasetsReadLater();
    if (which >= names.size()) throwUsage(info_.path + ": no dataset " + std::to_string(which) + " to walk");
    const std::string& name = names[which];
    const hid_t dataset = impl_->datasetNamed(name);
    h5::Lock lock;
    h5::Handle plist(H5Dget_create_plist(dataset));
    const auto failed = [&] {
        throwInput(info_.path + ": reading the chunk index of " + name + " failed: its HDF5 metadata is damaged" +
                   h5::errorSuffix());
    };
    if (!plist.valid()) failed();
    if (H5Pget_layout(plist.get()) != H5D_CHUNKED) return;
    // H5Dget_num_chunks iterates over the whole index (every node of a B-tree).
    h5::Handle space(H5Dget_space(dataset));
    hsize_t chunks = 0;
    if (!space.valid() || H5Dget_num_chunks(dataset, space.get(), &chunks) < 0) failed();
}

void DumpReader::markUnreadable(const std::string& dataset, const std::string& message) {
    impl_->unreadable[dataset] = message;
}

const std::map<std::string, std::string>& DumpReader::unreadableDatasets() const { return impl_->unreadable; }

void DumpReader::isolateReads(const std::string& executable, double stallSeconds) {
    impl_->server = std::make_unique<ReadServer>(executable, info_.path, stallSeconds);
}

bool DumpReader::readsIsolated() const { return impl_->server != nullptr; }

}  // namespace attnlens
