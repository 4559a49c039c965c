// The record table (analysis/record_table.h, `analyze --records hdf5`): rows read back as the
// records they were written from, across blocks, and concatenation for merge checked row by row.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <random>
#include <string>

#include "attnlens/analysis/dump_analysis.h"
#include "attnlens/analysis/record_table.h"
#include "attnlens/analysis/report.h"
#include "attnlens/dump/column_table.h"
#include "attnlens/dump/dump.h"
#include "attnlens/dump/synth.h"
#include "attnlens/io/error.h"
#include "core/test_support.h"

namespace attnlens {
namespace {

using nlohmann::json;

// A header of `layers` layers of `heads` heads and the presets, for tables without a dump.
AnalysisReport tableHeader(int layers, int heads) {
    AnalysisReport h;
    for (int l = 0; l < layers; ++l) {
        LayerInfo layer;
        layer.name = "blocks." + std::to_string(l);
        layer.heads = heads;
        h.dump.layers.push_back(layer);
    }
    h.paradigms = presetParadigms();
    h.request.options.stats = StatSelection::parse("rank,local,entropy,confusion,magnitude");
    return h;
}

HeadRecord randomRecord(int image, int layer, int head, int paradigm, std::mt19937_64& rng, int factors) {
    std::uniform_real_distribution<double> u(0, 1);
    HeadRecord r{image, layer, head, paradigm, {}};
    r.stats.tokens = 17;
    r.stats.spectrum = SpectrumResult{};
    r.stats.spectrum->rank = int(rng() % 17);
    r.stats.spectrum->effectiveRank = 17 * u(rng);
    for (int k : {3, 5, 7}) {
        LocalMassResult l;
        l.k = k;
        l.mean = u(rng);
        l.uniformBaseline = u(rng);
        l.paperBaseline = k * k / 17.0;
        r.stats.local.push_back(l);
    }
    r.stats.entropy = EntropyResult{};
    r.stats.entropy->meanEntropy = u(rng);
    r.stats.confusion = ConfusionResult{};
    r.stats.confusion->confusedPairs = std::int64_t(rng() % 100);
    r.stats.magnitude = MagnitudeCurve{};
    for (int i = 0; i < factors; ++i) r.stats.magnitude->entropy.push_back(u(rng));
    return r;
}

TEST(RecordTable, RowsReadBackAsTheRecordsAcrossBlocks) {
    test::TempDir dir;
    const AnalysisReport header = tableHeader(3, 2);
    const int factors = header.request.options.magnitude.points;
    std::mt19937_64 rng(7);
    std::vector<HeadRecord> records;
    // More than two blocks of rows, so that appends and chunk boundaries are crossed.
    const std::size_t rows = 2 * RecordTableWriter::kRowsPerBlock + 123;
    for (std::size_t i = 0; i < rows; ++i)
        records.push_back(randomRecord(int(i / 48), int(i / 16 % 3), int(i / 8 % 2), int(i % 8), rng, factors));
    const std::string path = dir.file("t.records.h5");
    {
        RecordTableWriter writer(path, header);
        for (const HeadRecord& r : records) writer.add(r);
        EXPECT_FALSE(std::filesystem::exists(path));  // nothing before commit
        writer.commit();
        EXPECT_EQ(writer.rows(), std::int64_t(rows));
    }
    const ColumnTableReader table(path, "/records");
    ASSERT_EQ(table.rows(), rows);
    EXPECT_EQ(table.attribute("schema"), std::optional<std::string>("attnlens.records"));
    EXPECT_EQ(table.strings("layer_names"), (std::vector<std::string>{"blocks.0", "blocks.1", "blocks.2"}));
    ASSERT_EQ(table.columns().size(), recordTableColumns(header).size());
    std::vector<std::int32_t> image, rank;
    std::vector<double> local5, entropy, confused, curve, distance;
    table.read("image", 0, rows, image);
    table.read("rank", 0, rows, rank);
    table.read("local_mass_k5", 0, rows, local5);
    table.read("entropy_mean", 0, rows, entropy);
    table.read("confused_pairs", 0, rows, confused);
    table.read("magnitude_entropy", 0, rows, curve);
    table.read("total_variation_mean", 0, rows, distance);
    ASSERT_EQ(curve.size(), rows * std::size_t(factors));
    for (std::size_t i = 0; i < rows; ++i) {
        const HeadStatistics& s = records[i].stats;
        ASSERT_EQ(image[i], records[i].image);
        ASSERT_EQ(rank[i], s.spectrum->rank);
        ASSERT_EQ(local5[i], s.local[1].mean);
        ASSERT_EQ(entropy[i], s.entropy->meanEntropy);
        ASSERT_EQ(confused[i], double(s.confusion->confusedPairs));
        ASSERT_TRUE(std::isnan(distance[i]));  // no distance: NaN
        for (int f = 0; f < factors; ++f)
            ASSERT_EQ(curve[i * std::size_t(factors) + std::size_t(f)], s.magnitude->entropy[std::size_t(f)]);
    }
    // A block in the middle, an integer column read as doubles, and reads outside the rows.
    std::vector<double> middle;
    table.read("image", 8190, 5, middle);
    EXPECT_EQ(middle, (std::vector<double>{double(image[8190]), double(image[8191]), double(image[8192]),
                                           double(image[8193]), double(image[8194])}));
    EXPECT_THROW(table.read("image", rows - 2, 5, middle), Error);
    EXPECT_THROW(table.read("entropy_mean", 0, 1, rank), Error);  // a float column as integers
    EXPECT_THROW(table.read("no_such_column", 0, 1, middle), Error);
}

TEST(RecordTable, ConcatenationChecksEveryRowAgainstItsReport) {
    test::TempDir dir;
    const AnalysisReport header = tableHeader(2, 2);
    std::mt19937_64 rng(3);
    const auto writeTable = [&](const std::string& name, std::vector<int> images, int badHead = -1) {
        RecordTableWriter writer(dir.file(name), header);
        for (int b : images)
            for (int l = 0; l < 2; ++l)
                for (int h = 0; h < 2; ++h) writer.add(randomRecord(b, l, badHead >= 0 ? badHead : h, 0, rng, 13));
        writer.commit();
        return RecordTableInput{dir.file(name), name + ".json", std::int64_t(images.size() * 4), images};
    };
    const RecordTableInput a = writeTable("a.h5", {0, 1}), b = writeTable("b.h5", {2});
    const std::vector<RecordColumn> columns = recordTableColumns(header);
    const RecordTableShape shape{{2, 2}, {}, {}, std::vector<bool>(8, false)};
    EXPECT_EQ(concatenateRecordTables({a, b}, columns, shape, dir.file("ab.h5"), {}), 12);
    const ColumnTableReader ab(dir.file("ab.h5"), "/records");
    std::vector<std::int32_t> images;
    ab.read("image", 0, 12, images);
    EXPECT_EQ(images, (std::vector<std::int32_t>{0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2}));
    std::vector<double> ea, eb, eab;
    ColumnTableReader(a.file, "/records").read("entropy_mean", 0, 8, ea);
    ColumnTableReader(b.file, "/records").read("entropy_mean", 0, 4, eb);
    ab.read("entropy_mean", 0, 12, eab);
    ea.insert(ea.end(), eb.begin(), eb.end());
    EXPECT_EQ(eab, ea);

    const auto refused = [&](const std::vector<RecordTableInput>& inputs, const std::vector<int>& heads,
                             const std::string& message) {
        try {
            concatenateRecordTables(inputs, columns, RecordTableShape{heads, {}, {}, std::vector<bool>(8, false)},
                                    dir.file("bad.h5"), {});
            ADD_FAILURE() << "accepted: " << message;
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::Input);
            EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
        }
        EXPECT_FALSE(std::filesystem::exists(dir.file("bad.h5")));
    };
    RecordTableInput wrongImages = b;
    wrongImages.images = {5};
    refused({a, wrongImages}, {2, 2}, "row 0: image 2 is not among its report's images");
    RecordTableInput wrongCount = b;
    wrongCount.records = 5;
    refused({a, wrongCount}, {2, 2}, "4 rows where its report counts 5 records");
    refused({a, b}, {2, 1}, "head 1 is not a head of layer blocks.1");
    std::ofstream(dir.file("junk.h5")) << "not hdf5";
    RecordTableInput junk = b;
    junk.file = dir.file("junk.h5");
    refused({a, junk}, {2, 2}, "not an HDF5 file");
    // A truncated table.
    std::filesystem::copy_file(a.file, dir.file("cut.h5"));
    std::filesystem::resize_file(dir.file("cut.h5"), std::filesystem::file_size(a.file) / 2);
    RecordTableInput cut = a;
    cut.file = dir.file("cut.h5");
    try {
        ColumnTableReader t(cut.file, "/records");
        std::vector<double> all;
        for (const auto& c : t.columns()) t.read(c.name, 0, t.rows(), all);
        ADD_FAILURE() << "a truncated table was read";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Input) << e.what();
    }
}

}  // namespace
}  // namespace attnlens
