// DumpWriter: builds HDF5 files in the "attnlens.dump" layout (and deliberately broken ones for
// tests). Writes go to a temporary file that commit() renames into place.
#include <unistd.h>

#include <filesystem>
#include <numeric>
#include <system_error>

#include "attnlens/dump.h"
#include "attnlens/error.h"
#include "float16.h"
#include "hdf5_util.h"

namespace attnlens {

namespace {

// HDF5 caps a chunk at 4 GiB; smaller chunks also keep the chunk cache useful.
constexpr std::uint64_t kMaxChunkBytes = 64ull << 20;
// Rank-1 datasets (labels) get chunks of this many elements instead of one element per chunk.
constexpr std::uint64_t kRank1ChunkElements = 1ull << 16;

std::vector<std::string> splitPath(const std::string& path) {
    std::vector<std::string> parts;
    std::size_t start = 0;
    while (start <= path.size()) {
        std::size_t end = path.find('/', start);
        if (end == std::string::npos) end = path.size();
        if (end > start) parts.push_back(path.substr(start, end - start));
        start = end + 1;
    }
    return parts;
}

std::string normalised(const std::string& path) {
    std::string result;
    for (const std::string& part : splitPath(path)) result += "/" + part;
    return result.empty() ? "/" : result;
}

std::string parentOf(const std::string& path) {
    const std::string p = normalised(path);
    const std::size_t slash = p.rfind('/');
    return slash == 0 ? "/" : p.substr(0, slash);
}

std::string baseName(const std::string& path) {
    const std::string p = normalised(path);
    return p.substr(p.rfind('/') + 1);
}

std::uint64_t elementCount(const std::vector<std::uint64_t>& shape) {
    return std::accumulate(shape.begin(), shape.end(), std::uint64_t(1),
                           [](std::uint64_t a, std::uint64_t b) { return a * b; });
}

// One leading index per chunk ([1, rest...]); dimensions after the first are cut further only when
// such a chunk would exceed kMaxChunkBytes. Empty when the dataset should be contiguous.
std::vector<hsize_t> chunkDims(const std::vector<std::uint64_t>& shape, std::size_t elementSize) {
    if (shape.empty()) return {};
    for (std::uint64_t d : shape) {
        if (d == 0) return {};  // zero-sized: nothing to chunk, and HDF5 requires chunk <= max dim
    }
    if (shape.size() == 1) return {hsize_t(std::min(shape[0], kRank1ChunkElements))};
    std::vector<hsize_t> chunk(shape.begin(), shape.end());
    chunk[0] = 1;
    for (std::size_t i = 1; i < chunk.size(); ++i) {
        std::uint64_t bytes = elementSize;
        for (hsize_t c : chunk) bytes *= c;
        if (bytes <= kMaxChunkBytes) break;
        const std::uint64_t factor = (bytes + kMaxChunkBytes - 1) / kMaxChunkBytes;
        chunk[i] = std::max<hsize_t>(1, chunk[i] / factor);
    }
    return chunk;
}

}  // namespace

struct DumpWriter::Impl {
    std::string finalPath;
    std::string tempPath;
    h5::Handle file;
    bool committed = false;
    bool fixedLengthStrings = false;

    std::string where(const std::string& object) const { return finalPath + ": " + object; }

    void requireOpen() const {
        if (committed) throwUsage(finalPath + ": DumpWriter used after commit()");
    }

    // Opens the group at `path`, creating it and its parents as needed. Lock held.
    h5::Handle group(const std::string& path) {
        std::string prefix;
        for (const std::string& part : splitPath(path)) {
            prefix += "/" + part;
            if (H5Lexists(file.get(), prefix.c_str(), H5P_DEFAULT) > 0) continue;
            h5::Handle created(
                H5Gcreate2(file.get(), prefix.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
            if (!created.valid()) {
                throwOutput(where(prefix) + ": cannot create the group" + h5::errorSuffix());
            }
        }
        h5::Handle opened(H5Gopen2(file.get(), normalised(path).c_str(), H5P_DEFAULT));
        if (!opened.valid()) {
            throwOutput(where(normalised(path)) + ": cannot open the group" + h5::errorSuffix());
        }
        return opened;
    }

    // Writes (or replaces) one attribute. Lock held.
    void attribute(const std::string& groupPath, const std::string& name, hid_t fileType,
                   hid_t memoryType, const std::vector<hsize_t>& dims, const void* data) {
        requireOpen();
        h5::Handle object = group(groupPath);
        if (H5Aexists(object.get(), name.c_str()) > 0) H5Adelete(object.get(), name.c_str());
        h5::Handle space(dims.empty() ? H5Screate(H5S_SCALAR)
                                      : H5Screate_simple(int(dims.size()), dims.data(), nullptr));
        h5::Handle attr(H5Acreate2(object.get(), name.c_str(), fileType, space.get(), H5P_DEFAULT,
                                   H5P_DEFAULT));
        if (!space.valid() || !attr.valid() || H5Awrite(attr.get(), memoryType, data) < 0) {
            throwOutput(where(normalised(groupPath)) + ": cannot write the attribute '" + name +
                        "'" + h5::errorSuffix());
        }
    }

    void stringAttribute(const std::string& groupPath, const std::string& name,
                         const std::string& value) {
        h5::Lock lock;
        h5::Handle type(H5Tcopy(H5T_C_S1));
        if (fixedLengthStrings) {
            H5Tset_size(type.get(), std::max<std::size_t>(value.size(), 1));
            H5Tset_strpad(type.get(), H5T_STR_NULLPAD);
            H5Tset_cset(type.get(), H5T_CSET_ASCII);
            attribute(groupPath, name, type.get(), type.get(), {}, value.data());
        } else {
            H5Tset_size(type.get(), H5T_VARIABLE);
            H5Tset_cset(type.get(), H5T_CSET_UTF8);
            const char* text = value.c_str();
            attribute(groupPath, name, type.get(), type.get(), {}, &text);
        }
    }

    // Creates the dataset (replacing an existing one); lock held.
    h5::Handle dataset(const std::string& path, const std::vector<std::uint64_t>& shape,
                       hid_t fileType) {
        requireOpen();
        h5::Handle parent = group(parentOf(path));
        const std::string name = baseName(path);
        if (H5Lexists(parent.get(), name.c_str(), H5P_DEFAULT) > 0) {
            H5Ldelete(parent.get(), name.c_str(), H5P_DEFAULT);
        }
        const std::vector<hsize_t> dims(shape.begin(), shape.end());
        h5::Handle space(dims.empty() ? H5Screate(H5S_SCALAR)
                                      : H5Screate_simple(int(dims.size()), dims.data(), nullptr));
        h5::Handle properties(H5Pcreate(H5P_DATASET_CREATE));
        const std::vector<hsize_t> chunk = chunkDims(shape, H5Tget_size(fileType));
        if (!chunk.empty()) H5Pset_chunk(properties.get(), int(chunk.size()), chunk.data());
        h5::Handle created(H5Dcreate2(parent.get(), name.c_str(), fileType, space.get(),
                                      H5P_DEFAULT, properties.get(), H5P_DEFAULT));
        if (!space.valid() || !created.valid()) {
            throwOutput(where(normalised(path)) + ": cannot create the dataset of shape " +
                        h5::describeDims(dims) + h5::errorSuffix());
        }
        return created;
    }

    void writeDataset(const std::string& path, const std::vector<std::uint64_t>& shape,
                      std::size_t valueCount, hid_t fileType, hid_t memoryType, const void* data) {
        if (valueCount != elementCount(shape)) {
            throwUsage(where(normalised(path)) + ": shape " +
                       h5::describeDims(std::vector<hsize_t>(shape.begin(), shape.end())) +
                       " has " + std::to_string(elementCount(shape)) + " elements but " +
                       std::to_string(valueCount) + " values were given");
        }
        h5::Handle created = dataset(path, shape, fileType);
        if (valueCount > 0 &&
            H5Dwrite(created.get(), memoryType, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0) {
            throwOutput(where(normalised(path)) + ": writing the dataset failed" +
                        h5::errorSuffix());
        }
    }
};

DumpWriter::DumpWriter(const std::string& path) : impl_(std::make_unique<Impl>()) {
    impl_->finalPath = path;
    impl_->tempPath = path + ".tmp-" + std::to_string(::getpid());
    const std::filesystem::path parent = std::filesystem::path(path).parent_path();
    std::error_code ec;
    if (!parent.empty() && !std::filesystem::is_directory(parent, ec)) {
        throwOutput(path + ": cannot write: the directory " + parent.string() + " does not exist");
    }
    if (std::filesystem::is_directory(path, ec)) {
        throwOutput(path + ": cannot write: it is a directory");
    }
    h5::Lock lock;
    impl_->file =
        h5::Handle(H5Fcreate(impl_->tempPath.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
    if (!impl_->file.valid()) {
        throwOutput(path + ": cannot create the temporary file " + impl_->tempPath +
                    h5::errorSuffix());
    }
}

DumpWriter::~DumpWriter() {
    if (!impl_ || impl_->committed) return;
    {
        h5::Lock lock;
        impl_->file.reset();
    }
    std::error_code ignored;
    std::filesystem::remove(impl_->tempPath, ignored);
}

void DumpWriter::setFixedLengthStrings(bool fixed) { impl_->fixedLengthStrings = fixed; }

void DumpWriter::setRootAttribute(const std::string& name, const std::string& value) {
    setGroupAttribute("/", name, value);
}
void DumpWriter::setRootAttribute(const std::string& name, std::int64_t value) {
    setGroupAttribute("/", name, value);
}
void DumpWriter::setRootAttribute(const std::string& name, const std::vector<std::int64_t>& value) {
    setGroupAttribute("/", name, value);
}

void DumpWriter::setGroupAttribute(const std::string& group, const std::string& name,
                                   const std::string& value) {
    impl_->stringAttribute(group, name, value);
}

void DumpWriter::setGroupAttribute(const std::string& group, const std::string& name,
                                   std::int64_t value) {
    h5::Lock lock;
    impl_->attribute(group, name, H5T_STD_I64LE, H5T_NATIVE_INT64, {}, &value);
}

void DumpWriter::setGroupAttribute(const std::string& group, const std::string& name,
                                   double value) {
    h5::Lock lock;
    impl_->attribute(group, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {}, &value);
}

void DumpWriter::setGroupAttribute(const std::string& group, const std::string& name,
                                   const std::vector<std::int64_t>& value) {
    h5::Lock lock;
    impl_->attribute(group, name, H5T_STD_I64LE, H5T_NATIVE_INT64, {hsize_t(value.size())},
                     value.data());
}

void DumpWriter::setGroupBoolAttribute(const std::string& group, const std::string& name,
                                       bool value) {
    h5::Lock lock;
    h5::Handle type(H5Tenum_create(H5T_NATIVE_INT8));
    const std::int8_t falseValue = 0, trueValue = 1;
    H5Tenum_insert(type.get(), "FALSE", &falseValue);
    H5Tenum_insert(type.get(), "TRUE", &trueValue);
    const std::int8_t stored = value ? 1 : 0;
    impl_->attribute(group, name, type.get(), type.get(), {}, &stored);
}

void DumpWriter::writeFloatDataset(const std::string& path, const std::vector<std::uint64_t>& shape,
                                   const std::vector<float>& data, DType storedAs) {
    if (storedAs == DType::Float16) {
        std::vector<std::uint16_t> halves(data.size());
        for (std::size_t i = 0; i < data.size(); ++i) halves[i] = float16::fromFloat(data[i]);
        h5::Lock lock;
        h5::Handle fileType = h5::makeHalfType(false);
        h5::Handle memoryType = h5::makeHalfType(true);
        if (!fileType.valid() || !memoryType.valid()) {
            throwOutput(impl_->where(path) + ": HDF5 could not build the float16 type");
        }
        impl_->writeDataset(path, shape, data.size(), fileType.get(), memoryType.get(),
                            halves.data());
        return;
    }
    h5::Lock lock;
    const hid_t fileType = storedAs == DType::Float32 ? H5T_IEEE_F32LE : H5T_IEEE_F64LE;
    impl_->writeDataset(path, shape, data.size(), fileType, H5T_NATIVE_FLOAT, data.data());
}

void DumpWriter::declareFloatDataset(const std::string& path,
                                     const std::vector<std::uint64_t>& shape, DType storedAs) {
    h5::Lock lock;
    h5::Handle half;
    hid_t fileType = H5T_IEEE_F32LE;
    if (storedAs == DType::Float16) {
        half = h5::makeHalfType(false);
        fileType = half.get();
    } else if (storedAs == DType::Float64) {
        fileType = H5T_IEEE_F64LE;
    }
    impl_->dataset(path, shape, fileType);
}

void DumpWriter::writeUInt8Dataset(const std::string& path, const std::vector<std::uint64_t>& shape,
                                   const std::vector<std::uint8_t>& data) {
    h5::Lock lock;
    impl_->writeDataset(path, shape, data.size(), H5T_STD_U8LE, H5T_NATIVE_UINT8, data.data());
}

void DumpWriter::writeInt64Dataset(const std::string& path, const std::vector<std::uint64_t>& shape,
                                   const std::vector<std::int64_t>& data) {
    h5::Lock lock;
    impl_->writeDataset(path, shape, data.size(), H5T_STD_I64LE, H5T_NATIVE_INT64, data.data());
}

void DumpWriter::writeInt32Dataset(const std::string& path, const std::vector<std::uint64_t>& shape,
                                   const std::vector<std::int32_t>& data) {
    h5::Lock lock;
    impl_->writeDataset(path, shape, data.size(), H5T_STD_I32LE, H5T_NATIVE_INT32, data.data());
}

void DumpWriter::commit() {
    impl_->requireOpen();
    {
        h5::Lock lock;
        if (!impl_->file.close()) {
            throwOutput(impl_->finalPath + ": closing " + impl_->tempPath + " failed" +
                        h5::errorSuffix());
        }
    }
    std::error_code ec;
    std::filesystem::rename(impl_->tempPath, impl_->finalPath, ec);
    if (ec) {
        const std::string why = ec.message();  // before remove() reuses an error code
        std::error_code ignored;
        std::filesystem::remove(impl_->tempPath, ignored);
        throwOutput(impl_->finalPath + ": cannot rename the temporary file into place: " + why);
    }
    impl_->committed = true;
}

}  // namespace attnlens
