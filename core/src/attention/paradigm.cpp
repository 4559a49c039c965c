#include "attnlens/attention/paradigm.h"

#include <array>
#include <charconv>
#include <cmath>
#include <string>

#include "attnlens/io/error.h"
#include "attnlens/io/json_message.h"
#include "attnlens/io/name_table.h"
#include "attnlens/io/text.h"

namespace attnlens {
namespace {

constexpr double kMaxSeed = 9007199254740992.0;  // 2^53

constexpr NameTable<Kernel, 6> kKernelNames{{{{Kernel::Identity, "identity"},
                                              {Kernel::Relu, "relu"},
                                              {Kernel::Elu1, "elu1"},
                                              {Kernel::LeakyRelu, "leaky_relu"},
                                              {Kernel::ReluAffine, "relu_affine"},
                                              {Kernel::Focused, "focused"}}}};
constexpr NameTable<Normalisation, 4> kNormNames{{{{Normalisation::Softmax, "softmax"},
                                                   {Normalisation::Divide, "divide"},
                                                   {Normalisation::Subtract, "subtract"},
                                                   {Normalisation::Magnitude, "magnitude"}}}};
constexpr NameTable<QueryTransform, 4> kTransformNames{{{{QueryTransform::None, "none"},
                                                         {QueryTransform::L2, "l2"},
                                                         {QueryTransform::ConfuseRelu, "confuse_relu"},
                                                         {QueryTransform::ConfuseAffine, "confuse_affine"}}}};

constexpr const char* kDefaultCRule = "1/(sqrt(d) N)";
constexpr const char* kDefaultScaleRule = "layer scale";

double parseNumber(std::string_view text, std::string_view key, std::string_view spec) {
    const std::optional<double> value = finiteNumber(text);
    if (!value)
        throwUsage("paradigm '" + printableText(spec) + "': " + printableText(key) + "='" + printableText(text) +
                   "' is not a finite number");
    return *value;
}

std::vector<Paradigm> makePresets() {
    auto make = [](std::string name, Normalisation n, Kernel k, QueryTransform t = QueryTransform::None) {
        Paradigm p;
        p.name = std::move(name);
        p.normalisation = n;
        p.kernel = k;
        p.transform = t;
        return p;
    };
    return {
        make("softmax", Normalisation::Softmax, Kernel::Identity),
        make("linear_relu", Normalisation::Divide, Kernel::Relu),
        make("linear_elu", Normalisation::Divide, Kernel::Elu1),
        make("focused", Normalisation::Divide, Kernel::Focused),
        make("inline", Normalisation::Subtract, Kernel::Identity),
        make("inline_relu", Normalisation::Subtract, Kernel::Relu),
        make("mala", Normalisation::Magnitude, Kernel::Elu1),
        make("softmax_l2", Normalisation::Softmax, Kernel::Identity, QueryTransform::L2),
    };
}

void validate(const Paradigm& p, std::string_view context) {
    auto fail = [&](const std::string& what) { throwUsage("paradigm '" + printableText(context) + "': " + what); };
    if (p.name.empty()) fail("empty name");
    // The name becomes a JSON key and a terminal line: UTF-8 without control characters.
    if (const auto problem = textProblem(p.name)) fail("the name is not usable text: " + *problem);
    if (!(p.eps >= 0)) fail("eps must be >= 0");
    if (!(p.focusingPower > 0)) fail("p must be > 0");
    if (!(p.focusingShift >= 0)) fail("shift must be >= 0");
    if (p.c && !(*p.c > 0)) fail("c must be > 0");
    if (p.softmaxScale && !(*p.softmaxScale > 0)) fail("scale must be > 0");
    if (p.normalisation == Normalisation::Softmax && p.kernel != Kernel::Identity)
        fail("softmax takes no kernel (kernel=" + std::string(toString(p.kernel)) + ")");
}

}  // namespace

std::string_view toString(Kernel k) { return kKernelNames.name(k); }
std::string_view toString(Normalisation n) { return kNormNames.name(n); }
std::string_view toString(QueryTransform t) { return kTransformNames.name(t); }
Kernel parseKernel(std::string_view s) { return kKernelNames.parse(s, "kernel"); }
Normalisation parseNormalisation(std::string_view s) { return kNormNames.parse(s, "normalisation"); }
QueryTransform parseQueryTransform(std::string_view s) { return kTransformNames.parse(s, "query transform"); }

nlohmann::json Paradigm::toJson() const {
    nlohmann::json j;
    j["name"] = name;
    j["normalisation"] = toString(normalisation);
    j["kernel"] = toString(kernel);
    j["transform"] = toString(transform);
    j["focus_p"] = focusingPower;
    j["focus_shift"] = focusingShift;
    j["leaky_slope"] = leakySlope;
    j["eps"] = eps;
    if (c)
        j["c"] = *c;
    else
        j["c"] = kDefaultCRule;
    if (softmaxScale)
        j["softmax_scale"] = *softmaxScale;
    else
        j["softmax_scale"] = kDefaultScaleRule;
    j["seed"] = seed;
    return j;
}

Paradigm Paradigm::fromJson(const nlohmann::json& j) {
    if (!j.is_object()) throwUsage("paradigm description must be a JSON object");
    Paradigm p;
    std::string currentKey;  // for the message of a value of the wrong type
    try {
        for (const auto& [key, value] : j.items()) {
            currentKey = key;
            if (key == "name")
                p.name = value.get<std::string>();
            else if (key == "normalisation")
                p.normalisation = parseNormalisation(value.get<std::string>());
            else if (key == "kernel")
                p.kernel = parseKernel(value.get<std::string>());
            else if (key == "transform")
                p.transform = parseQueryTransform(value.get<std::string>());
            else if (key == "focus_p")
                p.focusingPower = value.get<double>();
            else if (key == "focus_shift")
                p.focusingShift = value.get<double>();
            else if (key == "leaky_slope")
                p.leakySlope = value.get<double>();
            else if (key == "eps")
                p.eps = value.get<double>();
            else if (key == "c") {
                if (value.is_number())
                    p.c = value.get<double>();
                else if (!(value.is_string() && value.get<std::string>() == kDefaultCRule))
                    throwUsage("paradigm JSON: c must be a number or \"" + std::string(kDefaultCRule) + "\"");
            } else if (key == "softmax_scale") {
                if (value.is_number())
                    p.softmaxScale = value.get<double>();
                else if (!(value.is_string() && value.get<std::string>() == kDefaultScaleRule))
                    throwUsage("paradigm JSON: softmax_scale must be a number or \"" + std::string(kDefaultScaleRule) +
                               "\"");
            } else if (key == "seed") {
                // Integers that a double holds exactly, as on the command line; a negative or
                // fractional seed would otherwise wrap or truncate silently.
                const bool integral = value.is_number_unsigned() ||
                                      (value.is_number_integer() && value.get<std::int64_t>() >= 0) ||
                                      (value.is_number_float() && value.get<double>() >= 0 &&
                                       value.get<double>() == std::floor(value.get<double>()));
                if (!integral || value.get<double>() > kMaxSeed)
                    throwUsage("paradigm JSON: seed must be an integer from 0 to 2^53, got " +
                               printableText(value.dump()));
                p.seed = value.is_number_float() ? std::uint64_t(value.get<double>()) : value.get<std::uint64_t>();
            } else
                throwUsage("paradigm JSON: unknown key '" + printableText(key) + "'");
        }
    } catch (const nlohmann::json::exception& e) {  // "type must be number, but is string"
        throwUsage("paradigm JSON: key '" + printableText(currentKey) + "': " + jsonErrorText(e));
    }
    validate(p, p.name);
    return p;
}

Paradigm Paradigm::parse(std::string_view spec) {
    const auto colon = spec.find(':');
    const std::string_view name = spec.substr(0, colon);
    if (name.empty()) throwUsage("paradigm '" + printableText(spec) + "': empty name");
    Paradigm p;
    bool fromPreset = false;
    for (const auto& preset : presetParadigms()) {
        if (preset.name == name) {
            p = preset;
            fromPreset = true;
        }
    }
    if (colon == std::string_view::npos) {
        if (!fromPreset) presetParadigm(name);  // throws the "unknown paradigm" message
        return p;
    }
    p.name = std::string(name);
    bool normGiven = fromPreset;
    std::string_view rest = spec.substr(colon + 1);
    while (!rest.empty()) {
        const auto comma = rest.find(',');
        const std::string_view item = rest.substr(0, comma);
        rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
        const auto eq = item.find('=');
        if (eq == std::string_view::npos)
            throwUsage("paradigm '" + printableText(spec) + "': expected key=value, got '" + printableText(item) + "'");
        const std::string_view key = item.substr(0, eq), value = item.substr(eq + 1);
        if (key == "norm" || key == "normalisation") {
            p.normalisation = parseNormalisation(value);
            normGiven = true;
        } else if (key == "kernel")
            p.kernel = parseKernel(value);
        else if (key == "transform")
            p.transform = parseQueryTransform(value);
        else if (key == "p")
            p.focusingPower = parseNumber(value, key, spec);
        else if (key == "shift")
            p.focusingShift = parseNumber(value, key, spec);
        else if (key == "slope")
            p.leakySlope = parseNumber(value, key, spec);
        else if (key == "eps")
            p.eps = parseNumber(value, key, spec);
        else if (key == "c")
            p.c = parseNumber(value, key, spec);
        else if (key == "scale")
            p.softmaxScale = parseNumber(value, key, spec);
        else if (key == "seed") {
            const double s = parseNumber(value, key, spec);
            if (s < 0 || s != std::floor(s) || s > kMaxSeed)
                throwUsage("paradigm '" + printableText(spec) + "': seed must be an integer from 0 to 2^53");
            p.seed = static_cast<std::uint64_t>(s);
        } else
            throwUsage("paradigm '" + printableText(spec) + "': unknown key '" + printableText(key) +
                       "' (known: norm, kernel, transform, p, shift, slope, eps, c, scale, seed)");
    }
    if (!normGiven)
        throwUsage("paradigm '" + printableText(spec) +
                   "': a custom paradigm needs norm=softmax|divide|subtract|magnitude");
    validate(p, spec);
    return p;
}

const std::vector<Paradigm>& presetParadigms() {
    static const std::vector<Paradigm> presets = makePresets();
    return presets;
}

const Paradigm& presetParadigm(std::string_view name) {
    for (const auto& p : presetParadigms())
        if (p.name == name) return p;
    std::string known;
    for (const auto& p : presetParadigms()) known += (known.empty() ? "" : ", ") + p.name;
    throwUsage("unknown paradigm '" + printableText(name) + "' (presets: " + known +
               "; or define one as NAME:norm=...,kernel=...)");
}

}  // namespace attnlens
