// Validation of a dump on open: the file, the root attributes, every layer's datasets and
// attributes, the local branches (shapes, and the values of weights shared by all images), /images
// and /labels. Every message is documented in resources/format.md. Apart from the shared branch
// weights (model parameters of a few kilobytes) only metadata is read, so opening a 100 GB dump
// costs a few metadata reads.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "attnlens/dump/dump.h"
#include "attnlens/io/error.h"
#include "attnlens/io/text.h"
#include "dump_reader_impl.h"
#include "hdf5_util.h"

namespace attnlens {

namespace {

// One (image, layer) read in double (q, k and v, all heads) must stay below this: larger declared
// sizes are rejected on open, before anything is allocated.
constexpr double kMaxLayerReadBytes = 8.0 * double(1ull << 30);
// The same bound for one image of /images.
constexpr double kMaxImageBytes = 1.0 * double(1ull << 30);
// A compressed chunk is decompressed whole by every read that touches it, so chunks larger than
// this (uncompressed) are refused on open: a dataset chunked over many images would otherwise cost
// a gigabyte of memory and seconds per (image, head) read.
constexpr double kMaxFilteredChunkBytes = 256.0 * double(1u << 20);
// HDF5 stores a chunk's size in 32 bits: no valid file has a larger chunk.
constexpr double kMaxStoredChunkBytes = 4.0 * double(1ull << 30);

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

// One channel of a branch's weights or bias with a non-finite value, or -1.
int firstNonFiniteChannel(const std::vector<double>& values, std::size_t perChannel) {
    for (std::size_t i = 0; i < values.size(); ++i)
        if (!std::isfinite(values[i])) return int(i / perChannel);
    return -1;
}

struct LayerCandidate {
    LayerInfo info;
    std::optional<std::int64_t> index;
    LayerHandles handles;
};

class Validator {
public:
    explicit Validator(std::string path) : path_(std::move(path)), rootWhere_(path_ + ": root") {}

    // The file exists and can be read; returns its size in bytes (0 when the file system cannot tell).
    std::uint64_t readableFileSize() const {
        namespace fs = std::filesystem;
        std::error_code ec;
        const fs::file_status status = fs::status(path_, ec);
        if (!fs::exists(status)) fail("no such file");
        if (fs::is_directory(status)) fail("is a directory, not a dump file");
        {
            std::ifstream probe(path_, std::ios::binary);
            if (!probe) fail(std::string("cannot be read (") + std::strerror(errno) + ")");
        }
        const std::uintmax_t size = fs::file_size(path_, ec);
        return ec ? 0 : std::uint64_t(size);
    }

    h5::Handle openFile() const {
        const htri_t isHdf5 = H5Fis_hdf5(path_.c_str());
        if (isHdf5 == 0) fail("not an HDF5 file");
        if (isHdf5 < 0) fail("cannot be read as HDF5" + h5::errorSuffix());

        h5::Handle access(H5Pcreate(H5P_FILE_ACCESS));
#if H5_VERSION_GE(1, 10, 7)
        // Read-only use: go on where the file system does not support locks (some cluster mounts).
        H5Pset_file_locking(access.get(), true, true);
#endif
        h5::Handle file(H5Fopen(path_.c_str(), H5F_ACC_RDONLY, access.get()));
        if (!file.valid()) {
            const std::string suffix = h5::errorSuffix();
            std::string lower = suffix;
            std::transform(lower.begin(), lower.end(), lower.begin(),
                           [](unsigned char c) { return char(std::tolower(c)); });
            if (lower.find("unable to lock") != std::string::npos && lower.find("file") != std::string::npos) {
                fail("cannot open: the file is locked by another program" + suffix);
            }
            fail("HDF5 cannot open the file: it is truncated or corrupt" + suffix);
        }
        return file;
    }

    // The root attributes: format, format_version, model and the token layout.
    void root(hid_t file, DumpInfo& info) const {
        h5::Handle root(H5Gopen2(file, "/", H5P_DEFAULT));
        if (!root.valid()) fail("the root group cannot be read: the file is truncated or corrupt" + h5::errorSuffix());
        if (!h5::hasAttribute(root.get(), "format", rootWhere_)) {
            fail("not an AttnLens dump: the root attribute 'format' is missing");
        }
        const std::string format = h5::readStringAttribute(root.get(), "format", rootWhere_);
        if (format != kDumpFormatName) {
            fail("not an AttnLens dump: the root attribute 'format' is \"" + format + "\", expected \"" +
                 kDumpFormatName + "\"");
        }
        if (!h5::hasAttribute(root.get(), "format_version", rootWhere_)) {
            fail("the root attribute 'format_version' is missing");
        }
        const std::int64_t version = h5::readIntegerAttribute(root.get(), "format_version", rootWhere_);
        if (version > kSupportedFormatVersion) {
            fail("format_version " + std::to_string(version) + " is newer than this AttnLens supports (" +
                 std::to_string(kSupportedFormatVersion) + ")");
        }
        if (version < 1) {
            fail("format_version " + std::to_string(version) + " is not valid (expected " +
                 std::to_string(kSupportedFormatVersion) + ")");
        }
        info.formatVersion = int(version);
        if (h5::hasAttribute(root.get(), "model", rootWhere_)) {
            info.model = h5::readStringAttribute(root.get(), "model", rootWhere_);
        }
        info.layout = readLayout(root.get(), rootWhere_, TokenLayout{}, true, nullptr, nullptr);
    }

    // Every group under /layers, validated, in DumpInfo::layers order (layers with an index first,
    // by index; ties and layers without one by natural name order) with their index set.
    std::vector<LayerCandidate> layers(hid_t file, const TokenLayout& rootLayout) const {
        if (!h5::linkExists(file, "layers", rootWhere_)) {
            fail("the group /layers is missing (it holds one group per attention layer)");
        }
        h5::Handle layersGroup(H5Oopen(file, "layers", H5P_DEFAULT));
        if (!layersGroup.valid() || H5Iget_type(layersGroup.get()) != H5I_GROUP) {
            fail("/layers is not a group" + h5::errorSuffix());
        }
        H5G_info_t groupInfo;
        if (H5Gget_info(layersGroup.get(), &groupInfo) < 0) fail("/layers cannot be listed" + h5::errorSuffix());
        if (groupInfo.nlinks == 0) fail("/layers has no layer groups");

        std::vector<LayerCandidate> candidates;
        for (hsize_t i = 0; i < groupInfo.nlinks; ++i) {
            const ssize_t length =
                H5Lget_name_by_idx(layersGroup.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
            if (length < 0) fail("/layers cannot be listed" + h5::errorSuffix());
            std::string name(std::size_t(length) + 1, '\0');
            H5Lget_name_by_idx(layersGroup.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size(),
                               H5P_DEFAULT);
            name.resize(std::size_t(length));
            if (const auto problem = textProblem(name)) {
                fail("the layer name \"" + printableText(name, 80) + "\" under /layers is not usable: " + *problem);
            }
            candidates.push_back(layer(layersGroup.get(), name, rootLayout));
        }

        std::sort(candidates.begin(), candidates.end(), [](const LayerCandidate& a, const LayerCandidate& b) {
            if (a.index.has_value() != b.index.has_value()) return a.index.has_value();
            if (a.index && *a.index != *b.index) return *a.index < *b.index;
            const int c = naturalCompare(a.info.name, b.info.name);
            return c != 0 ? c < 0 : a.info.name < b.info.name;
        });
        const LayerInfo& first = candidates.front().info;
        for (std::size_t position = 0; position < candidates.size(); ++position) {
            LayerCandidate& c = candidates[position];
            c.info.index = c.index ? int(*c.index) : int(position);
            if (c.info.batch != first.batch) {
                fail(layerGroupPath(c.info.name) + " has B = " + std::to_string(c.info.batch) + " images but " +
                     layerGroupPath(first.name) + " has B = " + std::to_string(first.batch) +
                     "; every layer must hold the same images");
            }
        }
        return candidates;
    }

    // /images when the dump has it (invalid otherwise), checked against the layers' B = `images`;
    // fills `imageInfo`.
    h5::Handle images(hid_t file, int images, ImageInfo& imageInfo) const {
        if (!h5::linkExists(file, "images", rootWhere_)) return {};
        h5::Handle dataset(H5Dopen2(file, "images", H5P_DEFAULT));
        if (!dataset.valid()) fail("/images cannot be opened as a dataset" + h5::errorSuffix());
        h5::Handle type(H5Dget_type(dataset.get()));
        if (H5Tget_class(type.get()) != H5T_INTEGER || H5Tget_size(type.get()) != 1 ||
            H5Tget_sign(type.get()) != H5T_SGN_NONE) {
            fail("/images has dtype " + h5::describeType(type.get()) + "; expected uint8");
        }
        const std::vector<hsize_t> dims = h5::datasetDims(dataset.get());
        const bool shapeOk = (dims.size() == 3 || (dims.size() == 4 && dims[3] == 3)) && dims[1] > 0 && dims[2] > 0 &&
                             dims[1] <= hsize_t(INT_MAX) && dims[2] <= hsize_t(INT_MAX);
        if (!shapeOk) {
            fail("/images has shape " + h5::describeDims(dims) + "; expected [B, h, w] or [B, h, w, 3] with h, w >= 1");
        }
        if (dims[0] != hsize_t(images)) {
            fail("/images holds " + std::to_string(dims[0]) +
                 " images but the layers have B = " + std::to_string(images));
        }
        checkStorage(dataset.get(), "/images");
        imageInfo.present = true;
        imageInfo.height = int(dims[1]);
        imageInfo.width = int(dims[2]);
        imageInfo.channels = dims.size() == 4 ? 3 : 1;
        const double imageBytes = double(dims[1]) * double(dims[2]) * double(imageInfo.channels);
        if (imageBytes > kMaxImageBytes) {
            fail("/images has shape " + h5::describeDims(dims) + ": one image is " + formatGiB(imageBytes) +
                 ", more than the limit of " + formatGiB(kMaxImageBytes));
        }
        return dataset;
    }

    // /labels when the dump has it (invalid otherwise), checked against the layers' B = `images`.
    h5::Handle labels(hid_t file, int images) const {
        if (!h5::linkExists(file, "labels", rootWhere_)) return {};
        h5::Handle dataset(H5Dopen2(file, "labels", H5P_DEFAULT));
        if (!dataset.valid()) fail("/labels cannot be opened as a dataset" + h5::errorSuffix());
        h5::Handle type(H5Dget_type(dataset.get()));
        if (H5Tget_class(type.get()) != H5T_INTEGER) {
            fail("/labels has dtype " + h5::describeType(type.get()) + "; expected an integer type");
        }
        const std::vector<hsize_t> dims = h5::datasetDims(dataset.get());
        if (dims.size() != 1 || dims[0] != hsize_t(images)) {
            fail("/labels has shape " + h5::describeDims(dims) + "; expected [B] = [" + std::to_string(images) + "]");
        }
        checkStorage(dataset.get(), "/labels");
        return dataset;
    }

    // /class_names when the dump has it (invalid otherwise): one name per label value, read whole
    // (at most kMaxClassNames names of kMaxClassNameBytes); with /labels (`labels` valid) every
    // label must name one of them.
    std::vector<std::string> classNames(hid_t file, hid_t labels, int images) const {
        if (!h5::linkExists(file, "class_names", rootWhere_)) return {};
        h5::Handle dataset(H5Dopen2(file, "class_names", H5P_DEFAULT));
        if (!dataset.valid()) fail("/class_names cannot be opened as a dataset" + h5::errorSuffix());
        h5::Handle type(H5Dget_type(dataset.get()));
        if (H5Tget_class(type.get()) != H5T_STRING) {
            fail("/class_names has dtype " + h5::describeType(type.get()) +
                 "; expected strings (variable- or fixed-length, UTF-8 or ASCII)");
        }
        const std::vector<hsize_t> dims = h5::datasetDims(dataset.get());
        if (dims.size() != 1 || dims[0] < 1 || dims[0] > hsize_t(kMaxClassNames)) {
            fail("/class_names has shape " + h5::describeDims(dims) +
                 "; expected [C] with 1 <= C <= " + std::to_string(kMaxClassNames));
        }
        checkStorage(dataset.get(), "/class_names");
        const std::size_t count = std::size_t(dims[0]);
        std::vector<std::string> names(count);
        const htri_t variable = H5Tis_variable_str(type.get());
        if (variable < 0) fail("/class_names has a damaged string type" + h5::errorSuffix());
        const std::string readFailed = "reading /class_names failed: the file is truncated or corrupt";
        if (variable > 0) {
            // Like variable-length string attributes, the values live in the global heap, which
            // HDF5 1.10 trusts: the child-process open check (open_check.h) guards against crashes.
            h5::Handle memoryType(H5Tcopy(H5T_C_S1));
            H5Tset_size(memoryType.get(), H5T_VARIABLE);
            H5Tset_cset(memoryType.get(), H5Tget_cset(type.get()));
            std::vector<char*> values(count, nullptr);
            if (H5Dread(dataset.get(), memoryType.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()) < 0)
                fail(readFailed + h5::errorSuffix());
            for (std::size_t i = 0; i < count; ++i)
                if (values[i]) names[i].assign(values[i], strnlen(values[i], kMaxClassNameBytes + 1));
            h5::Handle space(H5Dget_space(dataset.get()));
            H5Dvlen_reclaim(memoryType.get(), space.get(), H5P_DEFAULT, values.data());
        } else {
            const std::size_t width = H5Tget_size(type.get());
            if (width > kMaxClassNameBytes) {
                fail("/class_names holds strings of " + std::to_string(width) + " bytes, more than the limit of " +
                     std::to_string(kMaxClassNameBytes));
            }
            // Strings have no byte order: the file type serves as the memory type.
            std::vector<char> buffer(count * width);
            if (H5Dread(dataset.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buffer.data()) < 0)
                fail(readFailed + h5::errorSuffix());
            const bool spacePadded = H5Tget_strpad(type.get()) == H5T_STR_SPACEPAD;
            for (std::size_t i = 0; i < count; ++i) {
                const char* value = buffer.data() + i * width;
                names[i].assign(value, strnlen(value, width));
                if (spacePadded) names[i].erase(names[i].find_last_not_of(' ') + 1);
            }
        }
        for (std::size_t i = 0; i < count; ++i) {
            const std::string where = "/class_names[" + std::to_string(i) + "]";
            if (names[i].empty()) fail(where + " is empty; every class needs a name");
            if (names[i].size() > kMaxClassNameBytes)
                fail(where + " is longer than " + std::to_string(kMaxClassNameBytes) + " bytes");
            if (const auto problem = textProblem(names[i]))
                fail(where + " is not usable text: " + *problem + " (\"" + printableText(names[i], 80) + "\")");
        }
        if (labels >= 0) {
            // The first kLabelsCheckedOnOpen labels, in blocks through one small buffer (memory
            // and time stay small for any declared B); the others are checked as they are read
            // (DumpReader::label).
            const std::size_t checked = std::min<std::size_t>(std::size_t(images), kLabelsCheckedOnOpen);
            std::vector<std::int64_t> values(std::min<std::size_t>(checked, kLabelBlock), 0);
            for (std::size_t first = 0; first < checked; first += values.size()) {
                const std::size_t n = std::min(values.size(), checked - first);
                readLabelBlock(labels, first, std::span(values.data(), n), path_,
                               [&](BlockType type, std::span<const hsize_t> start, std::span<const hsize_t> extent,
                                   std::span<unsigned char> bytes, const std::string& what) {
                                   h5::readHyperslab(labels,
                                                     type == BlockType::UInt64 ? H5T_NATIVE_UINT64 : H5T_NATIVE_INT64,
                                                     start, extent, bytes, {path_, "/labels", what});
                               });
                for (std::size_t b = 0; b < n; ++b)
                    if (const std::string problem = labelProblem(values[b], count, int(first + b)); !problem.empty())
                        fail(problem);
            }
        }
        return names;
    }

private:
    [[noreturn]] void fail(const std::string& message) const { throwInput(path_ + ": " + message); }

    static constexpr std::size_t kLabelBlock = 65536;

    static constexpr const char* kQkvRule = "q, k and v";
    static constexpr const char* kBranchRule = "the local branch's weight and bias";

    TokenLayout readLayout(hid_t object, const std::string& where, const TokenLayout& fallback, bool gridRequired,
                           std::string* gridSource, std::string* prefixSource) const {
        TokenLayout layout = fallback;
        if (h5::hasAttribute(object, "grid", where)) {
            const std::vector<std::int64_t> grid = h5::readIntegerArrayAttribute(object, "grid", where);
            if (grid.size() != 2 || grid[0] <= 0 || grid[1] <= 0 || grid[0] > INT_MAX || grid[1] > INT_MAX) {
                throwInput(where + " attribute 'grid' must be two positive integers [H, W], got " +
                           h5::describeDims(grid));
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

    // A float dataset `name` of the group at `groupPath`; `rule` names the datasets whose dtype is
    // checked in the message ("q, k and v").
    FloatDataset openFloatDataset(hid_t group, const std::string& groupPath, const char* name, const char* rule) const {
        FloatDataset tensor;
        tensor.path = groupPath + "/" + name;
        tensor.dataset = h5::Handle(H5Dopen2(group, name, H5P_DEFAULT));
        if (!tensor.dataset.valid()) fail(tensor.path + " cannot be opened as a dataset" + h5::errorSuffix());
        h5::Handle type(H5Dget_type(tensor.dataset.get()));
        const std::optional<DType> dtype = floatDType(type.get());
        if (!dtype) {
            fail(tensor.path + " has dtype " + h5::describeType(type.get()) + "; " + rule +
                 " must be float16, float32 or float64");
        }
        tensor.type = *dtype;
        checkStorage(tensor.dataset.get(), tensor.path);
        return tensor;
    }

    // A dataset compressed with a filter this HDF5 library lacks (e.g. h5py's built-in lzf) would
    // only fail on the first read; say so on open instead.
    void checkStorage(hid_t dataset, const std::string& datasetPath) const {
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
        const int filters = checkFilters(properties.get(), datasetPath);
        h5::Handle type(H5Dget_type(dataset));
        h5::Handle space(H5Dget_space(dataset));
        const int datasetRank = space.valid() ? H5Sget_simple_extent_ndims(space.get()) : -1;
        if (!type.valid() || datasetRank < 0)
            fail(datasetPath + " has a damaged type or shape: the file's HDF5 metadata is damaged" + h5::errorSuffix());
        StoredShape shape{
            std::vector<hsize_t>(static_cast<std::size_t>(datasetRank)), {}, double(H5Tget_size(type.get()))};
        shape.maxDims.resize(shape.dims.size());
        H5Sget_simple_extent_dims(space.get(), shape.dims.data(), shape.maxDims.data());
        if (layout == H5D_CONTIGUOUS) checkContiguousExtent(dataset, datasetPath, shape);
        if (layout == H5D_CHUNKED) checkChunks(dataset, properties.get(), datasetPath, shape, filters > 0);
    }

    // Every filter of the dataset is one this HDF5 library has; returns how many there are.
    int checkFilters(hid_t properties, const std::string& datasetPath) const {
        const int filters = H5Pget_nfilters(properties);
        for (int i = 0; i < filters; ++i) {
            unsigned flags = 0, config = 0;
            size_t values = 0;
            char name[128] = {};
            const H5Z_filter_t filter =
                H5Pget_filter2(properties, unsigned(i), &flags, &values, nullptr, sizeof name, name, &config);
            // Optional filters too (h5py adds lzf as optional): chunks it did compress are
            // unreadable without it.
            if (filter < 0 || H5Zfilter_avail(filter) > 0) continue;
            fail(datasetPath + " is compressed with HDF5 filter " + std::to_string(filter) +
                 (name[0] ? " (" + std::string(name) + ")" : std::string()) +
                 ", which this HDF5 library does not provide; store it uncompressed or with gzip");
        }
        return filters;
    }

    struct StoredShape {
        std::vector<hsize_t> dims, maxDims;
        double elementBytes;  // the file type's size (a variable-length string's is less)
    };

    [[noreturn]] void failDamaged(const std::string& datasetPath, const std::string& what) const {
        fail(datasetPath + " " + what + ": the file's HDF5 metadata is damaged (HDF5 would read memory the " +
             "file never defined)");
    }

    // Unallocated storage (HADDR_UNDEF) reads as the fill value; allocated storage must lie inside
    // the file.
    void checkContiguousExtent(hid_t dataset, const std::string& datasetPath, const StoredShape& shape) const {
        const haddr_t offset = H5Dget_offset(dataset);
        double bytes = shape.elementBytes;
        for (hsize_t d : shape.dims) bytes *= double(d);
        bytes = std::max(bytes, double(H5Dget_storage_size(dataset)));
        h5::Handle file(H5Iget_file_id(dataset));
        hsize_t fileBytes = 0;
        if (offset != HADDR_UNDEF && file.valid() && H5Fget_filesize(file.get(), &fileBytes) >= 0 &&
            double(offset) + bytes > double(fileBytes))
            failDamaged(datasetPath, "declares " + std::to_string(std::uint64_t(bytes)) + " bytes of data at byte " +
                                         std::to_string(offset) + " of a file of " + std::to_string(fileBytes) +
                                         " bytes");
    }

    // Chunks of the dataset's rank, none empty or beyond a fixed size, within HDF5's 4 GiB; a
    // filtered chunk small enough to decompress per read.
    void checkChunks(hid_t dataset, hid_t properties, const std::string& datasetPath, const StoredShape& shape,
                     bool filtered) const {
        const int datasetRank = int(shape.dims.size());
        const int rank = H5Pget_chunk(properties, 0, nullptr);
        std::vector<hsize_t> chunk(std::size_t(std::max(rank, 0)));
        if (rank != datasetRank || (rank > 0 && H5Pget_chunk(properties, rank, chunk.data()) != rank))
            failDamaged(datasetPath, "has chunks of rank " + std::to_string(rank) + " on a dataset of rank " +
                                         std::to_string(datasetRank));
        // HDF5 refuses to create such chunks; a damaged layout message can still declare them.
        for (int i = 0; i < rank; ++i)
            if (chunk[std::size_t(i)] == 0 || (shape.maxDims[std::size_t(i)] != H5S_UNLIMITED &&
                                               chunk[std::size_t(i)] > shape.maxDims[std::size_t(i)]))
                failDamaged(datasetPath, "is stored in chunks of " + h5::describeDims(chunk) +
                                             " on a dataset of shape " + h5::describeDims(shape.dims) +
                                             " whose size is fixed: chunk dimension " + std::to_string(i) + " is " +
                                             (chunk[std::size_t(i)] == 0 ? "0" : "larger than the dataset's"));
        double bytes = shape.elementBytes;
        for (hsize_t c : chunk) bytes *= double(c);
        if (bytes > kMaxStoredChunkBytes)
            failDamaged(datasetPath, "declares chunks of " + h5::describeDims(chunk) + " (" + formatGiB(bytes) +
                                         "), more than HDF5's limit of 4 GiB per chunk");
        if (filtered && bytes > kMaxFilteredChunkBytes) {
            std::vector<hsize_t> suggested = h5::datasetDims(dataset);
            if (!suggested.empty()) suggested[0] = 1;
            std::string suggestion;
            for (std::size_t i = 0; i < suggested.size(); ++i)
                suggestion += (i ? "x" : "") + std::to_string(suggested[i]);
            fail(datasetPath + " is compressed in chunks of " + h5::describeDims(chunk) + " (" + formatGiB(bytes) +
                 " uncompressed), more than the limit of " + formatGiB(kMaxFilteredChunkBytes) +
                 ": every read would decompress a whole chunk; store one image per chunk, e.g. "
                 "h5repack -l " +
                 datasetPath + ":CHUNK=" + suggestion + " IN.h5 OUT.h5");
        }
    }

    std::vector<hsize_t> rank4Dims(const FloatDataset& tensor) const {
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

    // q, k (and v): their datasets, shapes and dtypes (q and k of rank 4 with the same B, heads, d).
    void openQkv(hid_t group, const std::string& layerPath, const std::string& where, LayerCandidate& candidate,
                 std::vector<hsize_t>& q, std::vector<hsize_t>& k) const {
        LayerInfo& info = candidate.info;
        for (const char* required : {"q", "k"}) {
            if (!h5::linkExists(group, required, where)) {
                fail(layerPath + ": dataset '" + required + "' is missing (q and k are required)");
            }
        }
        candidate.handles.q = openFloatDataset(group, layerPath, "q", kQkvRule);
        candidate.handles.k = openFloatDataset(group, layerPath, "k", kQkvRule);
        q = rank4Dims(candidate.handles.q);
        k = rank4Dims(candidate.handles.k);
        // Spatial reduction (format.md 1c) gives k and v their own token count n; B, heads and d agree.
        if (q[0] != k[0] || q[1] != k[1] || q[3] != k[3]) {
            fail(layerPath + ": q has shape " + h5::describeDims(q) + " but k has shape " + h5::describeDims(k) +
                 "; q and k must have the same B, heads and d");
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

        if (h5::linkExists(group, "v", where)) {
            candidate.handles.v = openFloatDataset(group, layerPath, "v", kQkvRule);
            const std::vector<hsize_t> v = rank4Dims(candidate.handles.v);
            if (v[0] != q[0] || v[1] != q[1] || v[2] != k[2]) {
                fail(layerPath + ": v has shape " + h5::describeDims(v) + " but k has shape " + h5::describeDims(k) +
                     "; v must have the same B, heads and tokens as k");
            }
            info.valueDim = int(v[3]);
            info.vType = candidate.handles.v.type;
        }
    }

    // One (image, layer) read as double must fit the reading limit: declared sizes beyond it are not plausible.
    void checkLayerReadSize(const std::string& layerPath, const LayerInfo& info, hsize_t keys) const {
        const double keyTokens = double(keys);
        const double readBytes =
            double(info.heads) *
            ((double(info.tokens) + keyTokens) * double(info.normaliserDim) + double(info.tokens) * double(info.dim) +
             keyTokens * (double(info.dim) + double(info.valueDim))) *
            8.0;
        if (readBytes > kMaxLayerReadBytes) {
            fail(layerPath + ": reading one (image, layer) would need " + formatGiB(readBytes) + " as double (heads " +
                 std::to_string(info.heads) + " x (N " + std::to_string(info.tokens) + " x d " +
                 std::to_string(info.dim) + " + n " + std::to_string(keys) + " x (d " + std::to_string(info.dim) +
                 " + v d " + std::to_string(info.valueDim) + ")) x 8 bytes), more than the limit of " +
                 formatGiB(kMaxLayerReadBytes) + "; the declared sizes are not plausible");
        }
    }

    // The layer's attributes: index, attention, scale, kernel_applied.
    void layerAttributes(hid_t group, const std::string& where, LayerCandidate& candidate) const {
        LayerInfo& info = candidate.info;
        if (h5::hasAttribute(group, "index", where)) {
            candidate.index = h5::readIntegerAttribute(group, "index", where);
            if (*candidate.index < INT_MIN || *candidate.index > INT_MAX) {
                throwInput(where + " attribute 'index' is out of range: " + std::to_string(*candidate.index));
            }
        }
        if (h5::hasAttribute(group, "attention", where)) {
            info.attention = h5::readStringAttribute(group, "attention", where);
        }
        info.scale = 1.0 / std::sqrt(double(info.dim));
        if (h5::hasAttribute(group, "scale", where)) {
            const double scale = h5::readNumberAttribute(group, "scale", where);
            if (!(scale > 0) || !std::isfinite(scale)) {
                std::ostringstream value;
                value << scale;
                throwInput(where + " attribute 'scale' must be a positive finite number, got " + value.str());
            }
            info.scale = scale;
            info.scaleFromFile = true;
        }
        if (h5::hasAttribute(group, "kernel_applied", where)) {
            info.kernelApplied = h5::readBoolAttribute(group, "kernel_applied", where);
        }
    }

    LayerCandidate layer(hid_t layersGroup, const std::string& name, const TokenLayout& root) const {
        LayerCandidate candidate;
        LayerInfo& info = candidate.info;
        info.name = name;
        const std::string layerPath = layerGroupPath(name);
        const std::string where = path_ + ": " + layerPath;

        h5::Handle group(H5Oopen(layersGroup, name.c_str(), H5P_DEFAULT));
        if (!group.valid()) fail(layerPath + " cannot be opened" + h5::errorSuffix());
        if (H5Iget_type(group.get()) != H5I_GROUP) {
            fail(layerPath + " is not a group (each layer is a group holding q, k and optionally v)");
        }
        std::vector<hsize_t> q, k;
        openQkv(group.get(), layerPath, where, candidate, q, k);

        normaliserAndGate(group.get(), layerPath, where, q, k, candidate);

        checkLayerReadSize(layerPath, info, k[2]);

        std::string gridSource = "the root", prefixSource = "the root";
        info.layout = readLayout(group.get(), where, root, false, &gridSource, &prefixSource);
        if (Index(info.tokens) != info.layout.tokens()) {
            fail(layerPath + ": N = " + std::to_string(info.tokens) + " tokens but prefix_tokens + H*W = " +
                 std::to_string(info.layout.prefix) + " + " + std::to_string(info.layout.gridH) + "*" +
                 std::to_string(info.layout.gridW) + " = " + std::to_string(info.layout.tokens()) + " (grid from " +
                 gridSource + ", prefix_tokens from " + prefixSource + ")");
        }
        info.keyLayout = keyLayout(group.get(), layerPath, where, info.layout, k[2]);
        readKeyStride(group.get(), layerPath, where, info);

        layerAttributes(group.get(), where, candidate);
        windowAttention(group.get(), layerPath, where, candidate);  // first: the branch's scope depends on it
        if (h5::linkExists(group.get(), "local_branch", where)) localBranch(group.get(), layerPath, candidate);
        return candidate;
    }

    // resources/format.md, section 1d: q_normaliser and k_normaliser (both or neither) beside q and
    // k, with their B, heads and tokens and one feature size dz of their own; output_gate beside v.
    void normaliserAndGate(hid_t group, const std::string& layerPath, const std::string& where,
                           const std::vector<hsize_t>& q, const std::vector<hsize_t>& k,
                           LayerCandidate& candidate) const {
        LayerInfo& info = candidate.info;
        const bool qz = h5::linkExists(group, "q_normaliser", where);
        const bool kz = h5::linkExists(group, "k_normaliser", where);
        if (qz != kz)
            fail(layerPath + " has " + (qz ? "q_normaliser but no k_normaliser" : "k_normaliser but no q_normaliser") +
                 " (the normaliser features come in pairs, format.md 1d)");
        if (qz) {
            candidate.handles.qNormaliser = openFloatDataset(group, layerPath, "q_normaliser", kQkvRule);
            candidate.handles.kNormaliser = openFloatDataset(group, layerPath, "k_normaliser", kQkvRule);
            const std::vector<hsize_t> a = rank4Dims(candidate.handles.qNormaliser);
            const std::vector<hsize_t> b = rank4Dims(candidate.handles.kNormaliser);
            if (a[0] != q[0] || a[1] != q[1] || a[2] != q[2])
                fail(layerPath + ": q_normaliser has shape " + h5::describeDims(a) + " but q has shape " +
                     h5::describeDims(q) + "; it needs q's B, heads and tokens");
            if (b[0] != k[0] || b[1] != k[1] || b[2] != k[2])
                fail(layerPath + ": k_normaliser has shape " + h5::describeDims(b) + " but k has shape " +
                     h5::describeDims(k) + "; it needs k's B, heads and tokens");
            if (a[3] != b[3] || a[3] == 0)
                fail(layerPath + ": q_normaliser has " + std::to_string(a[3]) +
                     " features per token but k_normaliser " + std::to_string(b[3]) +
                     "; they must agree and be at least 1");
            if (candidate.handles.qNormaliser.type != info.qkType || candidate.handles.kNormaliser.type != info.qkType)
                fail(layerPath + ": q_normaliser and k_normaliser must have q's dtype (" + toString(info.qkType) + ")");
            if (a[3] > hsize_t(INT_MAX)) fail(layerPath + ": q_normaliser's feature size is not plausible");
            info.normaliserDim = int(a[3]);
        }
        if (h5::linkExists(group, "output_gate", where)) {
            if (!info.hasValues())
                fail(layerPath + " has output_gate but no v (the gate multiplies the attention output A V)");
            candidate.handles.outputGate = openFloatDataset(group, layerPath, "output_gate", kQkvRule);
            const std::vector<hsize_t> g = rank4Dims(candidate.handles.outputGate);
            if (g[0] != q[0] || g[1] != q[1] || g[2] != q[2] || g[3] != hsize_t(info.valueDim))
                fail(layerPath + ": output_gate has shape " + h5::describeDims(g) +
                     "; it must be [B, heads, N, d_v] = " +
                     h5::describeDims(std::vector<hsize_t>{q[0], q[1], q[2], hsize_t(info.valueDim)}));
            info.hasOutputGate = true;
        }
    }

    // resources/format.md, section 1c: the keys' tokens, the layer's own unless @key_grid reduces them.
    TokenLayout keyLayout(hid_t group, const std::string& layerPath, const std::string& where,
                          const TokenLayout& queries, hsize_t keyTokens) const {
        const bool grid = h5::hasAttribute(group, "key_grid", where);
        const bool prefix = h5::hasAttribute(group, "key_prefix_tokens", where);
        if (!grid) {
            if (prefix) fail(layerPath + " has key_prefix_tokens but no key_grid (the reduced key grid [h, w])");
            if (keyTokens != hsize_t(queries.tokens()))
                fail(layerPath + ": q has " + std::to_string(queries.tokens()) + " tokens but k has " +
                     std::to_string(keyTokens) +
                     "; keys on a reduced grid (PVT's spatial-reduction attention) need the layer attribute "
                     "key_grid [h, w] (and key_prefix_tokens when the keys keep prefix tokens)");
            return queries;
        }
        const std::vector<std::int64_t> g = h5::readIntegerArrayAttribute(group, "key_grid", where);
        if (g.size() != 2 || g[0] <= 0 || g[1] <= 0 || g[0] > INT_MAX || g[1] > INT_MAX)
            throwInput(where + " attribute 'key_grid' must be two positive integers [h, w], got " +
                       h5::describeDims(g));
        TokenLayout keys{int(g[0]), int(g[1]), 0};
        if (prefix) {
            const std::int64_t p = h5::readIntegerAttribute(group, "key_prefix_tokens", where);
            if (p < 0 || p > INT_MAX)
                throwInput(where + " attribute 'key_prefix_tokens' must be a non-negative integer, got " +
                           std::to_string(p));
            keys.prefix = int(p);
        }
        if (queries.spatialTokens() == 0) fail(layerPath + " has key_grid but its queries have no grid to reduce");
        // A key grid is a reduction (format.md 1c): finer than the queries' grid, a key cell would
        // hold no query and "the key cell holding the query" would not cover the keys.
        if (keys.gridH > queries.gridH || keys.gridW > queries.gridW)
            fail(layerPath + " has key_grid " + std::to_string(keys.gridH) + " x " + std::to_string(keys.gridW) +
                 ", finer than its query grid " + std::to_string(queries.gridH) + " x " +
                 std::to_string(queries.gridW) + "; keys on a reduced grid have at most the queries' rows and columns");
        if (keyTokens != hsize_t(keys.tokens()))
            fail(layerPath + ": k has " + std::to_string(keyTokens) +
                 " tokens but key_prefix_tokens + h*w = " + std::to_string(keys.prefix) + " + " +
                 std::to_string(keys.gridH) + "*" + std::to_string(keys.gridW) + " = " + std::to_string(keys.tokens()));
        return keys;
    }

    // resources/format.md, section 1c: @key_stride [ry, rx], the strided convolution (kernel = stride,
    // no padding) that made the key grid, so that h = floor(H / ry) and w = floor(W / rx).
    void readKeyStride(hid_t group, const std::string& layerPath, const std::string& where, LayerInfo& info) const {
        if (!h5::hasAttribute(group, "key_stride", where)) return;
        if (!info.reducedKeys())
            fail(layerPath + " has key_stride but no key_grid (the stride is that of the keys' reduction)");
        const std::vector<std::int64_t> r = h5::readIntegerArrayAttribute(group, "key_stride", where);
        if (r.size() != 2 || r[0] <= 0 || r[1] <= 0 || r[0] > info.layout.gridH || r[1] > info.layout.gridW)
            throwInput(where +
                       " attribute 'key_stride' must be two positive integers [ry, rx] no larger than the "
                       "query grid " +
                       std::to_string(info.layout.gridH) + " x " + std::to_string(info.layout.gridW) + ", got " +
                       h5::describeDims(r));
        const std::int64_t h = info.layout.gridH / r[0], w = info.layout.gridW / r[1];
        if (h != info.keyLayout.gridH || w != info.keyLayout.gridW)
            fail(layerPath + " has key_stride " + std::to_string(r[0]) + " x " + std::to_string(r[1]) + " on a " +
                 std::to_string(info.layout.gridH) + " x " + std::to_string(info.layout.gridW) +
                 " query grid, which gives a " + std::to_string(h) + " x " + std::to_string(w) +
                 " key grid (kernel = stride, no padding), not its key_grid " + std::to_string(info.keyLayout.gridH) +
                 " x " + std::to_string(info.keyLayout.gridW));
        info.keyStrideY = int(r[0]);
        info.keyStrideX = int(r[1]);
    }

    // resources/format.md, section 1b. The position bias's values are read by open().
    void windowAttention(hid_t group, const std::string& layerPath, const std::string& where,
                         LayerCandidate& candidate) const {
        LayerInfo& info = candidate.info;
        if (h5::hasAttribute(group, "stripe_width", where))
            fail(layerPath +
                 " has stripe_width, which is not an attribute of the format: CSwin's stripes are "
                 "written as head_windows [heads, Mh, Mw, ...] (format.md 1b)");
        const bool size = h5::hasAttribute(group, "window_size", where);
        if (h5::hasAttribute(group, "head_windows", where)) {
            if (size) fail(layerPath + " has both window_size and head_windows; give one");
            headWindows(group, layerPath, where, candidate);
            return;
        }
        const bool shift = h5::hasAttribute(group, "window_shift", where);
        const bool mask = h5::hasAttribute(group, "window_mask", where);
        const bool bias = h5::linkExists(group, "position_bias", where);
        if (!size) {
            if (shift || mask || bias)
                fail(layerPath + " has " +
                     (shift  ? "window_shift"
                      : mask ? "window_mask"
                             : "position_bias") +
                     " but no window_size (window attention needs the window size [Mh, Mw])");
            return;
        }
        auto pair = [&](const char* name, std::int64_t least) {
            const std::vector<std::int64_t> v = h5::readIntegerArrayAttribute(group, name, where);
            if (v.size() != 2 || v[0] < least || v[1] < least || v[0] > 4096 || v[1] > 4096)
                throwInput(where + " attribute '" + name + "' must be two integers [" +
                           (least == 1 ? "Mh, Mw] between 1 and 4096" : "sh, sw] between 0 and 4096") + ", got " +
                           h5::describeDims(v));
            return v;
        };
        // The attribute, not whether it reduces: format.md says a layer has one or the other.
        if (h5::hasAttribute(group, "key_grid", where))
            fail(layerPath +
                 " has both window_size and key_grid: window attention with keys on a reduced grid is not a "
                 "layout AttnLens knows (Swin windows and PVT's spatial reduction are different layers)");
        WindowInfo window;
        const std::vector<std::int64_t> m = pair("window_size", 1);
        window.rule.sizeH = int(m[0]);
        window.rule.sizeW = int(m[1]);
        if (shift) {
            const std::vector<std::int64_t> s = pair("window_shift", 0);
            window.rule.shiftH = int(s[0]);
            window.rule.shiftW = int(s[1]);
        }
        if (mask)
            window.rule.masked = h5::readBoolAttribute(group, "window_mask", where);
        else if (window.rule.shifted())
            fail(layerPath +
                 ": window_shift is not 0 but window_mask is missing: say whether the model added Swin's "
                 "mask to its shifted windows (true) or ignored it (false, as the papers' linear attentions do)");
        if (window.rule.windowTokens() > 4096)
            fail(layerPath + ": windows of " + std::to_string(window.rule.sizeH) + " x " +
                 std::to_string(window.rule.sizeW) + " tokens are larger than the limit of 4096 tokens");
        try {
            window.partition = std::make_shared<const WindowPartition>(info.layout, window.rule);
        } catch (const Error& e) {
            fail(layerPath + ": " + e.what());
        }
        if (bias) {
            FloatDataset b = openFloatDataset(group, layerPath, "position_bias", "the position bias");
            const std::vector<hsize_t> dims = h5::datasetDims(b.dataset.get());
            const hsize_t t = hsize_t(window.rule.windowTokens());
            if (dims.size() != 3 || dims[0] != hsize_t(info.heads) || dims[1] != t || dims[2] != t)
                fail(b.path + " has shape " + h5::describeDims(dims) + "; expected [heads, Mh*Mw, Mh*Mw] = [" +
                     std::to_string(info.heads) + ", " + std::to_string(t) + ", " + std::to_string(t) + "]");
            if (double(info.heads) * double(t) * double(t) * 8.0 > 256.0 * double(1u << 20))
                fail(b.path + " would need more than 256 MiB as double; the declared sizes are not plausible");
            candidate.handles.positionBias = std::move(b);
        }
        info.window = std::move(window);
    }

    // resources/format.md, section 1b, "Per-head windows": @head_windows = [n_0, Mh_0, Mw_0, n_1, ...],
    // groups of consecutive heads with their window size (CSwin: half the heads in vertical
    // stripes [H, sw], half in horizontal ones [sw, W]); no shift, mask or position bias.
    void headWindows(hid_t group, const std::string& layerPath, const std::string& where,
                     LayerCandidate& candidate) const {
        LayerInfo& info = candidate.info;
        for (const char* other : {"window_shift", "window_mask"})
            if (h5::hasAttribute(group, other, where))
                fail(layerPath + " has head_windows and " + other + ": per-head windows are not shifted");
        if (h5::linkExists(group, "position_bias", where))
            fail(layerPath + " has head_windows and position_bias: per-head windows carry no position bias");
        if (h5::hasAttribute(group, "key_grid", where))
            fail(layerPath + " has both head_windows and key_grid; give one");
        const std::vector<std::int64_t> v = h5::readIntegerArrayAttribute(group, "head_windows", where);
        if (v.empty() || v.size() % 3 != 0)
            throwInput(where + " attribute 'head_windows' must be groups of three integers [heads, Mh, Mw, ...], got " +
                       h5::describeDims(v));
        WindowInfo window;
        std::int64_t covered = 0;
        for (std::size_t g = 0; g < v.size(); g += 3) {
            const std::int64_t count = v[g], mh = v[g + 1], mw = v[g + 2];
            if (count < 1 || mh < 1 || mw < 1 || mh > 4096 || mw > 4096 || count > info.heads)
                throwInput(where + " attribute 'head_windows' group " + std::to_string(g / 3) + " is [" +
                           std::to_string(count) + ", " + std::to_string(mh) + ", " + std::to_string(mw) +
                           "]; each group needs 1 to heads heads and a window of 1 to 4096 rows and columns");
            WindowRule rule;
            rule.sizeH = int(mh);
            rule.sizeW = int(mw);
            if (rule.windowTokens() > 4096)
                fail(layerPath + ": head_windows group " + std::to_string(g / 3) + " has windows of " +
                     std::to_string(mh) + " x " + std::to_string(mw) + " tokens, more than the limit of 4096");
            std::shared_ptr<const WindowPartition> partition;
            try {
                partition = std::make_shared<const WindowPartition>(info.layout, rule);
            } catch (const Error& e) {
                fail(layerPath + ": head_windows group " + std::to_string(g / 3) + ": " + e.what());
            }
            covered += count;
            if (covered > info.heads) break;
            for (std::int64_t h = 0; h < count; ++h) window.headPartitions.push_back(partition);
        }
        if (covered != info.heads)
            fail(layerPath + ": head_windows covers " + std::to_string(covered) + " heads but the layer has " +
                 std::to_string(info.heads));
        window.partition = window.headPartitions.front();
        window.rule = window.partition->rule();
        info.window = std::move(window);
    }

    // @values (format.md 1c): how V reaches the grid's tokens.
    void branchValues(hid_t group, const std::string& branchPath, const LayerInfo& info,
                      LocalBranchInfo& branch) const {
        const std::string where = path_ + ": " + branchPath;
        // @values (format.md 1c): "interpolated" says the branch convolves V linearly interpolated
        // from the n keys to the grid's tokens (FLatten-PVT); the only branch of a key_grid layer.
        if (h5::hasAttribute(group, "values", where)) {
            const std::string values = h5::readStringAttribute(group, "values", where);
            if (values == "interpolated")
                branch.interpolatedValues = true;
            else if (values != "tokens")
                fail(branchPath + " attribute 'values' must be \"tokens\" or \"interpolated\", got \"" +
                     printableText(values, 40) + "\"");
        }
        if (info.reducedKeys() && !branch.interpolatedValues)
            fail(branchPath +
                 ": the layer's keys and values lie on a reduced grid (key_grid), so its branch must say how V "
                 "reaches the grid's tokens: values = \"interpolated\" (FLatten-PVT's linear interpolation along "
                 "the token sequence) is the only way the format knows");
        if (branch.interpolatedValues) {
            if (!info.reducedKeys())
                fail(branchPath +
                     " attribute 'values' is \"interpolated\" but the layer has no key_grid (its "
                     "values are on its own tokens)");
            if (info.layout.prefix != 0 || info.keyLayout.prefix != 0)
                fail(branchPath +
                     ": interpolated values need a layer without prefix tokens (FLatten-PVT has "
                     "none): prefix_tokens " +
                     std::to_string(info.layout.prefix) + ", key_prefix_tokens " +
                     std::to_string(info.keyLayout.prefix));
        }
    }

    // @scope (format.md 1a): where the convolution runs.
    void branchScope(hid_t group, const std::string& branchPath, const LayerInfo& info, LocalBranchInfo& branch) const {
        const std::string where = path_ + ": " + branchPath;
        // A window layer's default is its windows, as in the papers' Swin models.
        branch.windowScope = info.window.has_value();
        if (h5::hasAttribute(group, "scope", where)) {
            const std::string scope = h5::readStringAttribute(group, "scope", where);
            if (scope == "window") {
                if (!info.window)
                    fail(branchPath +
                         " attribute 'scope' is \"window\" but the layer has no window attention "
                         "(window_size): only window layers convolve inside windows");
                branch.windowScope = true;
            } else if (scope == "grid") {
                branch.windowScope = false;
            } else {
                fail(branchPath + " attribute 'scope' must be \"grid\" or \"window\", got \"" + scope + "\"");
            }
        }
    }

    // The weight's shape [C, kh, kw], [B, C, kh, kw] or [B, windows, C, kh, kw]; returns C.
    hsize_t branchWeight(hid_t group, const std::string& branchPath, const std::string& channels,
                         LayerCandidate& candidate, LocalBranchInfo& branch) const {
        const LayerInfo& info = candidate.info;
        FloatDataset weight = openFloatDataset(group, branchPath, "weight", kBranchRule);
        const std::vector<hsize_t> w = h5::datasetDims(weight.dataset.get());
        if (w.size() < 3 || w.size() > 5)
            fail(weight.path + " has shape " + h5::describeDims(w) +
                 "; expected [C, kh, kw] or [B, C, kh, kw] (or [B, windows, C, kh, kw] inside windows)");
        branch.perImage = w.size() >= 4;
        branch.perWindow = w.size() == 5;
        const std::size_t o = w.size() - 3;
        if (branch.perImage && w[0] != hsize_t(info.batch))
            fail(weight.path + " has shape " + h5::describeDims(w) + ": per-image weights " +
                 (branch.perWindow ? "[B, windows, C, kh, kw]" : "[B, C, kh, kw]") +
                 " need B = " + std::to_string(info.batch) + " (the layer's images)");
        if (branch.perWindow) {
            if (branch.windowScope && info.window->perHead())
                fail(weight.path + " has shape " + h5::describeDims(w) +
                     ": per-window weights are not defined on a layer with head_windows (each head has its own "
                     "windows)");
            if (!branch.windowScope)
                fail(weight.path + " has shape " + h5::describeDims(w) +
                     ": per-window weights [B, windows, C, kh, kw] need the convolution inside windows (a window "
                     "layer with scope \"window\")");
            const hsize_t windows = hsize_t(info.window->partition->windows());
            if (w[1] != windows)
                fail(weight.path + " has shape " + h5::describeDims(w) + ": per-window weights need " +
                     std::to_string(windows) + " windows second (the layer's " + describe(info.window->rule) + ")");
            branch.windows = int(windows);
        }
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
        return expected;
    }

    // The bias, [C] or [B, C], when there is one.
    void branchBias(hid_t group, const std::string& branchPath, hsize_t expected, LayerCandidate& candidate,
                    LocalBranchInfo& branch) const {
        const LayerInfo& info = candidate.info;
        const std::string where = path_ + ": " + branchPath;
        if (h5::linkExists(group, "bias", where)) {
            FloatDataset bias = openFloatDataset(group, branchPath, "bias", kBranchRule);
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
        if (const auto map = localChannelMapNamed(channels))
            branch.channelMap = *map;
        else
            fail(branchPath + " attribute 'channels' must be \"per_head\" or \"all\", got \"" + channels + "\"");
        if (!info.hasValues()) fail(branchPath + " needs the dataset v (the branch acts on V's channels)");
        branchValues(group.get(), branchPath, info, branch);
        if (!h5::linkExists(group.get(), "weight", where)) fail(branchPath + ": dataset 'weight' is missing");

        branchScope(group.get(), branchPath, info, branch);
        const hsize_t expected = branchWeight(group.get(), branchPath, channels, candidate, branch);
        branchBias(group.get(), branchPath, expected, candidate, branch);
        info.localBranch = branch;
    }

    std::string path_;
    std::string rootWhere_;  // "file.h5: root", for attribute messages
};

}  // namespace

void requireFiniteBranchValues(const std::string& file, const FloatDataset& tensor, const std::vector<double>& values,
                               std::size_t perChannel, int image) {
    const int channel = firstNonFiniteChannel(values, perChannel);
    if (channel < 0) return;
    const auto begin = values.begin() + std::ptrdiff_t(std::size_t(channel) * perChannel);
    const double bad =
        *std::find_if(begin, begin + std::ptrdiff_t(perChannel), [](double x) { return !std::isfinite(x); });
    std::ostringstream value;
    value << bad;
    throwInput(file + ": " + tensor.path + (image >= 0 ? " (image " + std::to_string(image) + ")" : "") + ": channel " +
               std::to_string(channel) + " holds a non-finite value (" + value.str() +
               "); the branch's weights must be finite");
}

void DumpReader::Impl::open(const std::string& dumpPath, DumpInfo& info) {
    path = dumpPath;
    info.path = dumpPath;
    const Validator validator(dumpPath);
    info.fileSize = validator.readableFileSize();

    h5::Lock lock;
    file = validator.openFile();
    halfMemoryType = h5::makeHalfType(true);
    if (!halfMemoryType.valid()) throwInput(path + ": HDF5 could not build the float16 type");
    validator.root(file.get(), info);
    for (LayerCandidate& candidate : validator.layers(file.get(), info.layout)) {
        info.layers.push_back(std::move(candidate.info));
        layers.push_back(std::move(candidate.handles));
    }
    info.images = info.layers.front().batch;

    // Shared local-branch weights and biases are model parameters of a few kilobytes: read and
    // check them now, so that a NaN kernel is an open error and later reads cost nothing.
    for (std::size_t l = 0; l < info.layers.size(); ++l) {
        const std::optional<LocalBranchInfo>& branch = info.layers[l].localBranch;
        if (!branch) continue;
        LocalBranchWeights& shared = layers[l].sharedBranch;
        shared.channels = branch->channels;
        shared.kernelH = branch->kernelH;
        shared.kernelW = branch->kernelW;
        shared.windows = branch->windows;
        readBranchParts(layers[l], *branch, -1, shared);
    }

    // Position biases are model parameters (heads x (Mh Mw)^2 values): read and check them now.
    for (std::size_t l = 0; l < info.layers.size(); ++l) {
        const FloatDataset& bias = layers[l].positionBias;
        if (!info.layers[l].window || !bias.dataset.valid()) continue;
        const LayerInfo& layer = info.layers[l];
        const hsize_t t = hsize_t(layer.window->rule.windowTokens());
        const std::vector<hsize_t> start{0, 0, 0}, extent{hsize_t(layer.heads), t, t};
        const std::vector<double> values = readDoubles(bias, start, extent, "the position bias");
        auto perHead = std::make_shared<std::vector<Matrix>>();
        for (int h = 0; h < layer.heads; ++h) {
            const double* base = values.data() + std::size_t(h) * std::size_t(t * t);
            const auto bad = std::find_if(base, base + t * t, [](double x) { return !std::isfinite(x); });
            if (bad != base + t * t) {
                std::ostringstream value;
                value << *bad;
                throwInput(path + ": " + bias.path + ": head " + std::to_string(h) + " holds a non-finite value (" +
                           value.str() + "); the position bias must be finite");
            }
            perHead->push_back(Eigen::Map<const Matrix>(base, Index(t), Index(t)));
        }
        info.layers[l].window->positionBias = std::move(perHead);
    }

    images = validator.images(file.get(), info.images, info.imageInfo);
    labels = validator.labels(file.get(), info.images);
    info.hasLabels = labels.valid();
    info.classNames = validator.classNames(file.get(), labels.valid() ? labels.get() : H5I_INVALID_HID, info.images);
}

}  // namespace attnlens
