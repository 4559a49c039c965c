#pragma once
// Per-record detail of large studies as an HDF5 table of columns (`analyze --records hdf5`,
// resources/format.md "Record tables"): one row per (image, layer, head, paradigm) with the
// record's scalar statistics and magnitude curves, written in blocks while the analysis runs and
// copied block by block by merge. About 0.1 of the JSON record's size once compressed; the JSON
// records keep what a table row leaves out (singular values, window ranks, per-channel branch
// statistics, per-query maps).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attnlens/analysis/dump_analysis.h"

namespace attnlens {

// One column: its name, type (int32 or float64), width (0: one value per row; else one value per
// magnitude factor) and definition. Float columns hold NaN where the record has no value.
struct RecordColumn {
    std::string name;
    bool integer = false;
    std::uint64_t width = 0;
    std::string definition;
};

// The columns of a report's table: fixed, except local_*_k<K> per AnalysisOptions::localK and the
// magnitude columns (present when magnitude is selected, one value per factor).
std::vector<RecordColumn> recordTableColumns(const AnalysisReport& header);
// The report's "record_detail" for a table: format, file (as given), records, group, columns with
// definitions and the key columns' meaning.
nlohmann::json recordTableJson(const std::vector<RecordColumn>& columns, const std::string& file, std::int64_t records);

// Writes a table while records arrive; nothing appears at `path` until commit() (a temporary file
// beside it, removed on destruction or by the CLI's signal handlers). Rows are buffered and
// appended kRowsPerBlock at a time.
class RecordTableWriter {
public:
    static constexpr std::size_t kRowsPerBlock = 8192;
    RecordTableWriter(const std::string& path, const AnalysisReport& header);
    ~RecordTableWriter();
    RecordTableWriter(const RecordTableWriter&) = delete;
    RecordTableWriter& operator=(const RecordTableWriter&) = delete;
    void add(const HeadRecord& record);
    void commit();
    std::int64_t rows() const { return rows_; }
    const std::vector<RecordColumn>& columns() const { return columns_; }

private:
    void flush();
    struct Impl;
    std::unique_ptr<Impl> impl_;
    std::vector<RecordColumn> columns_;
    std::int64_t rows_ = 0;
};

// What merge knows of one input table: its file and the report's selection, against which every
// row's keys are checked.
struct RecordTableInput {
    std::string file;          // the table
    std::string report;        // the report naming it (for messages)
    std::int64_t records = 0;  // the report's record count
    std::vector<int> images;   // the report's selected images
};
// What the report says of the heads a table's rows belong to: per layer position its heads, queries
// N and keys n (0: unknown, no bound from it); per paradigm whether its rows are softmax rows.
struct RecordTableShape {
    std::vector<int> layerHeads;
    std::vector<std::int64_t> layerQueries, layerKeys;
    std::vector<bool> softmaxParadigms;
};
// Copies the input tables, in order, into a new table at `output` (block by block: memory does not
// grow with the rows). Every table must have `columns` (the first report's) and the first table's
// paradigm and layer names; every row's image must be among its report's images, its layer
// position, head and paradigm within `shape`, its tokens the layer's N and every statistic within
// what its head allows (the bounds merge applies to JSON records and summary states).
// Error(Input) naming the file, row and column otherwise. Returns the rows written.
std::int64_t concatenateRecordTables(const std::vector<RecordTableInput>& inputs,
                                     const std::vector<RecordColumn>& columns, const RecordTableShape& shape,
                                     const std::string& output, const std::vector<std::string>& forbidden);
// The record table file a report at `reportPath` names by default: "<report without .json>.records.h5".
std::string defaultRecordTablePath(const std::string& reportPath);

}  // namespace attnlens
