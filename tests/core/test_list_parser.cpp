// The one parser of numbers, integers, index lists, layer lists and integer lists (list_parser.h):
// every message starts with the option's name as given.
#include "attnlens/dump/list_parser.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <limits>
#include <random>

#include <string>
#include <vector>

#include "attnlens/dump/dump.h"
#include "attnlens/io/error.h"

namespace attnlens {
namespace {

using ::testing::HasSubstr;

// The Error(Usage) message of `parse`, or "" when it does not throw one.
template <class Parse>
std::string usageError(Parse parse) {
    try {
        parse();
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Usage);
        return e.what();
    }
    return "";
}

DumpInfo threeLayers() {
    DumpInfo info;
    for (const char* name : {"blocks.0", "blocks.1", "blocks.2"}) {
        LayerInfo layer;
        layer.name = name;
        info.layers.push_back(layer);
    }
    return info;
}

TEST(ListParser, NumberIsFiniteDecimal) {
    EXPECT_DOUBLE_EQ(parseNumber("1e-3", "--tau"), 1e-3);
    EXPECT_DOUBLE_EQ(parseNumber("+0.5", "--tau"), 0.5);
    EXPECT_DOUBLE_EQ(parseNumber("-2", "--magnitude"), -2.0);
    for (const char* bad : {"", "abc", "1x", "inf", "nan", "1e400", "+-1", "1,5"})
        EXPECT_EQ(usageError([&] { parseNumber(bad, "--tau"); }),
                  "--tau: '" + std::string(bad) + "' is not a finite number")
            << bad;
}

TEST(ListParser, IntegerInRange) {
    EXPECT_EQ(parseInt("7", 1, 256, "--threads"), 7);
    EXPECT_EQ(parseInt("+7", 1, 256, "--threads"), 7);
    EXPECT_EQ(parseInt("-5", -10, 10, "--x"), -5);
    EXPECT_EQ(usageError([] { parseInt("0", 1, 256, "--threads"); }), "--threads: 0 is out of range [1, 256]");
    EXPECT_EQ(usageError([] { parseInt("abc", 1, 256, "--threads"); }),
              "--threads: 'abc' is not an integer (allowed: [1, 256])");
    EXPECT_EQ(usageError([] { parseInt("", 1, 256, "--threads"); }),
              "--threads: '' is not an integer (allowed: [1, 256])");
    EXPECT_EQ(usageError([] { parseInt("1e3", 1, 256, "--threads"); }),
              "--threads: '1e3' is not an integer (allowed: [1, 256])");
    // Beyond long long: out of range, never wrapped or clamped.
    EXPECT_EQ(usageError([] { parseInt("18446744073709551616", 1, 256, "--threads"); }),
              "--threads: 18446744073709551616 is out of range [1, 256]");
}

TEST(ListParser, IntegerListKeepsOrderAndDuplicates) {
    EXPECT_EQ(parseIntList("7,3,5,3", 1, 99, "--local-k"), (std::vector<int>{7, 3, 5, 3}));
    EXPECT_EQ(parseIntList(" 3, 5 ", 1, 99, "--local-k"), (std::vector<int>{3, 5}));
    EXPECT_EQ(usageError([] { parseIntList("", 1, 99, "--local-k"); }), "--local-k: empty list");
    EXPECT_EQ(usageError([] { parseIntList("3,,5", 1, 99, "--local-k"); }), "--local-k: empty item in '3,,5'");
    EXPECT_EQ(usageError([] { parseIntList("3,", 1, 99, "--local-k"); }), "--local-k: empty item in '3,'");
    EXPECT_EQ(usageError([] { parseIntList("3,0", 1, 99, "--local-k"); }), "--local-k: 0 is out of range [1, 99]");
    EXPECT_EQ(usageError([] { parseIntList("3,x", 1, 99, "--local-k"); }),
              "--local-k: 'x' is not an integer (allowed: [1, 99])");
    EXPECT_EQ(usageError([] { parseIntList("99999999999", 1, 99, "--k"); }),
              "--k: 99999999999 is out of range [1, 99]");
}

// A list's size is known before it is made (issue 47 item 4): overlapping and repeated ranges count
// once, and the size of a range over 2^31 declared images costs nothing to learn.
TEST(ListParser, IndexListSizeIsKnownBeforeTheList) {
    EXPECT_EQ(indexListSize("0-3,7,9", 10, "--images"), 6u);
    EXPECT_EQ(indexListSize("5,1-2,2,5,0-1", 10, "--images"), 4u);
    constexpr int kMax = std::numeric_limits<int>::max();
    EXPECT_EQ(indexListSize("0-2147483646,0-2147483646,5", kMax, "--images"), std::size_t(kMax));
    EXPECT_EQ(indexListSize("2147483646", kMax, "--images"), 1u);
    EXPECT_EQ(usageError([] { indexListSize("1-3", 3, "--images"); }), "--images: 3 is out of range (valid: 0-2)");
    // Adjacent and overlapping ranges merge; the list is the same as item by item.
    EXPECT_EQ(parseIndexList("0-2,3-4,4-6,9,8", 10, "--images"), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 8, 9}));
    EXPECT_EQ(parseIndexList("2147483640-2147483646", kMax, "--images").back(), kMax - 1);
}

// indexListText writes what parseIndexList reads back: checked on hand-built lists and on random
// subsets against a direct element-by-element comparison.
TEST(ListParser, IndexListTextReadsBackAsTheSameList) {
    EXPECT_EQ(indexListText({}), "");
    EXPECT_EQ(indexListText({7}), "7");
    EXPECT_EQ(indexListText({3, 0, 1, 2, 2, 9, 24, 25}), "0-3,9,24-25");
    EXPECT_EQ(indexListText({0, 2, 4}), "0,2,4");
    constexpr int kMax = std::numeric_limits<int>::max();
    EXPECT_EQ(indexListText({kMax - 1, kMax - 2}), "2147483645-2147483646");
    std::mt19937 random(47);
    for (int trial = 0; trial < 200; ++trial) {
        std::vector<int> subset;
        for (int i = 0; i < 60; ++i)
            if (random() % 3 != 0) subset.push_back(i);
        if (subset.empty()) continue;
        EXPECT_EQ(parseIndexList(indexListText(subset), 60, "--images"), subset) << indexListText(subset);
    }
}

TEST(ListParser, IndexListRangesSortedWithoutDuplicates) {
    EXPECT_EQ(parseIndexList("0-3,7,9", 10, "--images"), (std::vector<int>{0, 1, 2, 3, 7, 9}));
    EXPECT_EQ(parseIndexList("5,1-2,2,5", 10, "--images"), (std::vector<int>{1, 2, 5}));
    EXPECT_EQ(parseIndexList("4-4", 5, "--heads"), (std::vector<int>{4}));
    EXPECT_EQ(usageError([] { parseIndexList("", 3, "--images"); }), "--images: empty list");
    EXPECT_EQ(usageError([] { parseIndexList("0,,1", 3, "--images"); }), "--images: empty item in '0,,1'");
    EXPECT_EQ(usageError([] { parseIndexList("7", 3, "--images"); }), "--images: 7 is out of range (valid: 0-2)");
    EXPECT_EQ(usageError([] { parseIndexList("1-3", 3, "--images"); }), "--images: 3 is out of range (valid: 0-2)");
    EXPECT_EQ(usageError([] { parseIndexList("5-2", 9, "--images"); }), "--images: range '5-2' is empty");
    EXPECT_EQ(usageError([] { parseIndexList("-1", 3, "--images"); }),
              "--images: '-1' in '-1' is neither an index nor a range A-B of non-negative integers");
    EXPECT_EQ(usageError([] { parseIndexList("0,1-", 3, "--images"); }),
              "--images: '1-' in '0,1-' is neither an index nor a range A-B of non-negative integers");
    EXPECT_EQ(usageError([] { parseIndexList("x", 3, "--heads"); }),
              "--heads: 'x' in 'x' is not a non-negative integer");
    EXPECT_EQ(usageError([] { parseIndexList("+1", 3, "--heads"); }),
              "--heads: '+1' in '+1' is not a non-negative integer");
    EXPECT_EQ(usageError([] { parseIndexList("99999999999999999999", 3, "--images"); }),
              "--images: 99999999999999999999 is out of range (valid: 0-2)");
}

TEST(ListParser, LayersByNameOrPosition) {
    const DumpInfo info = threeLayers();
    EXPECT_EQ(parseLayerList("blocks.2,0", info, "--layers"), (std::vector<int>{0, 2}));
    EXPECT_EQ(parseLayerList("0-1,blocks.1", info, "--layers"), (std::vector<int>{0, 1}));
    EXPECT_EQ(usageError([&] { parseLayerList("", info, "--layers"); }), "--layers: empty list");
    EXPECT_EQ(usageError([&] { parseLayerList("blocks.9", info, "--layers"); }),
              "--layers: no layer named 'blocks.9' (layers: blocks.0, blocks.1, blocks.2)");
    EXPECT_EQ(usageError([&] { parseLayerList("5", info, "--layers"); }), "--layers: 5 is out of range (valid: 0-2)");
    // The option's own name, not "--layers", for a single layer.
    EXPECT_EQ(parseLayer("blocks.1", info, "--layer"), 1);
    EXPECT_EQ(parseLayer("2", info, "--layer"), 2);
    EXPECT_EQ(usageError([&] { parseLayer("9", info, "--layer"); }), "--layer: 9 is out of range (valid: 0-2)");
    EXPECT_EQ(usageError([&] { parseLayer("0,1", info, "--layer"); }), "--layer: name one layer, got '0,1'");
    EXPECT_THAT(usageError([&] { parseLayer("x", info, "--layer"); }), HasSubstr("--layer: no layer named 'x'"));
}

TEST(ListParser, QuotedTextIsEscapedAndCut) {
    const std::string message = usageError([] { parseInt("\x1b" + std::string(300, 'a'), 0, 1, "--x"); });
    EXPECT_THAT(message, HasSubstr("... (301 bytes)"));
    EXPECT_EQ(message.find('\x1b'), std::string::npos);
}

}  // namespace
}  // namespace attnlens
