#pragma once
// Reading tables of extendible columns (DumpWriter::createColumn): the record tables of
// `analyze --records hdf5` (resources/format.md "Record tables"). Rows are read in blocks into the
// caller's buffers, so a table of millions of rows is read in bounded memory.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace attnlens {

class ColumnTableReader {
public:
    struct Column {
        std::string name;
        bool integer = false;     // int32 (else float64)
        std::uint64_t width = 0;  // 0: one value per row; else [rows, width]
    };
    // Opens `group` of the HDF5 file at `path` read-only. Every dataset directly in the group is a
    // column; all must have the same number of rows, an integer or float type and rank 1 or 2.
    // Error(Input) naming the file and what is wrong.
    ColumnTableReader(const std::string& path, const std::string& group);
    ~ColumnTableReader();
    ColumnTableReader(const ColumnTableReader&) = delete;
    ColumnTableReader& operator=(const ColumnTableReader&) = delete;

    const std::vector<Column>& columns() const;
    const Column* column(const std::string& name) const;  // nullptr when there is none
    std::uint64_t rows() const;
    // A string attribute of the group, nullopt when it has none.
    std::optional<std::string> attribute(const std::string& name) const;
    // A rank-1 dataset of strings next to the columns (not a column), e.g. "paradigm_names".
    std::vector<std::string> strings(const std::string& dataset) const;
    // Rows [begin, begin + count) of a column, converted to double or int32 (an integer column
    // read as double is exact; a float column cannot be read as int32). `out` is resized to
    // count * max(width, 1). Error(Input) naming the file, column and rows.
    void read(const std::string& column, std::uint64_t begin, std::uint64_t count, std::vector<double>& out) const;
    void read(const std::string& column, std::uint64_t begin, std::uint64_t count,
              std::vector<std::int32_t>& out) const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace attnlens
