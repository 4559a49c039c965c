#pragma once
// Private helpers around the HDF5 C API: RAII identifiers, the process-wide lock, attribute
// readers that accept what h5py and other writers produce, and type descriptions for messages.
//
// Rule: every function here except describeDims() must be called with an h5::Lock held, and every
// Handle must be destroyed with the lock held (declare the Lock before the Handles in a scope).
#include <hdf5.h>

#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace attnlens::h5 {

// Holds hdf5Mutex(). Also switches off HDF5's automatic error printing for the calling thread:
// in a thread-safe HDF5 build the error-stack settings are per thread, so doing it once per
// process is not enough for worker threads. Re-entrant on one thread: a Lock taken while the
// thread already holds one (DumpReader::open reads the shared branch weights) leaves the mutex
// to the outer Lock.
class Lock {
public:
    Lock();
    ~Lock();
    Lock(const Lock&) = delete;
    Lock& operator=(const Lock&) = delete;

private:
    std::unique_lock<std::mutex> lock_;
};

// Replaces HDF5's deflate filter by one that refuses a chunk inflating beyond its declared size
// (bounded_deflate.cpp); the first Lock calls it. boundedDeflateInstalled(): whether it could.
void installBoundedDeflate();
bool boundedDeflateInstalled();

// While alive, deflate on the calling thread inflates a chunk of `dataset` to at most its declared
// size (its chunk dimensions times the stored element size of `fileType`); failure() is the
// filter's reason when a read failed because of it, else empty.
class ChunkReadLimit {
public:
    ChunkReadLimit(hid_t dataset, hid_t fileType);
    ~ChunkReadLimit();
    ChunkReadLimit(const ChunkReadLimit&) = delete;
    ChunkReadLimit& operator=(const ChunkReadLimit&) = delete;
    std::string failure() const;
};

// True while the calling thread holds a Lock (attnlens::insideHdf5() in dump.h).
bool lockHeldByThisThread() noexcept;

// Owns one HDF5 identifier of any kind and closes it with the matching H5*close.
class Handle {
public:
    Handle() = default;
    explicit Handle(hid_t id) : id_(id) {}
    ~Handle() { reset(); }
    Handle(Handle&& other) noexcept : id_(std::exchange(other.id_, H5I_INVALID_HID)) {}
    Handle& operator=(Handle&& other) noexcept {
        if (this != &other) {
            reset();
            id_ = std::exchange(other.id_, H5I_INVALID_HID);
        }
        return *this;
    }
    Handle(const Handle&) = delete;
    Handle& operator=(const Handle&) = delete;

    hid_t get() const { return id_; }
    bool valid() const { return id_ >= 0; }
    void reset();
    // Closes and reports whether the close succeeded (H5Fclose flushes, so it can fail).
    bool close();

private:
    hid_t id_ = H5I_INVALID_HID;
};

// The innermost description on the current thread's HDF5 error stack (e.g. "truncated file: eof =
// 1024, sufficient_eof = 4096"), or "" when the stack is empty. Call right after a failed call.
std::string lastErrorDetail();
// " (HDF5: <detail>)" or "" when there is none.
std::string errorSuffix();

// Whether `location` has a link `name`, for the reader: an HDF5 error while looking (damaged group
// metadata) is an input error naming `where`, never an absence; a link that leaves the file
// (external or user-defined) is refused, so a dump cannot make AttnLens read another file.
bool linkExists(hid_t location, const char* name, const std::string& where);

// The IEEE binary16 type in little-endian (file) or native (memory) byte order, built as h5py does:
// the 32-bit float with fields (15, 10, 5, 0, 10), size 2 and exponent bias 15.
Handle makeHalfType(bool nativeOrder);
// True for a 2-byte float type with exactly the IEEE binary16 layout (either byte order).
bool isIeeeHalf(hid_t type);
// True for IEEE binary16, binary32 or binary64 in either byte order, with no padding bits. HDF5
// describes a float by its bit fields and exponent bias, and converts any such description; a
// type with another layout would be read as garbage (and has over-read inside HDF5).
bool isIeeeFloat(hid_t type);

// "float16", "float32", "int32", "uint8", "string", "enum", "compound", ... for messages.
std::string describeType(hid_t type);
// Dimensions of a dataset's or attribute's dataspace; empty for scalar and null dataspaces.
std::vector<hsize_t> datasetDims(hid_t dataset);
std::vector<hsize_t> attributeDims(hid_t attribute);
// "[2, 3, 197, 64]": a dataspace's dimensions, a block of one, or integer attribute values (grid).
std::string describeDims(std::span<const hsize_t> dims);
std::string describeDims(std::span<const std::int64_t> values);

// Names a hyperslab read in messages: "<file>: reading <dataset> (<what>) failed: ...".
struct ReadTarget {
    const std::string& file;     // the dump's path
    const std::string& dataset;  // "/layers/blocks.0/q", "/images"
    const std::string& what;     // "image 3, head 1", "all channels"
};

// Reads the block [start, start + extent) of `dataset` into `buffer`, converted to `memoryType`.
// `buffer` is the caller's (reused) storage for exactly the block: the product of `extent` times
// the memory type's size. The dataset's rank and type class must match the read and the block must
// lie inside its shape; those and every HDF5 failure are Error(Input) naming `target`. The memory
// space has the block's shape: with a flat one HDF5 1.10 walks the selection element by element
// (~20x slower).
void readHyperslab(hid_t dataset, hid_t memoryType, std::span<const hsize_t> start, std::span<const hsize_t> extent,
                   std::span<unsigned char> buffer, const ReadTarget& target);

// Attribute readers. `where` names the object for messages ("file.h5: /layers/blocks.0" or
// "file.h5: root"); on a wrong type or shape they throw Error(Input)
// "<where> attribute 'name' must be ..., got ...". Type class, value count and stored size are
// checked before anything is read, so a damaged attribute cannot make HDF5 allocate its claimed
// size.
//
// Whether the attribute exists; an HDF5 error while looking is an input error, not an absence.
bool hasAttribute(hid_t object, const char* name, const std::string& where);
// Fixed-length (NUL- or space-padded) or variable-length strings, scalar or one element, at most
// kMaxAttributeStringBytes, valid UTF-8 without control characters (see attnlens/text.h).
std::string readStringAttribute(hid_t object, const char* name, const std::string& where);
constexpr std::size_t kMaxAttributeStringBytes = 4096;
// Integer arrays (grid) longer than this are refused before they are read.
constexpr std::size_t kMaxAttributeArrayValues = 64;
// Integer class only; scalar or one element.
std::int64_t readIntegerAttribute(hid_t object, const char* name, const std::string& where);
// One-dimensional integer array (or a scalar, returned as one element).
std::vector<std::int64_t> readIntegerArrayAttribute(hid_t object, const char* name, const std::string& where);
// Integer or float class; scalar or one element.
double readNumberAttribute(hid_t object, const char* name, const std::string& where);
// An integer 0/1 or an enum whose value is 0/1 (h5py stores numpy bools as enum {FALSE, TRUE}).
bool readBoolAttribute(hid_t object, const char* name, const std::string& where);

}  // namespace attnlens::h5
