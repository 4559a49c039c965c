// The private HDF5 helpers the dump reader is built on, tested directly: the one hyperslab read
// (h5::readHyperslab) with its checks and messages, the re-entrant lock, and describeDims.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "../../core/src/dump/hdf5_util.h"
#include "attnlens/dump/dump.h"
#include "core/test_support.h"

namespace attnlens {
namespace {

// /x: float32 [3, 2, 4] holding 0, 1, ..., 23 in row-major order.
class ReadHyperslab : public ::testing::Test {
protected:
    void SetUp() override {
        std::vector<float> values(24);
        for (std::size_t i = 0; i < values.size(); ++i) values[i] = float(i);
        DumpWriter writer(path_);
        writer.writeFloatDataset("/x", {3, 2, 4}, values, DType::Float32);
        writer.commit();
    }

    // Runs `read` with the lock held and /x open.
    void withDataset(const std::function<void(hid_t)>& read) const {
        h5::Lock lock;
        h5::Handle file(H5Fopen(path_.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
        ASSERT_TRUE(file.valid());
        h5::Handle dataset(H5Dopen2(file.get(), "x", H5P_DEFAULT));
        ASSERT_TRUE(dataset.valid());
        read(dataset.get());
    }

    std::string readError(std::vector<hsize_t> start, std::vector<hsize_t> extent, hid_t memoryType) const {
        std::string message;
        withDataset([&](hid_t dataset) {
            std::size_t count = 1;
            for (hsize_t e : extent) count *= std::size_t(e);
            std::vector<unsigned char> buffer(count * H5Tget_size(memoryType));
            message = test::errorMessage([&] {
                h5::readHyperslab(dataset, memoryType, start, extent, buffer, {path_, dataset_, what_});
            });
        });
        return message;
    }

    test::TempDir dir_;
    const std::string path_ = dir_.file("x.h5");
    const std::string dataset_ = "/x";
    const std::string what_ = "image 2";
};

TEST_F(ReadHyperslab, ReadsTheBlockIntoTheCallersBuffer) {
    withDataset([&](hid_t dataset) {
        std::vector<unsigned char> buffer(4 * sizeof(double));
        const hsize_t start[3] = {1, 0, 1}, extent[3] = {1, 2, 2};
        h5::readHyperslab(dataset, H5T_NATIVE_DOUBLE, start, extent, buffer, {path_, dataset_, what_});
        double values[4];
        std::memcpy(values, buffer.data(), sizeof values);
        EXPECT_EQ(values[0], 9.0);   // [1, 0, 1]
        EXPECT_EQ(values[1], 10.0);  // [1, 0, 2]
        EXPECT_EQ(values[2], 13.0);  // [1, 1, 1]
        EXPECT_EQ(values[3], 14.0);  // [1, 1, 2]
    });
}

TEST_F(ReadHyperslab, ABlockPastTheEndIsAnInputErrorNamingTheDataset) {
    EXPECT_EQ(readError({2, 0, 0}, {2, 2, 4}, H5T_NATIVE_FLOAT),
              path_ +
                  ": reading /x (image 2) failed: the block at [2, 0, 0] of shape [2, 2, 4] lies outside its "
                  "shape [3, 2, 4]");
}

TEST_F(ReadHyperslab, AStartPastTheEndIsAnInputError) {
    EXPECT_EQ(readError({4, 0, 0}, {0, 2, 4}, H5T_NATIVE_FLOAT),
              path_ +
                  ": reading /x (image 2) failed: the block at [4, 0, 0] of shape [0, 2, 4] lies outside its "
                  "shape [3, 2, 4]");
}

TEST_F(ReadHyperslab, AnotherRankIsAnInputError) {
    EXPECT_EQ(readError({0, 0}, {1, 2}, H5T_NATIVE_FLOAT),
              path_ +
                  ": reading /x (image 2) failed: the block at [0, 0] of shape [1, 2] lies outside its shape "
                  "[3, 2, 4]");
}

TEST_F(ReadHyperslab, AnotherTypeClassIsAnInputError) {
    EXPECT_EQ(readError({0, 0, 0}, {1, 1, 1}, H5T_NATIVE_INT64),
              path_ + ": reading /x (image 2) failed: its dtype float32 cannot be read as int64");
}

TEST(Hdf5Lock, IsReentrantOnOneThread) {
    EXPECT_FALSE(insideHdf5());
    {
        h5::Lock outer;
        {
            h5::Lock inner;  // would deadlock on a plain mutex
            EXPECT_TRUE(insideHdf5());
        }
        EXPECT_TRUE(insideHdf5());
    }
    EXPECT_FALSE(insideHdf5());
}

TEST(DescribeDims, ShapesAndIntegerValues) {
    EXPECT_EQ(h5::describeDims(std::vector<hsize_t>{2, 3, 197, 64}), "[2, 3, 197, 64]");
    EXPECT_EQ(h5::describeDims(std::vector<std::int64_t>{-1, 14}), "[-1, 14]");
    EXPECT_EQ(h5::describeDims(std::vector<hsize_t>{}), "[]");
}

}  // namespace
}  // namespace attnlens
