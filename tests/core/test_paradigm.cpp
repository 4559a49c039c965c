// Paradigm (core/attention/paradigm.h): the presets, the command-line and JSON forms and their
// errors. What a paradigm computes is tested in test_attention.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "attnlens/attention/paradigm.h"
#include "attnlens/io/error.h"

namespace attnlens {
namespace {

TEST(Paradigm, ParseJsonRoundTripAndErrors) {
    for (const auto& p : presetParadigms()) EXPECT_EQ(Paradigm::fromJson(p.toJson()), p);
    const Paradigm custom = Paradigm::parse("relu_c1:norm=subtract,kernel=relu,c=1,eps=0");
    EXPECT_EQ(custom.normalisation, Normalisation::Subtract);
    EXPECT_EQ(custom.kernel, Kernel::Relu);
    EXPECT_EQ(custom.c.value(), 1.0);
    EXPECT_EQ(Paradigm::fromJson(custom.toJson()), custom);
    const Paradigm malaEps0 = Paradigm::parse("mala:eps=0");
    EXPECT_EQ(malaEps0.kernel, Kernel::Elu1);
    EXPECT_EQ(malaEps0.eps, 0.0);

    auto message = [](auto f) {
        try {
            f();
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::Usage);
            return std::string(e.what());
        }
        return std::string("no error");
    };
    EXPECT_THAT(message([] { Paradigm::parse("sofmax"); }), ::testing::HasSubstr("unknown paradigm 'sofmax'"));
    EXPECT_THAT(message([] { Paradigm::parse("x:norm=divide,kernel=gelu"); }),
                ::testing::HasSubstr("unknown kernel 'gelu' (known: identity, relu"));
    EXPECT_THAT(message([] { Paradigm::parse("x:kernel=relu"); }), ::testing::HasSubstr("needs norm="));
    EXPECT_THAT(message([] { Paradigm::parse("x:norm=divide,p=abc"); }),
                ::testing::HasSubstr("p='abc' is not a finite number"));
    // Numbers read as options read them (issue 48 item 8: a leading '+' was refused here, taken there).
    EXPECT_DOUBLE_EQ(Paradigm::parse("x:norm=divide,kernel=focused,p=+2.5").focusingPower, 2.5);
    for (const char* bad : {"+-1", "inf", "1e400", "1;5"})
        EXPECT_THAT(message([&] { Paradigm::parse(std::string("x:norm=divide,p=") + bad); }),
                    ::testing::HasSubstr("is not a finite number"))
            << bad;
    EXPECT_THAT(message([] { Paradigm::parse("x:norm=softmax,kernel=relu"); }),
                ::testing::HasSubstr("softmax takes no kernel"));
}

// The presets docs/DEFINITIONS.md "Paradigms" lists, in its order, each what its name says.
TEST(Paradigm, PresetsAreTheDocumentedEightAndEachParsesToItself) {
    const std::vector<std::string> documented{"softmax", "linear_relu", "linear_elu", "focused",
                                              "inline",  "inline_relu", "mala",       "softmax_l2"};
    std::vector<std::string> names;
    for (const Paradigm& p : presetParadigms()) names.push_back(p.name);
    EXPECT_EQ(names, documented);
    for (const std::string& name : documented) {
        EXPECT_EQ(Paradigm::parse(name), presetParadigm(name)) << name;
        EXPECT_EQ(presetParadigm(name).name, name);
    }
    EXPECT_EQ(presetParadigm("linear_relu").normalisation, Normalisation::Divide);
    EXPECT_EQ(presetParadigm("linear_relu").kernel, Kernel::Relu);
    EXPECT_EQ(presetParadigm("inline").normalisation, Normalisation::Subtract);
    EXPECT_EQ(presetParadigm("inline").kernel, Kernel::Identity);
    EXPECT_EQ(presetParadigm("mala").normalisation, Normalisation::Magnitude);
    EXPECT_EQ(presetParadigm("mala").kernel, Kernel::Elu1);
    EXPECT_EQ(presetParadigm("focused").kernel, Kernel::Focused);
    EXPECT_EQ(presetParadigm("softmax_l2").transform, QueryTransform::L2);
}

TEST(Paradigm, AnUnknownPresetIsAUsageErrorListingThePresets) {
    try {
        presetParadigm("softmaxx");
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Usage);
        for (const Paradigm& p : presetParadigms()) EXPECT_THAT(e.what(), ::testing::HasSubstr(p.name));
    }
}

}  // namespace
}  // namespace attnlens
