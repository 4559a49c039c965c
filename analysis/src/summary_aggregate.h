#pragma once
// The means and totals behind a report's summary (ReportSummary's per-paradigm, per-layer, per-head,
// per-label and per-model cells): adding records, merging cells exactly, and their state. Each
// built-in statistic's running sums are its own (StatisticSums, in statistic_<name>.cpp); a cell
// holds them in statisticTable()'s order beside the counts every record has.
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "attnlens/analysis/report.h"
#include "report_internal.h"
#include "statistic_parts.h"

namespace attnlens::report_detail {

// One cell: the records added to it, their flagged rows, each statistic's sums and the registered
// statistics' means. Non-finite values (null in a report) are left out of means.
struct Aggregate {
    std::int64_t records = 0, flagged = 0;
    // True when a merged summary state predates a yardstick (admissible keys, |A|, far pairs): its
    // means would cover only some records, so the summary gives null for them.
    bool yardsticksIncomplete = false;
    std::vector<std::unique_ptr<StatisticSums>> sums;  // statisticTable()'s order
    std::map<std::string, FiniteMean> registered;      // registered_statistics.h, by key

    Aggregate() {
        for (const StatisticParts* parts : statisticTable()) sums.push_back(parts->makeSums());
    }
    Aggregate(const Aggregate& o)
        : records(o.records),
          flagged(o.flagged),
          yardsticksIncomplete(o.yardsticksIncomplete),
          registered(o.registered) {
        for (const auto& s : o.sums) sums.push_back(s->clone());
    }
    Aggregate& operator=(const Aggregate& o) {
        if (this != &o) *this = Aggregate(o);
        return *this;
    }
    Aggregate(Aggregate&&) noexcept = default;
    Aggregate& operator=(Aggregate&&) noexcept = default;

    void add(const HeadStatistics& s) {
        ++records;
        flagged += s.flaggedRows;
        for (const auto& [key, value] : s.registered) registered[key].add(value);
        for (const auto& sum : sums) sum->add(s);
    }

    // Adds another cell: the same as adding its records here.
    void merge(const Aggregate& o) {
        records += o.records;
        flagged += o.flagged;
        yardsticksIncomplete = yardsticksIncomplete || o.yardsticksIncomplete;
        for (std::size_t i = 0; i < sums.size(); ++i) sums[i]->merge(*o.sums[i]);
        for (const auto& [key, mean] : o.registered) registered[key].merge(mean);
    }

    // Every running sum and count, for summary_state (exact merging of runs without JSON records).
    // withMagnitudeCurves: the magnitude's mean curves too (only the per-paradigm summary shows them).
    json state(bool withMagnitudeCurves) const {
        json j;
        j["records"] = records;
        j["flagged"] = flagged;
        j["means"] = json::object();
        j["per_k"] = json::object();
        for (const auto& sum : sums) sum->writeState(j, withMagnitudeCurves);
        if (yardsticksIncomplete) j["yardsticks_incomplete"] = true;
        if (!registered.empty()) {
            json r = json::object();
            for (const auto& [key, mean] : registered) r[key] = mean.state();
            j["registered"] = r;
        }
        return j;
    }

    // The inverse of state(); std::invalid_argument or json::exception on a malformed state.
    static Aggregate fromState(const json& j) {
        Aggregate a;
        a.records = j.at("records").get<std::int64_t>();
        a.flagged = j.at("flagged").get<std::int64_t>();
        a.yardsticksIncomplete = j.value("yardsticks_incomplete", false);
        for (const auto& sum : a.sums) sum->readState(j, a.yardsticksIncomplete);
        if (j.contains("registered"))  // states of reports without registered statistics have none
            for (const auto& [key, mean] : j["registered"].items()) a.registered[key] = FiniteMean::fromState(mean);
        if (a.records < 0 || a.flagged < 0) throw std::invalid_argument("a negative count");
        return a;
    }

    // The running mean behind a summary mean's field (nullptr: no value of window size k was added).
    const FiniteMean* meanOf(std::string_view field, int k) const {
        for (const auto& sum : sums)
            if (const FiniteMean* m = sum->meanOf(field, k, yardsticksIncomplete)) return m;
        return nullptr;
    }
    double mean(std::string_view field, int k) const {
        const FiniteMean* m = meanOf(field, k);
        return m ? m->mean() : std::numeric_limits<double>::quiet_NaN();
    }
    // The queries behind a summary mean taken over some of them (StatisticSums::coverageOf); {0, 0}
    // where none or unknown.
    ReportSummary::QueryCoverage coverageOf(std::string_view field) const {
        for (const auto& sum : sums)
            if (const auto c = sum->coverageOf(field)) return *c;
        return {};
    }

    json toJson() const {
        json j;
        j["records"] = records;
        j["flagged_rows_total"] = flagged;
        for (const auto& sum : sums) sum->writeSummary(j, yardsticksIncomplete);
        if (!registered.empty()) {
            json r = json::object();
            for (const auto& [key, mean] : registered) r[key] = mean.value();
            j["registered_means"] = r;
        }
        return j;
    }
};

}  // namespace attnlens::report_detail
