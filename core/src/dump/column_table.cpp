// ColumnTableReader: the HDF5 side of record tables, with the dump reader's rules (types and ranks
// checked before a read, HDF5's errors turned into Error(Input), every call under the HDF5 lock).
#include "attnlens/dump/column_table.h"

#include <algorithm>
#include <map>

#include "attnlens/io/error.h"
#include "attnlens/io/text.h"
#include "hdf5_util.h"

namespace attnlens {

namespace {

// A column may not claim more rows than this (a hostile file's dimensions are never allocated).
constexpr std::uint64_t kMaxRows = std::uint64_t(1) << 40;
constexpr std::uint64_t kMaxWidth = 1 << 16;

// "/<name>" for messages (built by appending: GCC 12 warns wrongly about "/" + std::string&&).
std::string member(const std::string& name) {
    std::string out = "/";
    out += printableText(name);
    return out;
}

herr_t collectName(hid_t, const char* name, const H5L_info_t*, void* data) {
    static_cast<std::vector<std::string>*>(data)->push_back(name);
    return 0;
}

}  // namespace

struct ColumnTableReader::Impl {
    std::string path, group;
    h5::Handle file, groupHandle;
    std::vector<Column> columns;
    std::map<std::string, std::size_t> byName;
    std::uint64_t rows = 0;

    std::string where(const std::string& what) const { return printableText(path) + ": " + group + what; }
};

ColumnTableReader::ColumnTableReader(const std::string& path, const std::string& group)
    : impl_(std::make_unique<Impl>()) {
    impl_->path = path;
    impl_->group = group;
    h5::Lock lock;
    const htri_t isHdf5 = H5Fis_hdf5(path.c_str());
    if (isHdf5 <= 0)
        throwInput(printableText(path) + ": " +
                   (isHdf5 == 0 ? std::string("not an HDF5 file") : "cannot be read" + h5::errorSuffix()));
    h5::Handle access(H5Pcreate(H5P_FILE_ACCESS));
#if H5_VERSION_GE(1, 10, 7)
    H5Pset_file_locking(access.get(), true, true);
#endif
    impl_->file = h5::Handle(H5Fopen(path.c_str(), H5F_ACC_RDONLY, access.get()));
    if (!impl_->file.valid())
        throwInput(printableText(path) + ": HDF5 cannot open the file: it is truncated or corrupt" + h5::errorSuffix());
    if (!h5::linkExists(impl_->file.get(), group.c_str(), printableText(path)))
        throwInput(impl_->where(": no such group (not a record table)"));
    impl_->groupHandle = h5::Handle(H5Gopen2(impl_->file.get(), group.c_str(), H5P_DEFAULT));
    if (!impl_->groupHandle.valid()) throwInput(impl_->where(": cannot open the group") + h5::errorSuffix());
    std::vector<std::string> names;
    hsize_t index = 0;
    if (H5Literate(impl_->groupHandle.get(), H5_INDEX_NAME, H5_ITER_INC, &index, collectName, &names) < 0)
        throwInput(impl_->where(": the group's metadata is damaged") + h5::errorSuffix());
    bool first = true;
    for (const std::string& name : names) {
        H5O_info_t info;
        if (H5Oget_info_by_name(impl_->groupHandle.get(), name.c_str(), &info, H5P_DEFAULT) < 0)
            throwInput(impl_->where(member(name) + ": cannot be read") + h5::errorSuffix());
        if (info.type != H5O_TYPE_DATASET) continue;
        h5::Handle dataset(H5Dopen2(impl_->groupHandle.get(), name.c_str(), H5P_DEFAULT));
        h5::Handle type(dataset.valid() ? H5Dget_type(dataset.get()) : H5I_INVALID_HID);
        if (!type.valid()) throwInput(impl_->where(member(name) + ": cannot be read") + h5::errorSuffix());
        const H5T_class_t cls = H5Tget_class(type.get());
        if (cls == H5T_STRING) continue;  // names beside the columns (strings())
        const std::vector<hsize_t> dims = h5::datasetDims(dataset.get());
        const std::string shownName = member(name);
        if (cls != H5T_INTEGER && !(cls == H5T_FLOAT && h5::isIeeeFloat(type.get())))
            throwInput(impl_->where(shownName + ": dtype " + h5::describeType(type.get()) +
                                    " is not a column type (int32 or float64)"));
        if (dims.empty() || dims.size() > 2 || dims[0] > kMaxRows || (dims.size() == 2 && dims[1] > kMaxWidth))
            throwInput(impl_->where(shownName + ": shape " + h5::describeDims(dims) +
                                    " is not a column ([rows] or [rows, width])"));
        if (!first && dims[0] != impl_->rows)
            throwInput(impl_->where(shownName + ": " + std::to_string(dims[0]) + " rows where the other columns have " +
                                    std::to_string(impl_->rows)));
        first = false;
        impl_->rows = dims[0];
        impl_->byName[name] = impl_->columns.size();
        impl_->columns.push_back({name, cls == H5T_INTEGER, dims.size() == 2 ? std::uint64_t(dims[1]) : 0});
    }
}

ColumnTableReader::~ColumnTableReader() {
    if (!impl_) return;
    h5::Lock lock;
    impl_->groupHandle.reset();
    impl_->file.reset();
}

const std::vector<ColumnTableReader::Column>& ColumnTableReader::columns() const { return impl_->columns; }

const ColumnTableReader::Column* ColumnTableReader::column(const std::string& name) const {
    const auto it = impl_->byName.find(name);
    return it == impl_->byName.end() ? nullptr : &impl_->columns[it->second];
}

std::uint64_t ColumnTableReader::rows() const { return impl_->rows; }

std::optional<std::string> ColumnTableReader::attribute(const std::string& name) const {
    h5::Lock lock;
    if (!h5::hasAttribute(impl_->groupHandle.get(), name.c_str(), impl_->where(""))) return std::nullopt;
    return h5::readStringAttribute(impl_->groupHandle.get(), name.c_str(), impl_->where(""));
}

std::vector<std::string> ColumnTableReader::strings(const std::string& name) const {
    h5::Lock lock;
    const std::string shown = impl_->where(member(name));
    if (!h5::linkExists(impl_->groupHandle.get(), name.c_str(), impl_->where(""))) throwInput(shown + ": missing");
    h5::Handle dataset(H5Dopen2(impl_->groupHandle.get(), name.c_str(), H5P_DEFAULT));
    h5::Handle type(dataset.valid() ? H5Dget_type(dataset.get()) : H5I_INVALID_HID);
    if (!type.valid()) throwInput(shown + ": cannot be read" + h5::errorSuffix());
    const std::vector<hsize_t> dims = h5::datasetDims(dataset.get());
    if (H5Tget_class(type.get()) != H5T_STRING || H5Tis_variable_str(type.get()) <= 0 || dims.size() != 1 ||
        dims[0] > kMaxWidth)
        throwInput(shown + ": must be a rank-1 dataset of variable-length strings");
    std::vector<char*> pointers(dims[0], nullptr);
    h5::Handle memoryType(H5Tcopy(H5T_C_S1));
    H5Tset_size(memoryType.get(), H5T_VARIABLE);
    H5Tset_cset(memoryType.get(), H5Tget_cset(type.get()));
    if (H5Dread(dataset.get(), memoryType.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, pointers.data()) < 0)
        throwInput(shown + ": reading failed" + h5::errorSuffix());
    std::vector<std::string> out;
    out.reserve(pointers.size());
    for (char* p : pointers) out.emplace_back(p ? p : "");
    h5::Handle space(H5Dget_space(dataset.get()));
    H5Dvlen_reclaim(memoryType.get(), space.get(), H5P_DEFAULT, pointers.data());
    for (const std::string& s : out)
        if (const auto problem = textProblem(s)) throwInput(shown + ": " + *problem + ": " + printableText(s));
    return out;
}

namespace {

template <typename T>
void readRows(const ColumnTableReader::Column* column, hid_t group, const std::string& path, const std::string& where,
              const std::string& name, std::uint64_t begin, std::uint64_t count, std::uint64_t rows, hid_t memoryType,
              std::vector<T>& out) {
    if (!column) throwInput(where + ": no column '" + printableText(name) + "'");
    if (begin > rows || count > rows - begin)
        throwInput(where + member(name) + ": rows " + std::to_string(begin) + " to " + std::to_string(begin + count) +
                   " lie outside its " + std::to_string(rows) + " rows");
    const std::uint64_t width = std::max<std::uint64_t>(column->width, 1);
    out.resize(std::size_t(count * width));
    if (count == 0) return;
    h5::Handle dataset(H5Dopen2(group, name.c_str(), H5P_DEFAULT));
    if (!dataset.valid()) throwInput(where + member(name) + ": cannot be opened" + h5::errorSuffix());
    std::vector<hsize_t> start{hsize_t(begin)}, extent{hsize_t(count)};
    if (column->width > 0) {
        start.push_back(0);
        extent.push_back(hsize_t(column->width));
    }
    const std::string dataset_ = "/" + name, what = "rows " + std::to_string(begin) + "+" + std::to_string(count);
    h5::readHyperslab(dataset.get(), memoryType, start, extent,
                      std::span<unsigned char>(reinterpret_cast<unsigned char*>(out.data()), out.size() * sizeof(T)),
                      {path, dataset_, what});
}

}  // namespace

void ColumnTableReader::read(const std::string& name, std::uint64_t begin, std::uint64_t count,
                             std::vector<double>& out) const {
    h5::Lock lock;
    const Column* c = column(name);
    if (c && c->integer) {
        std::vector<std::int32_t> integers;
        readRows(c, impl_->groupHandle.get(), impl_->path, impl_->where(""), name, begin, count, impl_->rows,
                 H5T_NATIVE_INT32, integers);
        out.assign(integers.begin(), integers.end());
        return;
    }
    readRows(c, impl_->groupHandle.get(), impl_->path, impl_->where(""), name, begin, count, impl_->rows,
             H5T_NATIVE_DOUBLE, out);
}

void ColumnTableReader::read(const std::string& name, std::uint64_t begin, std::uint64_t count,
                             std::vector<std::int32_t>& out) const {
    h5::Lock lock;
    const Column* c = column(name);
    if (c && !c->integer) throwInput(impl_->where(member(name)) + ": a float column cannot be read as integers");
    readRows(c, impl_->groupHandle.get(), impl_->path, impl_->where(""), name, begin, count, impl_->rows,
             H5T_NATIVE_INT32, out);
}

}  // namespace attnlens
