#include "hdf5_util.h"

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <cstring>
#include <limits>
#include <sstream>

#include "attnlens/dump/dump.h"
#include "attnlens/io/error.h"
#include "attnlens/io/text.h"

namespace attnlens {

std::mutex& hdf5Mutex() {
    static std::mutex mutex;
    return mutex;
}

namespace h5 {

namespace {
thread_local int tlsLockDepth = 0;
}  // namespace

Lock::Lock() {
    if (tlsLockDepth == 0) lock_ = std::unique_lock<std::mutex>(hdf5Mutex());
    ++tlsLockDepth;
    installBoundedDeflate();
    thread_local bool silenced = false;
    if (!silenced) {
        H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
        silenced = true;
    }
}

Lock::~Lock() { --tlsLockDepth; }

bool lockHeldByThisThread() noexcept { return tlsLockDepth > 0; }

}  // namespace h5

bool insideHdf5() noexcept { return h5::lockHeldByThisThread(); }

namespace h5 {

namespace {

herr_t closeById(hid_t id) {
    switch (H5Iget_type(id)) {
        case H5I_FILE:
            return H5Fclose(id);
        case H5I_GROUP:
            return H5Gclose(id);
        case H5I_DATASET:
            return H5Dclose(id);
        case H5I_ATTR:
            return H5Aclose(id);
        case H5I_DATATYPE:
            return H5Tclose(id);
        case H5I_DATASPACE:
            return H5Sclose(id);
        case H5I_GENPROP_LST:
            return H5Pclose(id);
        default:
            return H5Idec_ref(id) < 0 ? -1 : 0;
    }
}

herr_t innermostError(unsigned /*n*/, const H5E_error2_t* error, void* clientData) {
    auto* detail = static_cast<std::string*>(clientData);
    if (detail->empty() && error->desc != nullptr && error->desc[0] != '\0') {
        *detail = error->desc;
    }
    return 0;
}

[[noreturn]] void attributeError(const std::string& where, const char* name, const std::string& what) {
    throwInput(where + " attribute '" + name + "' " + what);
}

struct OpenAttribute {
    Handle attribute;
    Handle type;
    hssize_t points = 0;
};

OpenAttribute openAttribute(hid_t object, const char* name, const std::string& where) {
    OpenAttribute result;
    result.attribute = Handle(H5Aopen(object, name, H5P_DEFAULT));
    if (!result.attribute.valid()) {
        attributeError(where, name, "cannot be opened" + errorSuffix());
    }
    result.type = Handle(H5Aget_type(result.attribute.get()));
    Handle space(H5Aget_space(result.attribute.get()));
    if (!result.type.valid() || !space.valid()) {
        attributeError(where, name, "cannot be read" + errorSuffix());
    }
    const H5S_class_t spaceClass = H5Sget_simple_extent_type(space.get());
    if (spaceClass != H5S_SCALAR && spaceClass != H5S_SIMPLE && spaceClass != H5S_NULL) {
        attributeError(where, name, "has a damaged dataspace" + errorSuffix());
    }
    result.points = H5Sget_simple_extent_npoints(space.get());
    if (result.points < 0) attributeError(where, name, "has a damaged dataspace" + errorSuffix());
    return result;
}

// The bytes the file says it stores for the attribute must be what its type and value count need:
// a damaged message that claims more would make HDF5 allocate (and clear) the claimed size.
void requireStoredSize(const OpenAttribute& attribute, const char* name, const std::string& where) {
    const hsize_t stored = H5Aget_storage_size(attribute.attribute.get());
    const std::size_t typeSize = H5Tget_size(attribute.type.get());
    if (typeSize == 0) attributeError(where, name, "has a damaged type" + errorSuffix());
    const double expected = double(typeSize) * double(attribute.points);
    if (double(stored) != expected) {
        attributeError(where, name,
                       "is damaged: it stores " + std::to_string(stored) + " bytes but " +
                           std::to_string(attribute.points) + " value(s) of " + std::to_string(typeSize) +
                           " bytes need " + std::to_string(std::uint64_t(expected)));
    }
}

std::string checkedText(std::string text, const char* name, const std::string& where) {
    if (const auto problem = textProblem(text)) {
        attributeError(where, name, "is not usable text: " + *problem + " (\"" + printableText(text, 80) + "\")");
    }
    return text;
}

void requireSingleValue(const OpenAttribute& attribute, const char* name, const std::string& where) {
    if (attribute.points != 1) {
        attributeError(where, name, "must be a single value, got " + std::to_string(attribute.points) + " values");
    }
}

void readOrThrow(const OpenAttribute& attribute, hid_t memoryType, void* buffer, const char* name,
                 const std::string& where) {
    if (H5Aread(attribute.attribute.get(), memoryType, buffer) < 0) {
        attributeError(where, name, "cannot be read" + errorSuffix());
    }
}

// Reads a raw integer of `size` bytes in native order.
std::int64_t rawInteger(const unsigned char* bytes, std::size_t size, bool isSigned) {
    switch (size) {
        case 1: {
            std::uint8_t v;
            std::memcpy(&v, bytes, 1);
            return isSigned ? std::int64_t(std::int8_t(v)) : std::int64_t(v);
        }
        case 2: {
            std::uint16_t v;
            std::memcpy(&v, bytes, 2);
            return isSigned ? std::int64_t(std::int16_t(v)) : std::int64_t(v);
        }
        case 4: {
            std::uint32_t v;
            std::memcpy(&v, bytes, 4);
            return isSigned ? std::int64_t(std::int32_t(v)) : std::int64_t(v);
        }
        default: {
            std::int64_t v;
            std::memcpy(&v, bytes, 8);
            return v;
        }
    }
}

}  // namespace

void Handle::reset() { close(); }

bool Handle::close() {
    if (id_ < 0) return true;
    const herr_t status = closeById(id_);
    id_ = H5I_INVALID_HID;
    return status >= 0;
}

std::string lastErrorDetail() {
    std::string detail;
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, innermostError, &detail);
    return detail;
}

std::string errorSuffix() {
    const std::string detail = lastErrorDetail();
    return detail.empty() ? std::string() : " (HDF5: " + detail + ")";
}

Handle makeHalfType(bool nativeOrder) {
    Handle type(H5Tcopy(nativeOrder ? H5T_NATIVE_FLOAT : H5T_IEEE_F32LE));
    if (!type.valid() || H5Tset_fields(type.get(), 15, 10, 5, 0, 10) < 0 || H5Tset_size(type.get(), 2) < 0 ||
        H5Tset_ebias(type.get(), 15) < 0) {
        return Handle();
    }
    return type;
}

bool isIeeeHalf(hid_t type) {
    if (H5Tget_class(type) != H5T_FLOAT || H5Tget_size(type) != 2) return false;
    size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
    if (H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize) < 0) return false;
    return spos == 15 && epos == 10 && esize == 5 && mpos == 0 && msize == 10 && H5Tget_ebias(type) == 15 &&
           H5Tget_norm(type) == H5T_NORM_IMPLIED && H5Tget_precision(type) == 16 && H5Tget_offset(type) == 0;
}

std::string describeType(hid_t type) {
    const std::size_t bits = H5Tget_size(type) * 8;
    switch (H5Tget_class(type)) {
        case H5T_INTEGER:
            return std::string(H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int") + std::to_string(bits);
        case H5T_FLOAT: {
            if (!isIeeeFloat(type)) {
                size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
                H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize);
                return std::to_string(bits) + "-bit float with a non-IEEE layout (" + std::to_string(esize) +
                       " exponent bits at " + std::to_string(epos) + ", exponent bias " +
                       std::to_string(H5Tget_ebias(type)) + ", " + std::to_string(msize) + " mantissa bits at " +
                       std::to_string(mpos) + ", precision " + std::to_string(H5Tget_precision(type)) + ", offset " +
                       std::to_string(H5Tget_offset(type)) + ")";
            }
            return "float" + std::to_string(bits);
        }
        case H5T_STRING:
            return "string";
        case H5T_ENUM:
            return "enum";
        case H5T_COMPOUND:
            return "compound";
        case H5T_BITFIELD:
            return "bitfield" + std::to_string(bits);
        case H5T_OPAQUE:
            return "opaque";
        case H5T_REFERENCE:
            return "reference";
        case H5T_VLEN:
            return "variable-length sequence";
        case H5T_ARRAY:
            return "array";
        case H5T_TIME:
            return "time";
        default:
            return "unknown type";
    }
}

namespace {
std::vector<hsize_t> spaceDims(hid_t space) {
    if (space < 0) return {};
    const int rank = H5Sget_simple_extent_ndims(space);
    if (rank <= 0) return {};
    std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
    H5Sget_simple_extent_dims(space, dims.data(), nullptr);
    return dims;
}
}  // namespace

std::vector<hsize_t> datasetDims(hid_t dataset) {
    Handle space(H5Dget_space(dataset));
    return spaceDims(space.get());
}

std::vector<hsize_t> attributeDims(hid_t attribute) {
    Handle space(H5Aget_space(attribute));
    return spaceDims(space.get());
}

namespace {
template <class Integer>
std::string describeList(std::span<const Integer> values) {
    std::ostringstream out;
    out << '[';
    for (std::size_t i = 0; i < values.size(); ++i) out << (i ? ", " : "") << values[i];
    out << ']';
    return out.str();
}
}  // namespace

std::string describeDims(std::span<const hsize_t> dims) { return describeList(dims); }

std::string describeDims(std::span<const std::int64_t> values) { return describeList(values); }

void readHyperslab(hid_t dataset, hid_t memoryType, std::span<const hsize_t> start, std::span<const hsize_t> extent,
                   std::span<unsigned char> buffer, const ReadTarget& target) {
    assert(start.size() == extent.size());
    const auto failure = [&](const std::string& reason) {
        throwInput(target.file + ": reading " + target.dataset + " (" + target.what + ") failed: " + reason);
    };
    // HDF5 on damaged metadata (a chunk B-tree looping onto itself) either crashes (the fault handler's
    // message) or fails with an error such as "wrong B-tree signature", by chance of what memory holds:
    // both say the same thing to the user.
    const auto truncatedOrCorrupt = [&] {
        failure("the file is truncated or corrupt: its HDF5 metadata is damaged or its data is cut short" +
                errorSuffix());
    };

    Handle fileSpace(H5Dget_space(dataset));
    Handle fileType(H5Dget_type(dataset));
    if (!fileSpace.valid() || !fileType.valid()) truncatedOrCorrupt();
    if (H5Tget_class(fileType.get()) != H5Tget_class(memoryType)) {
        failure("its dtype " + describeType(fileType.get()) + " cannot be read as " + describeType(memoryType));
    }
    const std::vector<hsize_t> dims = spaceDims(fileSpace.get());
    bool inside = dims.size() == extent.size();
    for (std::size_t i = 0; inside && i < dims.size(); ++i) {
        inside = start[i] <= dims[i] && extent[i] <= dims[i] - start[i];
    }
    if (!inside) {
        failure("the block at " + describeDims(start) + " of shape " + describeDims(extent) +
                " lies outside its shape " + describeDims(dims));
    }
    [[maybe_unused]] std::size_t elements = 1;
    for (hsize_t e : extent) elements *= std::size_t(e);
    assert(buffer.size() == elements * H5Tget_size(memoryType));

    Handle memorySpace(H5Screate_simple(int(extent.size()), extent.data(), nullptr));
    const ChunkReadLimit limit(dataset, fileType.get());
    if (!memorySpace.valid() ||
        H5Sselect_hyperslab(fileSpace.get(), H5S_SELECT_SET, start.data(), nullptr, extent.data(), nullptr) < 0 ||
        H5Dread(dataset, memoryType, memorySpace.get(), fileSpace.get(), H5P_DEFAULT, buffer.data()) < 0) {
        if (const std::string why = limit.failure(); !why.empty()) failure(why);
        truncatedOrCorrupt();
    }
}

bool linkExists(hid_t location, const char* name, const std::string& where) {
    const htri_t exists = H5Lexists(location, name, H5P_DEFAULT);
    if (exists < 0) {
        throwInput(where + ": cannot tell whether '" + name + "' exists: the group's metadata is damaged" +
                   errorSuffix());
    }
    if (exists == 0) return false;
    H5L_info_t info;
    if (H5Lget_info(location, name, &info, H5P_DEFAULT) < 0) {
        throwInput(where + ": the link '" + name + "' cannot be read: the group's metadata is damaged" + errorSuffix());
    }
    if (info.type != H5L_TYPE_HARD && info.type != H5L_TYPE_SOFT) {
        throwInput(where + ": '" + name + "' is " +
                   (info.type == H5L_TYPE_EXTERNAL ? "an external link into another file" : "a user-defined link") +
                   "; AttnLens reads only data stored in the dump itself");
    }
    return true;
}

bool isIeeeFloat(hid_t type) {
    if (H5Tget_class(type) != H5T_FLOAT) return false;
    const std::size_t size = H5Tget_size(type);
    if (size == 2) return isIeeeHalf(type);
    struct Layout {
        std::size_t size, spos, epos, esize, msize, ebias;
    };
    static constexpr Layout layouts[] = {{4, 31, 23, 8, 23, 127}, {8, 63, 52, 11, 52, 1023}};
    for (const Layout& l : layouts) {
        if (size != l.size) continue;
        size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
        if (H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize) < 0) return false;
        H5T_pad_t lsb = H5T_PAD_ERROR, msb = H5T_PAD_ERROR;
        if (H5Tget_pad(type, &lsb, &msb) < 0) return false;
        const H5T_order_t order = H5Tget_order(type);
        return spos == l.spos && epos == l.epos && esize == l.esize && mpos == 0 && msize == l.msize &&
               H5Tget_ebias(type) == l.ebias && H5Tget_norm(type) == H5T_NORM_IMPLIED &&
               H5Tget_precision(type) == 8 * l.size && H5Tget_offset(type) == 0 && H5Tget_inpad(type) == H5T_PAD_ZERO &&
               lsb == H5T_PAD_ZERO && msb == H5T_PAD_ZERO && (order == H5T_ORDER_LE || order == H5T_ORDER_BE);
    }
    return false;
}

bool hasAttribute(hid_t object, const char* name, const std::string& where) {
    const htri_t exists = H5Aexists(object, name);
    if (exists < 0) {
        // HDF5 decodes every attribute message while looking, so the damaged one may be another.
        throwInput(where + ": its attributes cannot be read (looking for '" + name +
                   "'): the object's metadata is damaged" + errorSuffix());
    }
    return exists > 0;
}

std::string readStringAttribute(hid_t object, const char* name, const std::string& where) {
    OpenAttribute attribute = openAttribute(object, name, where);
    if (H5Tget_class(attribute.type.get()) != H5T_STRING) {
        attributeError(where, name, "must be a string, got " + describeType(attribute.type.get()));
    }
    requireSingleValue(attribute, name, where);
    const htri_t variable = H5Tis_variable_str(attribute.type.get());
    if (variable < 0) attributeError(where, name, "has a damaged string type" + errorSuffix());

    if (variable > 0) {
        // The value lives in the file's global heap; only the 16-byte reference is stored here.
        // HDF5 1.10 trusts the heap's sizes, so a damaged heap can crash or stall it; the CLI and
        // the desktop program open each new dump in a child process first (open_check.h).
        const hsize_t stored = H5Aget_storage_size(attribute.attribute.get());
        if (stored > 64) {
            attributeError(
                where, name,
                "is damaged: a variable-length string stores " + std::to_string(stored) + " bytes for its reference");
        }
        Handle memoryType(H5Tcopy(H5T_C_S1));
        H5Tset_size(memoryType.get(), H5T_VARIABLE);
        H5Tset_cset(memoryType.get(), H5Tget_cset(attribute.type.get()));
        char* value = nullptr;
        readOrThrow(attribute, memoryType.get(), &value, name, where);
        std::string result = value ? std::string(value, strnlen(value, kMaxAttributeStringBytes + 1)) : "";
        Handle space(H5Aget_space(attribute.attribute.get()));
        H5Dvlen_reclaim(memoryType.get(), space.get(), H5P_DEFAULT, &value);
        if (result.size() > kMaxAttributeStringBytes) {
            attributeError(where, name, "is longer than " + std::to_string(kMaxAttributeStringBytes) + " bytes");
        }
        return checkedText(std::move(result), name, where);
    }

    const std::size_t size = H5Tget_size(attribute.type.get());
    if (size > kMaxAttributeStringBytes) {
        attributeError(where, name,
                       "is a string of " + std::to_string(size) + " bytes, more than the limit of " +
                           std::to_string(kMaxAttributeStringBytes));
    }
    requireStoredSize(attribute, name, where);
    std::vector<char> buffer(size + 1, '\0');
    // Strings have no byte order: the file type serves as the memory type, bytes come back as is.
    readOrThrow(attribute, attribute.type.get(), buffer.data(), name, where);
    std::string result(buffer.data(), strnlen(buffer.data(), size));
    if (H5Tget_strpad(attribute.type.get()) == H5T_STR_SPACEPAD) {
        result.erase(result.find_last_not_of(' ') + 1);
    }
    return checkedText(std::move(result), name, where);
}

std::int64_t readIntegerAttribute(hid_t object, const char* name, const std::string& where) {
    OpenAttribute attribute = openAttribute(object, name, where);
    if (H5Tget_class(attribute.type.get()) != H5T_INTEGER) {
        attributeError(where, name, "must be an integer, got " + describeType(attribute.type.get()));
    }
    requireSingleValue(attribute, name, where);
    requireStoredSize(attribute, name, where);
    // Unsigned values past INT64_MAX would be clamped by the conversion to int64: the message then
    // names a value that is not in the file. Read them as what they are.
    if (H5Tget_sign(attribute.type.get()) == H5T_SGN_NONE && H5Tget_size(attribute.type.get()) >= 8) {
        std::uint64_t u = 0;
        readOrThrow(attribute, H5T_NATIVE_UINT64, &u, name, where);
        if (u > std::uint64_t(std::numeric_limits<std::int64_t>::max()))
            attributeError(where, name, "is " + std::to_string(u) + ", far beyond any count or size AttnLens reads");
        return std::int64_t(u);
    }
    std::int64_t value = 0;
    readOrThrow(attribute, H5T_NATIVE_INT64, &value, name, where);
    return value;
}

std::vector<std::int64_t> readIntegerArrayAttribute(hid_t object, const char* name, const std::string& where) {
    OpenAttribute attribute = openAttribute(object, name, where);
    if (H5Tget_class(attribute.type.get()) != H5T_INTEGER) {
        attributeError(where, name, "must be integers, got " + describeType(attribute.type.get()));
    }
    if (attributeDims(attribute.attribute.get()).size() > 1) {
        attributeError(
            where, name,
            "must be a one-dimensional array, got shape " + describeDims(attributeDims(attribute.attribute.get())));
    }
    if (attribute.points > hssize_t(kMaxAttributeArrayValues)) {
        attributeError(where, name,
                       "has " + std::to_string(attribute.points) + " values, more than the limit of " +
                           std::to_string(kMaxAttributeArrayValues));
    }
    requireStoredSize(attribute, name, where);
    std::vector<std::int64_t> values(std::size_t(std::max<hssize_t>(attribute.points, 0)));
    if (!values.empty() && H5Tget_sign(attribute.type.get()) == H5T_SGN_NONE &&
        H5Tget_size(attribute.type.get()) >= 8) {
        std::vector<std::uint64_t> u(values.size());
        readOrThrow(attribute, H5T_NATIVE_UINT64, u.data(), name, where);
        for (std::size_t i = 0; i < u.size(); ++i) {
            if (u[i] > std::uint64_t(std::numeric_limits<std::int64_t>::max()))
                attributeError(where, name,
                               "holds " + std::to_string(u[i]) + ", far beyond any count or size AttnLens reads");
            values[i] = std::int64_t(u[i]);
        }
        return values;
    }
    if (!values.empty()) readOrThrow(attribute, H5T_NATIVE_INT64, values.data(), name, where);
    return values;
}

double readNumberAttribute(hid_t object, const char* name, const std::string& where) {
    OpenAttribute attribute = openAttribute(object, name, where);
    const H5T_class_t typeClass = H5Tget_class(attribute.type.get());
    if (typeClass != H5T_INTEGER && typeClass != H5T_FLOAT) {
        attributeError(where, name, "must be a number, got " + describeType(attribute.type.get()));
    }
    if (typeClass == H5T_FLOAT && !isIeeeFloat(attribute.type.get())) {
        attributeError(where, name,
                       "must be an IEEE float16, float32 or float64 number, got " + describeType(attribute.type.get()));
    }
    requireSingleValue(attribute, name, where);
    requireStoredSize(attribute, name, where);
    double value = 0;
    readOrThrow(attribute, H5T_NATIVE_DOUBLE, &value, name, where);
    return value;
}

bool readBoolAttribute(hid_t object, const char* name, const std::string& where) {
    OpenAttribute attribute = openAttribute(object, name, where);
    const H5T_class_t typeClass = H5Tget_class(attribute.type.get());
    std::int64_t value = 0;
    if (typeClass == H5T_INTEGER) {
        requireSingleValue(attribute, name, where);
        requireStoredSize(attribute, name, where);
        readOrThrow(attribute, H5T_NATIVE_INT64, &value, name, where);
    } else if (typeClass == H5T_ENUM) {
        requireSingleValue(attribute, name, where);
        requireStoredSize(attribute, name, where);
        // HDF5 does not convert enums to integers; read the enum in native order and decode its
        // integer base type by hand.
        Handle memoryType(H5Tget_native_type(attribute.type.get(), H5T_DIR_ASCEND));
        Handle base(H5Tget_super(memoryType.get()));
        const std::size_t size = H5Tget_size(memoryType.get());
        if (!memoryType.valid() || !base.valid() || size > 8) {
            attributeError(where, name, "has an unsupported enum type");
        }
        unsigned char bytes[8] = {};
        readOrThrow(attribute, memoryType.get(), bytes, name, where);
        value = rawInteger(bytes, size, H5Tget_sign(base.get()) != H5T_SGN_NONE);
    } else {
        attributeError(where, name,
                       "must be a boolean (integer 0/1 or enum), got " + describeType(attribute.type.get()));
    }
    if (value != 0 && value != 1) {
        attributeError(where, name, "must be a boolean (0 or 1), got " + std::to_string(value));
    }
    return value == 1;
}

}  // namespace h5
}  // namespace attnlens
