// local_branch: on layers with a local branch (a depthwise convolution beside A), the ranks and local
// mass of E_c = A + M_c, analysed with rank or local. Its entry in the statistic table
// (statistic_parts.h) and every part of it.
#include <algorithm>
#include <climits>

#include "merge_checks.h"
#include "report_internal.h"
#include "statistic_parts.h"

namespace attnlens {

namespace {

using detail::FiniteMean;
using nlohmann::json;
using report_detail::meanBranchShare;
using report_detail::meansFromState;
using report_detail::meansState;
using report_detail::mergeMeans;
using statistic_parts::Bound;
using statistic_parts::finiteOrNull;
using statistic_parts::kNoValue;
using statistic_parts::numberOrNaN;
using statistic_parts::Range;
using statistic_parts::spectrumFromJson;
using statistic_parts::vectorJson;

json branchChannelJson(const LocalBranchChannel& c, const std::vector<int>& ks) {
    json e;
    if (c.channel >= 0) {
        e["channel"] = c.channel;
        e["weight_channel"] = c.weightChannel;
    }
    if (c.spectrum) {
        const auto& sp = *c.spectrum;
        e["rank"] = sp.rank;
        e["effective_rank"] = finiteOrNull(sp.effectiveRank);
        e["size"] = sp.size;
        e["tolerance"] = finiteOrNull(sp.tolerance);
        e["method"] = sp.method;
        if (!sp.singularValues.empty()) e["singular_values"] = vectorJson(sp.singularValues);
        if (!sp.windowRanks.empty()) e["window_ranks"] = sp.windowRanks;
    }
    if (!c.localMass.empty()) {
        json l = json::array();
        for (std::size_t i = 0; i < c.localMass.size() && i < ks.size(); ++i)
            l.push_back({{"k", ks[i]},
                         {"mean", finiteOrNull(c.localMass[i])},
                         {"abs_fraction", finiteOrNull(c.localAbsFraction[i])}});
        e["local"] = l;
    }
    e["branch_share"] = finiteOrNull(c.branchShare);
    return e;
}

json localBranchJson(const LocalBranchResult& b, const HeadStatistics& s, const std::vector<int>& ks) {
    json j;
    j["kind"] = b.kind;
    j["channels_analysed"] = b.channels.size();
    if (b.mean && b.mean->spectrum) {
        j["rank"] = {{"without", s.spectrum ? json(s.spectrum->rank) : json(nullptr)},
                     {"min", b.rankMin},
                     {"median", b.rankMedian},
                     {"max", b.rankMax},
                     {"mean_channel", b.mean->spectrum->rank},
                     {"size", b.mean->spectrum->size}};
    }
    if (!b.localMassWithout.empty()) {
        json l = json::array();
        for (std::size_t i = 0; i < b.localMassWithout.size() && i < ks.size(); ++i) {
            double lo = std::numeric_limits<double>::infinity(), hi = -lo;
            for (const auto& c : b.channels)
                if (std::isfinite(c.localMass[i])) {
                    lo = std::min(lo, c.localMass[i]);
                    hi = std::max(hi, c.localMass[i]);
                }
            l.push_back({{"k", ks[i]},
                         {"without", finiteOrNull(b.localMassWithout[i])},
                         {"with", b.mean ? finiteOrNull(b.mean->localMass[i]) : json(nullptr)},
                         {"with_min", finiteOrNull(lo)},
                         {"with_max", finiteOrNull(hi)},
                         {"abs_fraction_without", finiteOrNull(b.localAbsFractionWithout[i])},
                         {"abs_fraction_with", b.mean ? finiteOrNull(b.mean->localAbsFraction[i]) : json(nullptr)}});
        }
        j["local"] = l;
    }
    j["branch_share"] = {{"mean_over_channels", finiteOrNull(meanBranchShare(b))},
                         {"mean_channel", b.mean ? finiteOrNull(b.mean->branchShare) : json(nullptr)}};
    json channels = json::array();
    for (const auto& c : b.channels) channels.push_back(branchChannelJson(c, ks));
    j["channels"] = std::move(channels);
    if (b.mean) j["mean_channel"] = branchChannelJson(*b.mean, ks);
    return j;
}

LocalBranchChannel branchChannelFromJson(const json& j) {
    LocalBranchChannel c;
    c.channel = j.value("channel", -1);
    c.weightChannel = j.value("weight_channel", -1);
    if (j.contains("rank")) c.spectrum = spectrumFromJson(j);
    if (j.contains("local"))
        for (const json& l : j["local"]) {
            c.localMass.push_back(numberOrNaN(l.at("mean")));
            c.localAbsFraction.push_back(numberOrNaN(l.at("abs_fraction")));
        }
    c.branchShare = numberOrNaN(j.at("branch_share"));
    return c;
}

LocalBranchResult localBranchFromJson(const json& j) {
    LocalBranchResult b;
    b.kind = j.at("kind").get<std::string>();
    for (const json& c : j.at("channels")) b.channels.push_back(branchChannelFromJson(c));
    if (j.contains("mean_channel")) b.mean = branchChannelFromJson(j["mean_channel"]);
    if (j.contains("rank")) {
        b.rankMin = j["rank"].at("min").get<int>();
        b.rankMax = j["rank"].at("max").get<int>();
        b.rankMedian = numberOrNaN(j["rank"].at("median"));
    }
    if (j.contains("local"))
        for (const json& l : j["local"]) {
            b.localMassWithout.push_back(numberOrNaN(l.at("without")));
            b.localAbsFractionWithout.push_back(numberOrNaN(l.at("abs_fraction_without")));
        }
    return b;
}

// The local branch: ranks of E_c, E_mean's share and local mass.
void addBranchColumns(std::vector<ColumnRule>& rules, const AnalysisOptions& options) {
    const auto branch = [](std::function<double(const LocalBranchResult&)> f) {
        return [f = std::move(f)](const HeadRecord& r) {
            return r.stats.localBranch ? f(*r.stats.localBranch) : kNoValue;
        };
    };
    const auto hasRank = [](const LocalBranchResult& b) { return b.mean && b.mean->spectrum; };
    rules.push_back(
        floatColumn("branch_rank_min", "least rank of E_c = A + M_c over the analysed channels",
                    branch([hasRank](const LocalBranchResult& b) { return hasRank(b) ? b.rankMin : kNoValue; })));
    rules.push_back(
        floatColumn("branch_rank_median", "median rank of E_c",
                    branch([hasRank](const LocalBranchResult& b) { return hasRank(b) ? b.rankMedian : kNoValue; })));
    rules.push_back(floatColumn("branch_rank_max", "largest rank of E_c", branch([hasRank](const LocalBranchResult& b) {
                                    return hasRank(b) ? b.rankMax : kNoValue;
                                })));
    rules.push_back(floatColumn("branch_rank_mean_channel", "rank of E_mean = A + mean_c M_c",
                                branch([hasRank](const LocalBranchResult& b) {
                                    return hasRank(b) ? double(b.mean->spectrum->rank) : kNoValue;
                                })));
    rules.push_back(
        floatColumn("branch_share_mean_channel", "mean |M row|_1 / (|A row|_1 + |M row|_1) of E_mean",
                    branch([](const LocalBranchResult& b) { return b.mean ? b.mean->branchShare : kNoValue; })));
    for (std::size_t i = 0; i < options.localK.size(); ++i) {
        const std::string k = std::to_string(options.localK[i]);
        rules.push_back(floatColumn("branch_local_mass_k" + k, "mean " + k + " x " + k + " local mass of E_mean",
                                    branch([i](const LocalBranchResult& b) {
                                        return b.mean && i < b.mean->localMass.size() ? b.mean->localMass[i] : kNoValue;
                                    })));
    }
}

json localBranchOptions(const AnalysisOptions& options) { return options.localBranch.toJson(); }

void writeLocalBranch(const HeadStatistics& s, const AnalysisOptions& options, json& record) {
    if (s.localBranch) record["local_branch"] = localBranchJson(*s.localBranch, s, options.localK);
}

void readLocalBranch(const json& record, HeadStatistics& s) {
    if (record.contains("local_branch")) s.localBranch = localBranchFromJson(record["local_branch"]);
}

// Merge's check: the branch's fields (schema definitions/record).
void checkLocalBranch(const report_detail::ReportChecker& check, const json& r, const RecordPlace& place) {
    if (!r.contains("local_branch")) return;
    const std::string where = place.where + ".local_branch";
    const json& b = check.object(r["local_branch"], where);
    check.string(check.field(b, "kind", where), where + ".kind");
    check.integer(check.field(b, "channels_analysed", where), where + ".channels_analysed", 0);
    const json& share = check.object(check.field(b, "branch_share", where), where + ".branch_share");
    check.numbers(share, where + ".branch_share", {"mean_over_channels", "mean_channel"});
    const json& channels = check.array(check.field(b, "channels", where), where + ".channels");
    for (std::size_t i = 0; i < channels.size(); ++i)
        check.branchChannel(channels[i], where + ".channels[" + std::to_string(i) + "]");
    if (b.contains("mean_channel")) check.branchChannel(b["mean_channel"], where + ".mean_channel");
    if (b.contains("rank")) {
        const json& k = check.object(b["rank"], where + ".rank");
        const json& without = check.field(k, "without", where + ".rank");
        if (!without.is_null()) check.integer(without, where + ".rank.without", 0);
        for (const char* key : {"min", "max", "mean_channel", "size"})
            check.integer(check.field(k, key, where + ".rank"), where + ".rank." + key, 0);
        check.numberOrNull(check.field(k, "median", where + ".rank"), where + ".rank.median");
    }
    if (b.contains("local"))
        check.localEntries(b["local"], where + ".local",
                           {"without", "with", "with_min", "with_max", "abs_fraction_without", "abs_fraction_with"});
}

// The local branch's running sums in a summary cell (records that carry one): the rank of A and of
// A + M per channel, the branch's share of the output, and the local masses without and with it.
class BranchSums : public StatisticSumsOf<BranchSums> {
public:
    void add(const HeadStatistics& s) override {
        if (!s.localBranch) return;
        const LocalBranchResult& b = *s.localBranch;
        ++records_;
        if (b.mean && b.mean->spectrum) {
            rankWithout_.add(s.spectrum ? double(s.spectrum->rank) : kNoValue);
            rankMedian_.add(b.rankMedian);
            rankMeanChannel_.add(double(b.mean->spectrum->rank));
            rankMin_ = std::min(rankMin_, b.rankMin);
            rankMax_ = std::max(rankMax_, b.rankMax);
        }
        // The branch's local masses are per AnalysisOptions::localK, as A's own (s.local).
        for (std::size_t i = 0; i < b.localMassWithout.size() && i < s.local.size(); ++i) {
            const int k = s.local[i].k;
            localWithout_[k].add(b.localMassWithout[i]);
            localWith_[k].add(b.mean ? b.mean->localMass[i] : kNoValue);
            absWithout_[k].add(b.localAbsFractionWithout[i]);
            absWith_[k].add(b.mean ? b.mean->localAbsFraction[i] : kNoValue);
        }
        share_.add(meanBranchShare(b));
    }
    void mergeSame(const BranchSums& o) {
        records_ += o.records_;
        rankMin_ = std::min(rankMin_, o.rankMin_);
        rankMax_ = std::max(rankMax_, o.rankMax_);
        for (auto [mine, theirs] : {std::pair{&rankWithout_, &o.rankWithout_},
                                    {&rankMedian_, &o.rankMedian_},
                                    {&rankMeanChannel_, &o.rankMeanChannel_},
                                    {&share_, &o.share_}})
            mine->merge(*theirs);
        for (auto [mine, theirs] : {std::pair{&localWithout_, &o.localWithout_},
                                    {&localWith_, &o.localWith_},
                                    {&absWithout_, &o.absWithout_},
                                    {&absWith_, &o.absWith_}})
            mergeMeans(*mine, *theirs);
    }
    void writeState(json& state, bool) const override {
        json& means = state["means"];
        means["branch_rank_without"] = rankWithout_.state();
        means["branch_rank_median"] = rankMedian_.state();
        means["branch_rank_mean_channel"] = rankMeanChannel_.state();
        means["branch_share"] = share_.state();
        json& perK = state["per_k"];
        perK["branch_local_without"] = meansState(localWithout_);
        perK["branch_local_with"] = meansState(localWith_);
        perK["branch_abs_without"] = meansState(absWithout_);
        perK["branch_abs_with"] = meansState(absWith_);
        state["branch_records"] = records_;
        state["branch_rank_min"] = rankMin_ == INT_MAX ? json(nullptr) : json(rankMin_);
        state["branch_rank_max"] = rankMax_ == INT_MIN ? json(nullptr) : json(rankMax_);
    }
    void readState(const json& state, bool&) override {
        const json& means = state.at("means");
        rankWithout_ = FiniteMean::fromState(means.at("branch_rank_without"));
        rankMedian_ = FiniteMean::fromState(means.at("branch_rank_median"));
        rankMeanChannel_ = FiniteMean::fromState(means.at("branch_rank_mean_channel"));
        share_ = FiniteMean::fromState(means.at("branch_share"));
        const json& perK = state.at("per_k");
        localWithout_ = meansFromState(perK.at("branch_local_without"));
        localWith_ = meansFromState(perK.at("branch_local_with"));
        absWithout_ = meansFromState(perK.at("branch_abs_without"));
        absWith_ = meansFromState(perK.at("branch_abs_with"));
        for (const auto* other : {&localWith_, &absWithout_, &absWith_})
            for (const auto& [k, mean] : localWithout_)
                if (!other->count(k)) throw std::invalid_argument("per_k lacks window size " + std::to_string(k));
        records_ = state.at("branch_records").get<std::int64_t>();
        rankMin_ = state.at("branch_rank_min").is_null() ? INT_MAX : state["branch_rank_min"].get<int>();
        rankMax_ = state.at("branch_rank_max").is_null() ? INT_MIN : state["branch_rank_max"].get<int>();
        if (records_ < 0) throw std::invalid_argument("a negative count");
    }
    void writeSummary(json& summary, bool) const override {
        if (records_ == 0) return;
        json b;
        b["records"] = records_;
        b["rank_without_mean"] = rankWithout_.value();
        b["rank_median_mean"] = rankMedian_.value();
        b["rank_mean_channel_mean"] = rankMeanChannel_.value();
        b["rank_min"] = rankMin_ == INT_MAX ? json(nullptr) : json(rankMin_);
        b["rank_max"] = rankMax_ == INT_MIN ? json(nullptr) : json(rankMax_);
        json l = json::object();
        for (const auto& [k, m] : localWithout_)
            l[std::to_string(k)] = {{"without", m.value()},
                                    {"with", localWith_.at(k).value()},
                                    {"abs_fraction_without", absWithout_.at(k).value()},
                                    {"abs_fraction_with", absWith_.at(k).value()}};
        b["local"] = l;
        b["branch_share_mean"] = share_.value();
        summary["local_branch"] = b;
    }
    const FiniteMean* meanOf(std::string_view field, int k, bool) const override {
        for (auto [name, mean] : {std::pair{"local_branch.rank_without_mean", &rankWithout_},
                                  {"local_branch.rank_median_mean", &rankMedian_},
                                  {"local_branch.rank_mean_channel_mean", &rankMeanChannel_},
                                  {"local_branch.branch_share_mean", &share_}})
            if (field == name) return mean;
        for (auto [name, perK] : {std::pair{"local_branch.local[k].without", &localWithout_},
                                  {"local_branch.local[k].with", &localWith_},
                                  {"local_branch.local[k].abs_fraction_without", &absWithout_},
                                  {"local_branch.local[k].abs_fraction_with", &absWith_}})
            if (field == name) {
                const auto it = perK->find(k);
                return it == perK->end() ? nullptr : &it->second;
            }
        return nullptr;
    }

private:
    std::int64_t records_ = 0;
    FiniteMean rankWithout_, rankMedian_, rankMeanChannel_, share_;
    int rankMin_ = INT_MAX, rankMax_ = INT_MIN;
    std::map<int, FiniteMean> localWithout_, localWith_, absWithout_, absWith_;
};

constexpr SummaryMean kLocalBranchMeans[] = {
    {"local_branch.rank_without_mean", "local_branch", "rank of A alone (records with the branch)"},
    {"local_branch.rank_median_mean", "local_branch", "median over channels of rank(A + M_c)"},
    {"local_branch.rank_mean_channel_mean", "local_branch", "rank of A + M averaged over channels"},
    {"local_branch.branch_share_mean", "local_branch", "the branch's share of a row's L1 mass, |M_c| / (|A| + |M_c|)"},
    {"local_branch.local[k].without", "local_branch", "k x k mass of A alone", true},
    {"local_branch.local[k].with", "local_branch", "k x k mass of A + M", true},
    {"local_branch.local[k].abs_fraction_without", "local_branch", "share of |A| in the k x k window", true},
    {"local_branch.local[k].abs_fraction_with", "local_branch", "share of |A + M| in the k x k window", true},
};

// What each of its values may be, in a summary state and a record-table column (statistic_bounds.h).
constexpr detail::StatisticBound kLocalBranchBounds[] = {
    {Bound::Mean, "branch_rank_without", nullptr, Range::Rank},
    {Bound::Mean, "branch_rank_median", "branch_rank_median", Range::Rank},
    {Bound::Mean, "branch_rank_mean_channel", "branch_rank_mean_channel", Range::Rank},
    {Bound::Mean, "branch_share", "branch_share_mean_channel", Range::Fraction},
    {Bound::TableOnly, nullptr, "branch_rank_min", Range::Rank},
    {Bound::TableOnly, nullptr, "branch_rank_max", Range::Rank},
    {Bound::PerK, "branch_abs_without", nullptr, Range::Fraction},
    {Bound::PerK, "branch_abs_with", nullptr, Range::Fraction},
};

// On layers with a branch, with rank or local: E_c = A + M_c beside A (three N x N copies), and their
// dense SVD for the rank.
void localBranchNeeds(const StatSelection& selection, bool, bool withBranch, DenseNeeds& needs) {
    needs.branch = withBranch && (selection.rank || selection.local);
    if (!needs.branch) return;
    needs.matrix = true;
    needs.denseSvd = needs.denseSvd || selection.rank;
    needs.copies += 3;
}

void computeLocalBranch(const HeadWork& w, HeadStatistics& s) {
    const AttentionLayout& g = w.geometry;
    // Spatial reduction: the branch's values are interpolated from the keys (format.md 1c).
    const LocalBranchGrid grid = g.reducedKeys() ? LocalBranchGrid::interpolated(g.queries, g.keys)
                                                 : LocalBranchGrid(g.queries, w.branch->windows);
    const StatSelection& selection = w.options.stats;
    s.localBranch = analyzeLocalBranch(w.a, w.status, grid, *w.branch, w.options.localBranch, w.options.spectrum,
                                       w.options.localK, selection.rank, selection.local);
}

}  // namespace

const StatisticParts kLocalBranchStatistic{
    {"local_branch", nullptr, "ranks and local mass of A plus the layer's local branch (with rank or local)"},
    &localBranchNeeds,
    &computeLocalBranch,
    &localBranchOptions,
    &writeLocalBranch,
    &readLocalBranch,
    &addBranchColumns,
    nullptr,
    []() -> std::unique_ptr<StatisticSums> { return std::make_unique<BranchSums>(); },
    &checkLocalBranch,
    {},
    kLocalBranchMeans,
    kLocalBranchBounds};

}  // namespace attnlens
