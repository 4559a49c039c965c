// DumpWriter: builds HDF5 files in the "attnlens.dump" layout (and deliberately broken ones for
// tests). Writes go to a temporary file that commit() renames into place.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <optional>
#include <system_error>

#include "attnlens/dump/dump.h"
#include "attnlens/io/atomic_file.h"
#include "attnlens/io/error.h"
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

// The first write to the file that failed (a full disk, a file size limit, an I/O error).
struct WriteFailure {
    int error = 0;          // errno; 0 while every write succeeded
    std::string operation;  // "writing 3928 bytes at offset 0"
    int openError = 0;      // errno of the driver's last failed open (HDF5 tries several ways)

    void record(int errorNumber, std::string what) {
        if (error != 0) return;
        error = errorNumber != 0 ? errorNumber : EIO;
        operation = std::move(what);
    }
};

// HDF5 1.10 cannot survive a failed write at close: when H5Fclose's flush fails, the file's
// identifier stays registered over a half-destroyed file object, and the library's exit handler
// (H5_term_library -> H5F__close_cb) or any later close dereferences it: a full disk ended the
// program with SIGSEGV after its error message. So the writer does its file I/O through this
// driver (the POSIX calls of HDF5's own sec2 driver, producing the same files): a failed write,
// truncate or close is recorded in the WriteFailure the writer passes in, reported to HDF5 as a
// success, and every later write is discarded. HDF5 never sees a failure, closes cleanly, and the
// writer reports the recorded one (DumpWriter::Impl::checkWrites) and removes the temporary file.
// The driver class layout is that of HDF5 1.10; other versions use the default driver.
#if H5_VERS_MAJOR == 1 && H5_VERS_MINOR == 10
#define ATTNLENS_RECORDING_DRIVER 1

namespace recording {

// Set by the writer around H5Fcreate (HDF5 lock held): where the file being opened records.
thread_local WriteFailure* tOpening = nullptr;
hid_t gDriver = H5I_INVALID_HID;

constexpr haddr_t kMaxAddress = (haddr_t(1) << (8 * sizeof(off_t) - 1)) - 1;

struct File {
    H5FD_t pub;  // first: HDF5 passes &pub, the driver casts back
    int fd;
    haddr_t eoa;
    haddr_t eof;
    dev_t device;
    ino_t inode;
    WriteFailure* failure;
};

File* self(H5FD_t* file) { return reinterpret_cast<File*>(file); }
const File* self(const H5FD_t* file) { return reinterpret_cast<const File*>(file); }

bool overflows(haddr_t addr, std::size_t size) {
    return addr == HADDR_UNDEF || addr > kMaxAddress || size > kMaxAddress || addr + size > kMaxAddress;
}

std::string describe(const char* what, std::size_t size, haddr_t addr) {
    return std::string(what) + " " + std::to_string(size) + " bytes at offset " + std::to_string(addr);
}

herr_t terminate() {
    gDriver = H5I_INVALID_HID;
    return 0;
}

H5FD_t* open(const char* name, unsigned flags, hid_t, haddr_t maxaddr) {
    WriteFailure* failure = tOpening;
    if (name == nullptr || *name == '\0' || maxaddr == 0 || maxaddr == HADDR_UNDEF || maxaddr > kMaxAddress)
        return nullptr;
    int mode = (flags & H5F_ACC_RDWR) ? O_RDWR : O_RDONLY;
    if (flags & H5F_ACC_TRUNC) mode |= O_TRUNC;
    if (flags & H5F_ACC_CREAT) mode |= O_CREAT;
    if (flags & H5F_ACC_EXCL) mode |= O_EXCL;
    const int fd = ::open(name, mode | O_CLOEXEC, 0666);
    if (fd < 0) {
        if (failure) failure->openError = errno;
        return nullptr;
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        if (failure) failure->openError = errno;
        ::close(fd);
        return nullptr;
    }
    auto* file = static_cast<File*>(std::calloc(1, sizeof(File)));
    if (file == nullptr) {
        ::close(fd);
        return nullptr;
    }
    file->fd = fd;
    file->eof = haddr_t(st.st_size);
    file->device = st.st_dev;
    file->inode = st.st_ino;
    file->failure = failure;
    return &file->pub;
}

herr_t close(H5FD_t* handle) {
    File* file = self(handle);
    if (::close(file->fd) != 0 && file->failure) file->failure->record(errno, "closing the file");
    std::free(file);
    return 0;
}

int compare(const H5FD_t* a, const H5FD_t* b) {
    const File* x = self(a);
    const File* y = self(b);
    if (x->device != y->device) return x->device < y->device ? -1 : 1;
    if (x->inode != y->inode) return x->inode < y->inode ? -1 : 1;
    return 0;
}

herr_t query(const H5FD_t*, unsigned long* flags) {
    if (flags)
        *flags = H5FD_FEAT_AGGREGATE_METADATA | H5FD_FEAT_ACCUMULATE_METADATA | H5FD_FEAT_DATA_SIEVE |
                 H5FD_FEAT_AGGREGATE_SMALLDATA | H5FD_FEAT_POSIX_COMPAT_HANDLE | H5FD_FEAT_DEFAULT_VFD_COMPATIBLE;
    return 0;
}

haddr_t getEoa(const H5FD_t* file, H5FD_mem_t) { return self(file)->eoa; }
herr_t setEoa(H5FD_t* file, H5FD_mem_t, haddr_t addr) {
    self(file)->eoa = addr;
    return 0;
}
haddr_t getEof(const H5FD_t* file, H5FD_mem_t) { return self(file)->eof; }

herr_t getHandle(H5FD_t* file, hid_t, void** handle) {
    if (handle == nullptr) return -1;
    *handle = &self(file)->fd;
    return 0;
}

herr_t read(H5FD_t* handle, H5FD_mem_t, hid_t, haddr_t addr, std::size_t size, void* buffer) {
    File* file = self(handle);
    if (overflows(addr, size) || addr + size > file->eoa) return -1;
    auto* out = static_cast<unsigned char*>(buffer);
    while (size > 0) {
        const ssize_t n = ::pread(file->fd, out, size, off_t(addr));
        if (n < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (n == 0) {  // past the end of the file: zeros, as sec2 gives
            std::memset(out, 0, size);
            break;
        }
        out += n;
        addr += haddr_t(n);
        size -= std::size_t(n);
    }
    return 0;
}

herr_t write(H5FD_t* handle, H5FD_mem_t, hid_t, haddr_t addr, std::size_t size, const void* buffer) {
    File* file = self(handle);
    if (overflows(addr, size) || addr + size > file->eoa) return -1;  // a library error, not I/O
    const haddr_t end = addr + size;
    if (file->failure == nullptr || file->failure->error == 0) {
        const auto* in = static_cast<const unsigned char*>(buffer);
        haddr_t at = addr;
        std::size_t left = size;
        while (left > 0) {
            const ssize_t n = ::pwrite(file->fd, in, left, off_t(at));
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {
                const int error = n < 0 ? errno : ENOSPC;
                if (file->failure == nullptr) return -1;
                file->failure->record(error, describe("writing", size, addr));
                break;
            }
            in += n;
            at += haddr_t(n);
            left -= std::size_t(n);
        }
    }
    if (end > file->eof) file->eof = end;
    return 0;
}

herr_t truncate(H5FD_t* handle, hid_t, hbool_t) {
    File* file = self(handle);
    if (file->eoa == file->eof) return 0;
    if (file->failure == nullptr || file->failure->error == 0) {
        if (::ftruncate(file->fd, off_t(file->eoa)) != 0) {
            if (file->failure == nullptr) return -1;
            file->failure->record(errno, "setting the file's size to " + std::to_string(file->eoa) + " bytes");
        }
    }
    file->eof = file->eoa;
    return 0;
}

// The driver's identifier, registered on first use (and again after the library restarted). Lock held.
hid_t driver() {
    if (gDriver >= 0 && H5Iis_valid(gDriver) > 0) return gDriver;
    static const H5FD_class_t cls = {
        "attnlens_recording_sec2",  // name
        kMaxAddress,                // maxaddr
        H5F_CLOSE_WEAK,             // fc_degree
        terminate,
        nullptr,
        nullptr,
        nullptr,  // sb_size, sb_encode, sb_decode: no driver info block
        0,
        nullptr,
        nullptr,
        nullptr,  // fapl
        0,
        nullptr,
        nullptr,  // dxpl
        open,
        close,
        compare,
        query,
        nullptr,  // get_type_map
        nullptr,
        nullptr,  // alloc, free
        getEoa,
        setEoa,
        getEof,
        getHandle,
        read,
        write,
        nullptr,  // flush: nothing buffered here
        truncate,
        nullptr,
        nullptr,  // lock, unlock
        H5FD_FLMAP_DICHOTOMY,
    };
    gDriver = H5FDregister(&cls);
    return gDriver;
}

}  // namespace recording
#endif

}  // namespace

struct DumpWriter::Impl {
    std::string finalPath;
    std::optional<TemporaryOutputFile> output;  // before `file`: removed after HDF5 closed it
    WriteFailure failure;                       // before `file`: the driver records into it until the file is closed
    h5::Handle file;
    bool committed = false;
    bool fixedLengthStrings = false;

    std::string where(const std::string& object) const { return finalPath + ": " + object; }

    // The file type a float tensor stored as `storedAs` gets (little-endian IEEE); `half` keeps
    // the float16 type alive while it is used. Caller holds the HDF5 lock.
    hid_t storedFloatType(const std::string& path, DType storedAs, h5::Handle& half) const {
        if (storedAs == DType::Float16) {
            half = h5::makeHalfType(false);
            if (!half.valid()) throwOutput(where(path) + ": HDF5 could not build the float16 type");
            return half.get();
        }
        return storedAs == DType::Float64 ? H5T_IEEE_F64LE : H5T_IEEE_F32LE;
    }

    // Error(Output) for the first failed write, if there was one (see `recording` above).
    void checkWrites() const {
        if (failure.error == 0) return;
        throwOutput(finalPath + ": cannot write: " + std::strerror(failure.error) + " (" + failure.operation +
                    " of the temporary file " + output->temporaryPath() + "; it is removed)");
    }
    // Error(Output) for a failed HDF5 call: the recorded write failure when it caused it.
    [[noreturn]] void fail(const std::string& message) const {
        checkWrites();
        throwOutput(message + h5::errorSuffix());
    }

    void requireOpen() const {
        if (committed) throwUsage(finalPath + ": DumpWriter used after commit()");
    }

    // Opens the group at `path`, creating it and its parents as needed. Lock held.
    h5::Handle group(const std::string& path) {
        std::string prefix;
        for (const std::string& part : splitPath(path)) {
            prefix += "/" + part;
            if (H5Lexists(file.get(), prefix.c_str(), H5P_DEFAULT) > 0) continue;
            h5::Handle created(H5Gcreate2(file.get(), prefix.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
            if (!created.valid()) {
                fail(where(prefix) + ": cannot create the group");
            }
        }
        h5::Handle opened(H5Gopen2(file.get(), normalised(path).c_str(), H5P_DEFAULT));
        if (!opened.valid()) {
            fail(where(normalised(path)) + ": cannot open the group");
        }
        return opened;
    }

    // Writes (or replaces) one attribute. Lock held.
    void attribute(const std::string& groupPath, const std::string& name, hid_t fileType, hid_t memoryType,
                   const std::vector<hsize_t>& dims, const void* data) {
        requireOpen();
        h5::Handle object = group(groupPath);
        if (H5Aexists(object.get(), name.c_str()) > 0) H5Adelete(object.get(), name.c_str());
        h5::Handle space(dims.empty() ? H5Screate(H5S_SCALAR)
                                      : H5Screate_simple(int(dims.size()), dims.data(), nullptr));
        h5::Handle attr(H5Acreate2(object.get(), name.c_str(), fileType, space.get(), H5P_DEFAULT, H5P_DEFAULT));
        if (!space.valid() || !attr.valid() || H5Awrite(attr.get(), memoryType, data) < 0) {
            fail(where(normalised(groupPath)) + ": cannot write the attribute '" + name + "'");
        }
        checkWrites();
    }

    void stringAttribute(const std::string& groupPath, const std::string& name, const std::string& value) {
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
    h5::Handle dataset(const std::string& path, const std::vector<std::uint64_t>& shape, hid_t fileType) {
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
        h5::Handle created(
            H5Dcreate2(parent.get(), name.c_str(), fileType, space.get(), H5P_DEFAULT, properties.get(), H5P_DEFAULT));
        if (!space.valid() || !created.valid()) {
            fail(where(normalised(path)) + ": cannot create the dataset of shape " + h5::describeDims(dims));
        }
        checkWrites();
        return created;
    }

    void writeDataset(const std::string& path, const std::vector<std::uint64_t>& shape, std::size_t valueCount,
                      hid_t fileType, hid_t memoryType, const void* data) {
        if (valueCount != elementCount(shape)) {
            throwUsage(where(normalised(path)) + ": shape " +
                       h5::describeDims(std::vector<hsize_t>(shape.begin(), shape.end())) + " has " +
                       std::to_string(elementCount(shape)) + " elements but " + std::to_string(valueCount) +
                       " values were given");
        }
        h5::Handle created = dataset(path, shape, fileType);
        if (valueCount > 0 && H5Dwrite(created.get(), memoryType, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0) {
            fail(where(normalised(path)) + ": writing the dataset failed");
        }
        // Closing writes the chunk cache: a full disk shows here at the latest.
        if (!created.close()) fail(where(normalised(path)) + ": writing the dataset failed");
        checkWrites();
    }

    // Grows the column at `path` by `rows` rows and writes them. Lock held.
    void appendRows(const std::string& path, hid_t memoryType, const void* values, std::uint64_t rows) {
        requireOpen();
        if (rows == 0) return;
        const std::string shown = where(normalised(path));
        h5::Handle dataset(H5Dopen2(file.get(), normalised(path).c_str(), H5P_DEFAULT));
        if (!dataset.valid()) fail(shown + ": no such column (createColumn first)");
        std::vector<hsize_t> dims = h5::datasetDims(dataset.get());
        if (dims.empty()) fail(shown + ": not a column");
        const hsize_t start = dims[0];
        dims[0] += rows;
        if (H5Dset_extent(dataset.get(), dims.data()) < 0) fail(shown + ": cannot grow the column");
        h5::Handle fileSpace(H5Dget_space(dataset.get()));
        std::vector<hsize_t> offset(dims.size(), 0), count = dims;
        offset[0] = start;
        count[0] = rows;
        h5::Handle memorySpace(H5Screate_simple(int(count.size()), count.data(), nullptr));
        if (!fileSpace.valid() || !memorySpace.valid() ||
            H5Sselect_hyperslab(fileSpace.get(), H5S_SELECT_SET, offset.data(), nullptr, count.data(), nullptr) < 0 ||
            H5Dwrite(dataset.get(), memoryType, memorySpace.get(), fileSpace.get(), H5P_DEFAULT, values) < 0)
            fail(shown + ": writing rows failed");
        if (!dataset.close()) fail(shown + ": writing rows failed");
        checkWrites();
    }
};

DumpWriter::DumpWriter(const std::string& path) : impl_(std::make_unique<Impl>()) {
    impl_->finalPath = path;
    impl_->output.emplace(path);  // a new name or a regular file: not a directory, link or device
    h5::Lock lock;
    hid_t access = H5P_DEFAULT;
#ifdef ATTNLENS_RECORDING_DRIVER
    h5::Handle properties(H5Pcreate(H5P_FILE_ACCESS));
    const hid_t driver = recording::driver();
    if (!properties.valid() || driver < 0 || H5Pset_driver(properties.get(), driver, nullptr) < 0)
        throwOutput(path + ": HDF5 could not set up its file driver" + h5::errorSuffix());
    access = properties.get();
    recording::tOpening = &impl_->failure;
#endif
    impl_->file = h5::Handle(H5Fcreate(impl_->output->temporaryPath().c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, access));
#ifdef ATTNLENS_RECORDING_DRIVER
    recording::tOpening = nullptr;
#endif
    if (!impl_->file.valid()) {
        const int error = impl_->failure.error != 0 ? impl_->failure.error : impl_->failure.openError;
        const std::string why = error != 0 ? std::string(": ") + std::strerror(error) : h5::errorSuffix();
        impl_->file = h5::Handle();
        const std::string temporary = impl_->output->temporaryPath();
        impl_->output->discard();
        throwOutput(path + ": cannot create the temporary file " + temporary + why);
    }
    try {
        impl_->checkWrites();
    } catch (...) {
        impl_->file.reset();
        impl_->output->discard();
        throw;
    }
}

DumpWriter::~DumpWriter() {
    if (!impl_ || impl_->committed) return;
    {
        h5::Lock lock;
        impl_->file.reset();
    }
    impl_->output->discard();
}

void DumpWriter::setFixedLengthStrings(bool fixed) { impl_->fixedLengthStrings = fixed; }

void DumpWriter::setRootAttribute(const std::string& name, const std::string& value) {
    setGroupAttribute("/", name, value);
}
void DumpWriter::setRootAttribute(const std::string& name, std::int64_t value) { setGroupAttribute("/", name, value); }
void DumpWriter::setRootAttribute(const std::string& name, const std::vector<std::int64_t>& value) {
    setGroupAttribute("/", name, value);
}

void DumpWriter::setGroupAttribute(const std::string& group, const std::string& name, const std::string& value) {
    impl_->stringAttribute(group, name, value);
}

void DumpWriter::setGroupAttribute(const std::string& group, const std::string& name, std::int64_t value) {
    h5::Lock lock;
    impl_->attribute(group, name, H5T_STD_I64LE, H5T_NATIVE_INT64, {}, &value);
}

void DumpWriter::setGroupAttribute(const std::string& group, const std::string& name, double value) {
    h5::Lock lock;
    impl_->attribute(group, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {}, &value);
}

void DumpWriter::setGroupAttribute(const std::string& group, const std::string& name,
                                   const std::vector<std::int64_t>& value) {
    h5::Lock lock;
    impl_->attribute(group, name, H5T_STD_I64LE, H5T_NATIVE_INT64, {hsize_t(value.size())}, value.data());
}

void DumpWriter::setGroupBoolAttribute(const std::string& group, const std::string& name, bool value) {
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
    std::vector<std::uint16_t> halves;
    if (storedAs == DType::Float16) {
        halves.resize(data.size());
        for (std::size_t i = 0; i < data.size(); ++i) halves[i] = float16::fromFloat(data[i]);
    }
    h5::Lock lock;
    h5::Handle half;
    const hid_t fileType = impl_->storedFloatType(path, storedAs, half);
    if (storedAs == DType::Float16) {
        h5::Handle memoryType = h5::makeHalfType(true);
        if (!memoryType.valid()) throwOutput(impl_->where(path) + ": HDF5 could not build the float16 type");
        impl_->writeDataset(path, shape, data.size(), fileType, memoryType.get(), halves.data());
        return;
    }
    impl_->writeDataset(path, shape, data.size(), fileType, H5T_NATIVE_FLOAT, data.data());
}

void DumpWriter::declareFloatDataset(const std::string& path, const std::vector<std::uint64_t>& shape, DType storedAs) {
    h5::Lock lock;
    h5::Handle half;
    impl_->dataset(path, shape, impl_->storedFloatType(path, storedAs, half));
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

void DumpWriter::writeStringDataset(const std::string& path, const std::vector<std::string>& values) {
    h5::Lock lock;
    h5::Handle type(H5Tcopy(H5T_C_S1));
    const std::vector<std::uint64_t> shape{values.size()};
    if (impl_->fixedLengthStrings) {
        std::size_t width = 1;
        for (const std::string& v : values) width = std::max(width, v.size());
        std::vector<char> packed(values.size() * width, '\0');
        for (std::size_t i = 0; i < values.size(); ++i)
            std::copy(values[i].begin(), values[i].end(), &packed[i * width]);
        H5Tset_size(type.get(), width);
        H5Tset_strpad(type.get(), H5T_STR_NULLPAD);
        H5Tset_cset(type.get(), H5T_CSET_ASCII);
        impl_->writeDataset(path, shape, values.size(), type.get(), type.get(), packed.data());
        return;
    }
    H5Tset_size(type.get(), H5T_VARIABLE);
    H5Tset_cset(type.get(), H5T_CSET_UTF8);
    std::vector<const char*> pointers;
    for (const std::string& v : values) pointers.push_back(v.c_str());
    impl_->writeDataset(path, shape, values.size(), type.get(), type.get(), pointers.data());
}

void DumpWriter::createColumn(const std::string& path, bool integer, std::uint64_t width, std::uint64_t chunkRows) {
    h5::Lock lock;
    impl_->requireOpen();
    h5::Handle parent = impl_->group(parentOf(path));
    const std::string name = baseName(path);
    if (H5Lexists(parent.get(), name.c_str(), H5P_DEFAULT) > 0) H5Ldelete(parent.get(), name.c_str(), H5P_DEFAULT);
    const int rank = width == 0 ? 1 : 2;
    const hsize_t dims[2] = {0, hsize_t(width)};
    const hsize_t maxDims[2] = {H5S_UNLIMITED, hsize_t(width)};
    const hsize_t chunk[2] = {hsize_t(std::max<std::uint64_t>(1, chunkRows)),
                              hsize_t(std::max<std::uint64_t>(1, width))};
    h5::Handle space(H5Screate_simple(rank, dims, maxDims));
    h5::Handle properties(H5Pcreate(H5P_DATASET_CREATE));
    if (!space.valid() || !properties.valid() || H5Pset_chunk(properties.get(), rank, chunk) < 0 ||
        H5Pset_shuffle(properties.get()) < 0 || H5Pset_deflate(properties.get(), 1) < 0)
        impl_->fail(impl_->where(normalised(path)) + ": cannot set up the column");
    h5::Handle created(H5Dcreate2(parent.get(), name.c_str(), integer ? H5T_STD_I32LE : H5T_IEEE_F64LE, space.get(),
                                  H5P_DEFAULT, properties.get(), H5P_DEFAULT));
    if (!created.valid()) impl_->fail(impl_->where(normalised(path)) + ": cannot create the column");
    impl_->checkWrites();
}

void DumpWriter::appendColumn(const std::string& path, const double* values, std::uint64_t rows) {
    h5::Lock lock;
    impl_->appendRows(path, H5T_NATIVE_DOUBLE, values, rows);
}

void DumpWriter::appendColumn(const std::string& path, const std::int32_t* values, std::uint64_t rows) {
    h5::Lock lock;
    impl_->appendRows(path, H5T_NATIVE_INT32, values, rows);
}

void DumpWriter::commit() {
    impl_->requireOpen();
    {
        h5::Lock lock;
        const bool closed = impl_->file.close();
        impl_->checkWrites();  // the destructor removes the temporary file
        if (!closed) {
            throwOutput(impl_->finalPath + ": closing " + impl_->output->temporaryPath() + " failed" +
                        h5::errorSuffix());
        }
    }
    impl_->output->commit();  // fsync and rename; Error(Output) "cannot write 'PATH': why"
    impl_->committed = true;
}

}  // namespace attnlens
