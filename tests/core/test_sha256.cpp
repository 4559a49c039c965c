// SHA-256 against the FIPS 180 example vectors and a multi-block file.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "attnlens/io/error.h"
#include "attnlens/io/sha256.h"
#include "core/test_support.h"

namespace attnlens {
namespace {

std::string hashOf(const std::string& text) { return sha256Hex(text.data(), text.size()); }

TEST(Sha256, EmptyInput) { EXPECT_EQ(hashOf(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"); }

TEST(Sha256, OneBlockMessageAbc) {
    EXPECT_EQ(hashOf("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Sha256, TwoBlockMessage448Bits) {
    EXPECT_EQ(hashOf("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
              "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256, Message896Bits) {
    EXPECT_EQ(hashOf("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopq"
                     "klmnopqrlmnopqrsmnopqrstnopqrstu"),
              "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}

TEST(Sha256, MillionTimesA) {
    EXPECT_EQ(hashOf(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, FileOfMillionTimesAMatchesVector) {
    test::TempDir dir;
    const std::string path = dir.file("a.bin");
    std::ofstream(path, std::ios::binary) << std::string(1000000, 'a');
    EXPECT_EQ(sha256File(path), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// 2.5 MiB + 77 bytes: spans three 1 MiB read blocks and ends in a partial 64-byte block.
// Expected digest computed independently with coreutils sha256sum on the same bytes.
TEST(Sha256, MultiBlockFileMatchesIndependentDigest) {
    std::vector<unsigned char> data(5 * (1u << 19) + 77);
    for (std::size_t i = 0; i < data.size(); ++i) {
        data[i] = (unsigned char)(((i * 31 + 7) ^ (i >> 11)) & 0xff);
    }
    test::TempDir dir;
    const std::string path = dir.file("pattern.bin");
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size()));
    const std::string expected = "d9d10424b9c29fa47680acc01c7b35321d7a369820ed1f95fc7414478904d697";
    EXPECT_EQ(sha256File(path), expected);
    EXPECT_EQ(sha256Hex(data.data(), data.size()), expected);
}

TEST(Sha256, MissingFileIsAnInputError) {
    test::TempDir dir;
    const std::string path = dir.file("absent.bin");
    const std::string message = test::errorMessage([&] { sha256File(path); });
    EXPECT_NE(message.find(path + ": cannot be read"), std::string::npos) << message;
}

TEST(Sha256, CancelledHashStopsWithCancelled) {
    test::TempDir dir;
    const std::string path = dir.file("a.bin");
    std::ofstream(path, std::ios::binary) << std::string(3u << 20, 'a');
    std::atomic<bool> cancel{true};
    try {
        sha256File(path, &cancel);
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Cancelled);
    }
    cancel = false;
    EXPECT_EQ(sha256File(path, &cancel), sha256File(path));
}

}  // namespace
}  // namespace attnlens
