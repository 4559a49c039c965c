// Record tables (record_table.h): the columns, their definitions, and the writer and concatenation
// over core's extendible columns (DumpWriter::createColumn, ColumnTableReader).
#include "attnlens/analysis/record_table.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "attnlens/analysis/registered_statistics.h"
#include "attnlens/dump/column_table.h"
#include "attnlens/io/error.h"
#include "attnlens/io/output_path.h"
#include "attnlens/io/text.h"
#include "statistic_bounds.h"
#include "statistic_parts.h"

namespace attnlens {

ColumnRule integerColumn(std::string name, std::string definition, std::function<std::int32_t(const HeadRecord&)> f) {
    return {{std::move(name), true, 0, std::move(definition)}, std::move(f), {}};
}

ColumnRule floatColumn(std::string name, std::string definition, std::function<double(const HeadRecord&)> f) {
    return {{std::move(name), false, 0, std::move(definition)},
            {},
            [f = std::move(f)](const HeadRecord& r, double* out) { *out = f(r); }};
}

namespace {

constexpr const char* kGroup = "/records";
constexpr const char* kSchema = "attnlens.records";
constexpr std::int64_t kSchemaVersion = 1;
using statistic_parts::kNoValue;

// The record's place: image, layer, head, paradigm; its size and flagged rows.
void addIdentityColumns(std::vector<ColumnRule>& rules) {
    rules.push_back(integerColumn("image", "image index in the dump", [](const HeadRecord& r) { return r.image; }));
    rules.push_back(integerColumn("layer_position", "position of the layer in the dump (layer_names)",
                                  [](const HeadRecord& r) { return r.layer; }));
    rules.push_back(integerColumn("head", "head index within the layer", [](const HeadRecord& r) { return r.head; }));
    rules.push_back(integerColumn("paradigm", "index into paradigm_names (the report's paradigms)",
                                  [](const HeadRecord& r) { return r.paradigm; }));
    rules.push_back(integerColumn("tokens", "N, the queries (rows of A)",
                                  [](const HeadRecord& r) { return std::int32_t(r.stats.tokens); }));
    rules.push_back(integerColumn("flagged_rows", "rows of A with a non-finite value or no mass, left out",
                                  [](const HeadRecord& r) { return std::int32_t(r.stats.flaggedRows); }));
}

// Registered statistics (registered_statistics.h): one column each, NaN where not finite.
void addRegisteredColumns(std::vector<ColumnRule>& rules, const AnalysisOptions& options) {
    for (const std::string& key : options.stats.registered) {
        const RegisteredStatistic* r = findRegisteredStatistic(key);
        rules.push_back(floatColumn("registered_" + key, r ? r->definition : "a registered statistic",
                                    [key](const HeadRecord& rec) {
                                        for (const auto& [k, v] : rec.stats.registered)
                                            if (k == key) return v;
                                        return kNoValue;
                                    }));
    }
}

std::vector<ColumnRule> columnRules(const AnalysisReport& header) {
    const AnalysisOptions& options = header.request.options;
    std::vector<ColumnRule> rules;
    addIdentityColumns(rules);
    // Every statistic's single values in table order, then the curves (statistic_parts.h).
    for (const StatisticParts* parts : statisticTable())
        if (parts->columns) parts->columns(rules, options);
    for (const StatisticParts* parts : statisticTable())
        if (parts->curveColumns) parts->curveColumns(rules, options);
    addRegisteredColumns(rules, options);
    return rules;
}

std::string columnPath(const std::string& name) { return std::string(kGroup) + "/" + name; }

}  // namespace

std::vector<RecordColumn> recordTableColumns(const AnalysisReport& header) {
    std::vector<RecordColumn> out;
    for (ColumnRule& rule : columnRules(header)) out.push_back(std::move(rule.column));
    return out;
}

nlohmann::json recordTableJson(const std::vector<RecordColumn>& columns, const std::string& file,
                               std::int64_t records) {
    nlohmann::json cols = nlohmann::json::array();
    for (const RecordColumn& c : columns)
        cols.push_back({{"name", c.name},
                        {"dtype", c.integer ? "int32" : "float64"},
                        {"width", c.width},
                        {"definition", c.definition}});
    return {{"format", "hdf5"},
            {"file", file},
            {"group", kGroup},
            {"records", records},
            {"schema", kSchema},
            {"schema_version", kSchemaVersion},
            {"note",
             "one row per (image, layer, head, paradigm) record, in the order the analysis finished them; "
             "float columns hold NaN where the record has no value; paradigm_names and layer_names beside "
             "the columns name the key columns' indices"},
            {"columns", cols}};
}

std::string defaultRecordTablePath(const std::string& reportPath) {
    std::string base = reportPath;
    if (base.size() > 5 && base.compare(base.size() - 5, 5, ".json") == 0) base.resize(base.size() - 5);
    return base + ".records.h5";
}

struct RecordTableWriter::Impl {
    std::vector<ColumnRule> rules;
    DumpWriter writer;
    std::vector<std::vector<double>> floats;  // per column: buffered rows * width
    std::vector<std::vector<std::int32_t>> integers;
    std::size_t buffered = 0;
    explicit Impl(const std::string& path) : writer(path) {}
};

namespace {

void writeNames(DumpWriter& writer, const AnalysisReport& header) {
    std::vector<std::string> paradigms, layers;
    for (const Paradigm& p : header.paradigms) paradigms.push_back(p.name);
    for (const LayerInfo& l : header.dump.layers) layers.push_back(l.name);
    writer.writeStringDataset(columnPath("paradigm_names"), paradigms);
    writer.writeStringDataset(columnPath("layer_names"), layers);
}

void createColumns(DumpWriter& writer, const std::vector<RecordColumn>& columns) {
    for (const RecordColumn& c : columns)
        writer.createColumn(columnPath(c.name), c.integer, c.width, RecordTableWriter::kRowsPerBlock);
    writer.setGroupAttribute(kGroup, "schema", std::string(kSchema));
    writer.setGroupAttribute(kGroup, "schema_version", kSchemaVersion);
}

}  // namespace

RecordTableWriter::RecordTableWriter(const std::string& path, const AnalysisReport& header)
    : impl_(std::make_unique<Impl>(path)) {
    impl_->rules = columnRules(header);
    for (const ColumnRule& rule : impl_->rules) columns_.push_back(rule.column);
    createColumns(impl_->writer, columns_);
    writeNames(impl_->writer, header);
    impl_->floats.resize(columns_.size());
    impl_->integers.resize(columns_.size());
}

RecordTableWriter::~RecordTableWriter() = default;

void RecordTableWriter::add(const HeadRecord& record) {
    for (std::size_t c = 0; c < impl_->rules.size(); ++c) {
        const ColumnRule& rule = impl_->rules[c];
        if (rule.column.integer) {
            impl_->integers[c].push_back(rule.integerOf(record));
        } else {
            auto& values = impl_->floats[c];
            const std::size_t at = values.size();
            values.resize(at + std::max<std::uint64_t>(rule.column.width, 1));
            rule.valuesOf(record, values.data() + at);
        }
    }
    ++rows_;
    if (++impl_->buffered >= kRowsPerBlock) flush();
}

void RecordTableWriter::flush() {
    if (impl_->buffered == 0) return;
    for (std::size_t c = 0; c < columns_.size(); ++c) {
        const std::string path = columnPath(columns_[c].name);
        if (columns_[c].integer) {
            impl_->writer.appendColumn(path, impl_->integers[c].data(), impl_->buffered);
            impl_->integers[c].clear();
        } else {
            impl_->writer.appendColumn(path, impl_->floats[c].data(), impl_->buffered);
            impl_->floats[c].clear();
        }
    }
    impl_->buffered = 0;
}

void RecordTableWriter::commit() {
    flush();
    impl_->writer.commit();
}

namespace {

// The input tables, each opened and checked against its report before the output is created.
struct CheckedTables {
    std::vector<std::unique_ptr<ColumnTableReader>> tables;
    std::vector<std::string> paradigmNames, layerNames;
};

void checkTableColumns(const ColumnTableReader& table, const RecordTableInput& in,
                       const std::vector<RecordColumn>& columns, const std::string& shown) {
    if (table.attribute("schema") != std::optional<std::string>(kSchema))
        throwInput(shown + ": not an attnlens record table (no schema attribute \"" + kSchema + "\")");
    for (const RecordColumn& c : columns) {
        const ColumnTableReader::Column* have = table.column(c.name);
        if (!have || have->integer != c.integer || have->width != c.width)
            throwInput(shown + ": column '" + c.name +
                       "' is missing or has another type or width than the "
                       "report's record_detail says");
    }
    if (table.columns().size() != columns.size())
        throwInput(shown + ": " + std::to_string(table.columns().size()) + " columns where the report lists " +
                   std::to_string(columns.size()));
    if (std::int64_t(table.rows()) != in.records)
        throwInput(shown + ": " + std::to_string(table.rows()) + " rows where its report counts " +
                   std::to_string(in.records) + " records");
}

CheckedTables openCheckedTables(const std::vector<RecordTableInput>& inputs, const std::vector<RecordColumn>& columns,
                                const RecordTableShape& shape) {
    CheckedTables checked;
    for (const RecordTableInput& in : inputs) {
        const std::string shown =
            "merge: " + printableText(in.file) + " (the record table of " + printableText(in.report) + ")";
        auto table = std::make_unique<ColumnTableReader>(in.file, kGroup);
        checkTableColumns(*table, in, columns, shown);
        const auto p = table->strings("paradigm_names");
        const auto l = table->strings("layer_names");
        if (checked.tables.empty()) {
            checked.paradigmNames = p;
            checked.layerNames = l;
        } else if (p != checked.paradigmNames || l != checked.layerNames) {
            throwInput(shown + ": other paradigm or layer names than " + printableText(inputs[0].file));
        }
        if (checked.paradigmNames.size() != shape.softmaxParadigms.size() ||
            checked.layerNames.size() != shape.layerHeads.size())
            throwInput(shown + ": its paradigm and layer names do not match its report's");
        checked.tables.push_back(std::move(table));
    }
    return checked;
}

// Each column's range (statistic_bounds.h); columns without one (keys, labels of registered
// statistics, signed local masses) are copied as they are.
std::vector<std::optional<detail::StatisticRange>> columnRanges(const std::vector<RecordColumn>& columns) {
    std::vector<std::optional<detail::StatisticRange>> ranges;
    for (const RecordColumn& c : columns) {
        std::optional<detail::StatisticRange> range;
        for (const detail::StatisticBound& b : detail::statisticBounds()) {
            if (!b.tableColumn) continue;
            const std::string name = b.tableColumn;
            const bool perK = b.where == detail::StatisticBound::PerK;
            if (perK ? c.name.size() > name.size() && c.name.compare(0, name.size(), name) == 0 &&
                           c.name.find_first_not_of("0123456789", name.size()) == std::string::npos
                     : c.name == name)
                range = b.range;
        }
        ranges.push_back(range);
    }
    return ranges;
}

// Copies one input table into the output block by block, checking each row's keys (image, layer,
// head, paradigm, tokens), each value against its range and the parts against their wholes.
class TableBlockCopier {
public:
    TableBlockCopier(DumpWriter& writer, const std::vector<RecordColumn>& columns, const RecordTableShape& shape,
                     const CheckedTables& checked)
        : writer_(writer), columns_(columns), shape_(shape), checked_(checked), ranges_(columnRanges(columns)) {}

    std::int64_t copy(const ColumnTableReader& table, const RecordTableInput& input) {
        table_ = &table;
        input_ = &input;
        images_ = std::set<int>(input.images.begin(), input.images.end());
        std::int64_t written = 0;
        for (std::uint64_t begin = 0; begin < table.rows(); begin += kBlock) {
            const std::uint64_t count = std::min(kBlock, table.rows() - begin);
            checkKeys(begin, count);
            crossChecked_.clear();
            for (std::size_t ci = 0; ci < columns_.size(); ++ci) copyColumn(ci, begin, count);
            checkPartsWithinWholes(begin, count);
            written += std::int64_t(count);
        }
        return written;
    }

private:
    static constexpr std::uint64_t kBlock = 1 << 16;

    double known(const std::vector<std::int64_t>& sizes, std::size_t position) const {
        return position < sizes.size() ? double(sizes[position]) : 0.0;
    }
    std::string rowText(std::uint64_t row) const {
        return "merge: " + printableText(input_->file) + ": row " + std::to_string(row);
    }
    const std::string& layerName(std::int32_t position) const { return checked_.layerNames[std::size_t(position)]; }

    void checkKeys(std::uint64_t begin, std::uint64_t count) {
        const ColumnTableReader& table = *table_;
        table.read("image", begin, count, image_);
        table.read("layer_position", begin, count, layer_);
        table.read("head", begin, count, head_);
        table.read("paradigm", begin, count, paradigm_);
        table.read("tokens", begin, count, tokens_);
        const std::vector<int>& layerHeads = shape_.layerHeads;
        for (std::uint64_t i = 0; i < count; ++i) {
            const auto fail = [&](const std::string& column, std::int32_t value, const std::string& why) {
                throwInput(rowText(begin + i) + ": " + column + " " + std::to_string(value) + " " + why);
            };
            if (!images_.count(image_[i])) fail("image", image_[i], "is not among its report's images");
            if (layer_[i] < 0 || std::size_t(layer_[i]) >= layerHeads.size())
                fail("layer_position", layer_[i], "is not a layer of the dump");
            if (head_[i] < 0 || head_[i] >= layerHeads[std::size_t(layer_[i])])
                fail("head", head_[i], "is not a head of layer " + printableText(layerName(layer_[i])));
            if (paradigm_[i] < 0 || std::size_t(paradigm_[i]) >= shape_.softmaxParadigms.size())
                fail("paradigm", paradigm_[i], "is not one of the report's paradigms");
            const double queries = known(shape_.layerQueries, std::size_t(layer_[i]));
            if (queries > 0 && tokens_[i] != queries)
                fail("tokens", tokens_[i],
                     "is not the N = " + std::to_string(std::int64_t(queries)) + " queries of layer " +
                         printableText(layerName(layer_[i])));
        }
    }

    // A value (NaN passes: not finite, left out of means) within what its row's head allows.
    void checkValue(const RecordColumn& c, detail::StatisticRange range, std::uint64_t begin, std::uint64_t i,
                    double value) const {
        const std::size_t position = std::size_t(layer_[i]);
        const detail::HeadShape headShape{known(shape_.layerQueries, position), known(shape_.layerKeys, position),
                                          bool(shape_.softmaxParadigms[std::size_t(paradigm_[i])])};
        const detail::AllowedInterval allowed = detail::allowedInterval(range, headShape);
        if (!allowed.allows(value))
            throwInput(rowText(begin + i) + " (image " + std::to_string(image_[i]) + ", layer " +
                       printableText(checked_.layerNames[position]) + ", head " + std::to_string(head_[i]) +
                       ", paradigm " + printableText(checked_.paradigmNames[std::size_t(paradigm_[i])]) + "): " +
                       c.name + " " + (c.integer ? std::to_string(std::int64_t(value)) : nlohmann::json(value).dump()) +
                       " is impossible: " + allowed.because + " " + allowed.text());
    }

    void copyColumn(std::size_t ci, std::uint64_t begin, std::uint64_t count) {
        const RecordColumn& c = columns_[ci];
        const std::optional<detail::StatisticRange>& range = ranges_[ci];
        const std::uint64_t width = std::max<std::uint64_t>(c.width, 1);
        if (c.integer) {
            table_->read(c.name, begin, count, integers_);
            const bool rank = c.name == "rank" || c.name == "rank_bound";
            if (range)
                for (std::uint64_t i = 0; i < count; ++i) {
                    // -1: not computed (rank, rank_bound)
                    const double v = integers_[i] == -1 && rank ? kNoValue : double(integers_[i]);
                    checkValue(c, *range, begin, i, v);
                    if (rank) crossChecked_[c.name].push_back(v);
                }
            writer_.appendColumn(columnPath(c.name), integers_.data(), count);
        } else {
            table_->read(c.name, begin, count, floats_);
            if (range)
                for (std::uint64_t i = 0; i < count; ++i)
                    for (std::uint64_t w = 0; w < width; ++w) checkValue(c, *range, begin, i, floats_[i * width + w]);
            if (c.name == "confused_pairs" || c.name == "confused_pairs_far")
                crossChecked_[c.name].assign(floats_.begin(), floats_.begin() + std::ptrdiff_t(count));
            writer_.appendColumn(columnPath(c.name), floats_.data(), count);
        }
    }

    // rank <= rank_bound, and the far confused pairs are some of the confused pairs.
    void checkPartsWithinWholes(std::uint64_t begin, std::uint64_t count) const {
        for (const auto& [lower, upper] : {std::pair{"rank", "rank_bound"}, {"confused_pairs_far", "confused_pairs"}}) {
            const auto lo = crossChecked_.find(lower), hi = crossChecked_.find(upper);
            if (lo == crossChecked_.end() || hi == crossChecked_.end()) continue;
            for (std::uint64_t i = 0; i < count; ++i)
                if (lo->second[i] > hi->second[i] * (1 + 1e-9))
                    throwInput(rowText(begin + i) + ": " + lower + " " + nlohmann::json(lo->second[i]).dump() +
                               " exceeds " + upper + " " + nlohmann::json(hi->second[i]).dump() +
                               " (it is a part of it)");
        }
    }

    DumpWriter& writer_;
    const std::vector<RecordColumn>& columns_;
    const RecordTableShape& shape_;
    const CheckedTables& checked_;
    const std::vector<std::optional<detail::StatisticRange>> ranges_;
    const ColumnTableReader* table_ = nullptr;
    const RecordTableInput* input_ = nullptr;
    std::set<int> images_;
    std::vector<double> floats_;
    std::vector<std::int32_t> image_, layer_, head_, paradigm_, integers_, tokens_;
    std::map<std::string, std::vector<double>> crossChecked_;  // per block
};

}  // namespace

std::int64_t concatenateRecordTables(const std::vector<RecordTableInput>& inputs,
                                     const std::vector<RecordColumn>& columns, const RecordTableShape& shape,
                                     const std::string& output, const std::vector<std::string>& forbidden) {
    checkOutputPath(output, forbidden);
    const CheckedTables checked = openCheckedTables(inputs, columns, shape);
    DumpWriter writer(output);
    createColumns(writer, columns);
    writer.writeStringDataset(columnPath("paradigm_names"), checked.paradigmNames);
    writer.writeStringDataset(columnPath("layer_names"), checked.layerNames);
    TableBlockCopier copier(writer, columns, shape, checked);
    std::int64_t written = 0;
    for (std::size_t t = 0; t < checked.tables.size(); ++t) written += copier.copy(*checked.tables[t], inputs[t]);
    writer.commit();
    return written;
}

}  // namespace attnlens
