#pragma once
// An attention paradigm = query transform + kernel phi + normalisation + parameters.
// Every parameter is explicit and recorded in exports (toJson), so a number in a report can always
// be traced to the exact function that produced it.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace attnlens {

enum class Kernel {
    Identity,    // phi(x) = x
    Relu,        // max(x, 0)
    Elu1,        // ELU(x) + 1
    LeakyRelu,   // x > 0 ? x : slope*x, slope = leakySlope (0.01)
    ReluAffine,  // ReLU(A x + b), A (d x d) and b ~ N(0, 1/d) from `seed` (InLine Fig. 1b)
    Focused,     // f_p(ReLU(x) + shift), f_p(x) = ||x|| / ||x^p|| * x^p elementwise (FLatten Eq. 6)
};

enum class Normalisation {
    Softmax,    // A_ij = exp(s q_i.k_j - max) / sum; no kernel
    Divide,     // A_ij = phi(q_i).phi(k_j) / (sum_m phi(q_i).phi(k_m) + N eps)           (FLatten)
    Subtract,   // A_ij = D_ij - z_i/N + 1/N, D_ij = c phi(q_i).phi(k_j), z_i = sum_m D_im  (InLine Eq. 4)
    Magnitude,  // A_ij = D_ij (1 + 1/(z_i + eps)) - z_i/N                                 (MALA Eq. 8-9)
};

enum class QueryTransform {
    None,
    L2,             // q / ||q||                                  (MALA Tab. 1)
    ConfuseRelu,    // ReLU(q) / ||ReLU(q)||                      (InLine Tab. 1, f1)
    ConfuseAffine,  // ReLU(A q + b) / ||ReLU(A q + b)||, seeded  (InLine Tab. 1, f2)
};

std::string_view toString(Kernel k);
std::string_view toString(Normalisation n);
std::string_view toString(QueryTransform t);
// Throw Error(Usage) naming the bad value and the accepted ones.
Kernel parseKernel(std::string_view s);
Normalisation parseNormalisation(std::string_view s);
QueryTransform parseQueryTransform(std::string_view s);

struct Paradigm {
    std::string name;
    Normalisation normalisation = Normalisation::Softmax;
    Kernel kernel = Kernel::Identity;
    QueryTransform transform = QueryTransform::None;
    double focusingPower = 3.0;          // Focused kernel power p
    double focusingShift = 1e-6;         // Focused kernel: ReLU(x) + shift before f_p
    double leakySlope = 0.01;            // LeakyRelu
    double eps = 1e-6;                   // Divide: N*eps in the denominator; Magnitude: z_i + eps
    std::optional<double> c;             // Subtract/Magnitude scale of D; unset = 1/(sqrt(d) N) (released code)
    std::optional<double> softmaxScale;  // Softmax logit scale; unset = the layer's `scale`
    std::uint64_t seed = 0;              // ReluAffine kernel and ConfuseAffine transform

    bool usesKernel() const { return normalisation != Normalisation::Softmax; }
    bool signedWeights() const {
        return normalisation == Normalisation::Subtract || normalisation == Normalisation::Magnitude;
    }
    // Full description with every parameter (unset optionals as the rule that fills them).
    nlohmann::json toJson() const;
    // Inverse of toJson; unknown keys or bad values throw Error(Usage).
    static Paradigm fromJson(const nlohmann::json& j);
    // Command-line form: a preset name ("mala"), or "NAME:key=value,key=value" with keys
    // norm, kernel, transform, p, shift, slope, eps, c, scale, seed, e.g.
    // "relu_c1:norm=subtract,kernel=relu,c=1". Throws Error(Usage).
    static Paradigm parse(std::string_view spec);
    bool operator==(const Paradigm&) const = default;
};

// softmax, linear_relu, linear_elu, focused, inline, inline_relu, mala, softmax_l2
const std::vector<Paradigm>& presetParadigms();
// A preset by name; Error(Usage) listing the presets when unknown.
const Paradigm& presetParadigm(std::string_view name);

}  // namespace attnlens
