#pragma once
#include <cstring>
#include <limits>
// Private to DumpReader: the HDF5 objects an open dump keeps, shared by the validation on open
// (dump_validation.cpp), the reads (dump_reader.cpp) and the description (dump_describe.cpp).
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "attnlens/dump/dump.h"
#include "attnlens/io/error.h"
#include "hdf5_util.h"
#include "read_server.h"

namespace attnlens {

// The root attribute 'format' and the newest 'format_version' this reader understands.
inline constexpr const char* kDumpFormatName = "attnlens.dump";
inline constexpr std::int64_t kSupportedFormatVersion = 1;

// "/layers/blocks.0": where a layer's group lives in the file.
inline std::string layerGroupPath(const std::string& layerName) { return "/layers/" + layerName; }

// One float dataset of a layer: q, k, v, or the local branch's weight or bias.
struct FloatDataset {
    h5::Handle dataset;
    DType type = DType::Float32;
    std::string path;  // "/layers/blocks.0/q"
};

struct LayerHandles {
    FloatDataset q, k, v;
    FloatDataset qNormaliser, kNormaliser, outputGate;  // format.md 1d (invalid when absent)
    FloatDataset branchWeight, branchBias;              // local_branch/weight and bias (invalid when absent)
    FloatDataset positionBias;                          // window attention's position_bias (invalid when absent)
    // Weights and bias shared by all images, read and checked on open; per-image parts are empty.
    LocalBranchWeights sharedBranch;
};

struct DumpReader::Impl {
    std::string path;
    h5::Handle file;
    h5::Handle halfMemoryType;
    std::vector<LayerHandles> layers;  // in DumpInfo::layers order
    h5::Handle images;
    h5::Handle labels;
    // Datasets the open check found unreadable, with the message their reads throw.
    std::map<std::string, std::string> unreadable;
    // Set by DumpReader::isolateReads: reads of data go to the reading process (read_server.h).
    std::unique_ptr<ReadServer> server;

    ~Impl();

    // Error(Input) with the open check's message when `dataset` is marked unreadable.
    void requireReadable(const std::string& dataset) const {
        if (unreadable.empty()) return;
        if (const auto it = unreadable.find(dataset); it != unreadable.end()) throwInput(it->second);
    }

    // Opens the file at `dumpPath`, validates its whole structure and reads the shared branch
    // weights, filling `info` (dump_validation.cpp). Error(Input) on anything invalid.
    void open(const std::string& dumpPath, DumpInfo& info);

    // The in-memory type a dataset stored as `type` is read as (its stored size and byte layout).
    static BlockType blockType(DType type);
    hid_t memoryType(BlockType type) const;
    // The open dataset at `name` ("/layers/blocks.0/q", "/images"), or H5I_INVALID_HID.
    hid_t datasetNamed(const std::string& name) const;
    // Reads the block [start, start + extent) of `dataset` (named `name`) as `type` into `buffer`
    // (exactly its bytes): in the reading process when reads are isolated, else here.
    void readBlock(hid_t dataset, const std::string& name, BlockType type, std::span<const hsize_t> start,
                   std::span<const hsize_t> extent, std::span<unsigned char> buffer, const std::string& what) const;
    // readBlock for readLabelBlock.
    auto labelReader() const {
        return [this](BlockType type, std::span<const hsize_t> start, std::span<const hsize_t> extent,
                      std::span<unsigned char> bytes, const std::string& what) {
            readBlock(labels.get(), "/labels", type, start, extent, bytes, what);
        };
    }
    // The same, always in this process (the reading process's own reads).
    void readBlockHere(hid_t dataset, const std::string& name, BlockType type, std::span<const hsize_t> start,
                       std::span<const hsize_t> extent, std::span<unsigned char> buffer, const std::string& what) const;
    // Reads the block [start, start + extent) of `tensor` in its stored type into the calling
    // thread's scratch buffer and returns it; valid until the thread's next read.
    const unsigned char* readStored(const FloatDataset& tensor, std::span<const hsize_t> start,
                                    std::span<const hsize_t> extent, const std::string& what) const;
    // The same block converted to double.
    std::vector<double> readDoubles(const FloatDataset& tensor, std::span<const hsize_t> start,
                                    std::span<const hsize_t> extent, const std::string& what) const;
    // Reads and checks the parts of a layer's branch weights that are stored per image (image >= 0:
    // that image's) or shared by all images (image < 0) into `out`.
    void readBranchParts(const LayerHandles& handles, const LocalBranchInfo& branch, int image,
                         LocalBranchWeights& out) const;
};

// Labels checked against /class_names when the dump is opened (8 MiB of int64); the labels of later
// images are checked when they are read (DumpReader::label).
inline constexpr std::size_t kLabelsCheckedOnOpen = std::size_t(1) << 20;

// "/labels: image B has label X, not one of the N classes of /class_names (0 to N-1)", or empty
// when `label` names one of `classes` classes (or the dump has no class names: classes == 0).
inline std::string labelProblem(std::int64_t label, std::size_t classes, int image) {
    if (classes == 0 || (label >= 0 && label < std::int64_t(classes))) return {};
    return "/labels: image " + std::to_string(image) + " has label " + std::to_string(label) + ", not one of the " +
           std::to_string(classes) + " classes of /class_names (0 to " + std::to_string(classes - 1) + ")";
}

// The reading process's access to an open reader's HDF5 objects (read_server.cpp).
struct DumpReaderAccess {
    static const DumpReader::Impl& impl(const DumpReader& reader) { return *reader.impl_; }
};

// Labels [first, first + values.size()) of /labels as int64, each block read by
// `read(type, start, extent, bytes, what)`. An unsigned 64-bit /labels is read as such and each
// value checked against int64's range: HDF5's conversion would saturate a value above 2^63 - 1 to
// that bound without a word. Error(Input) naming the image. Call with an h5::Lock held.
template <class ReadBlock>
void readLabelBlock(hid_t labels, std::size_t first, std::span<std::int64_t> values, const std::string& file,
                    ReadBlock&& read) {
    h5::Handle type(H5Dget_type(labels));
    const bool unsigned64 =
        type.valid() && H5Tget_sign(type.get()) == H5T_SGN_NONE && H5Tget_size(type.get()) >= sizeof(std::int64_t);
    const hsize_t start[1] = {hsize_t(first)}, extent[1] = {hsize_t(values.size())};
    const std::string what =
        values.size() == 1 ? "image " + std::to_string(first)
                           : "images " + std::to_string(first) + " to " + std::to_string(first + values.size() - 1);
    read(unsigned64 ? BlockType::UInt64 : BlockType::Int64, std::span<const hsize_t>(start),
         std::span<const hsize_t>(extent),
         std::span(reinterpret_cast<unsigned char*>(values.data()), values.size() * sizeof(std::int64_t)), what);
    if (!unsigned64) return;
    for (std::size_t b = 0; b < values.size(); ++b) {
        std::uint64_t value = 0;
        std::memcpy(&value, &values[b], sizeof value);
        if (value > std::uint64_t(std::numeric_limits<std::int64_t>::max()))
            throwInput(file + ": /labels: image " + std::to_string(first + b) + " has label " + std::to_string(value) +
                       ", more than a label can be (at most 2^63 - 1; /labels is unsigned 64-bit)");
    }
}

// Error(Input) naming the channel and the value when `values` (channels of `perChannel` values
// each) hold a non-finite value: a branch's weights must be finite (dump_validation.cpp).
void requireFiniteBranchValues(const std::string& file, const FloatDataset& tensor, const std::vector<double>& values,
                               std::size_t perChannel, int image);

}  // namespace attnlens
