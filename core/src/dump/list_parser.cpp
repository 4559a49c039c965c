#include "attnlens/dump/list_parser.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <new>
#include <sstream>
#include <string>
#include <utility>

#include "attnlens/attention/token_layout.h"
#include "attnlens/dump/dump.h"
#include "attnlens/io/error.h"
#include "attnlens/io/text.h"

namespace attnlens {
namespace {

std::string_view trimmed(std::string_view text) {
    while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
    while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
    return text;
}

// The comma separated items of `text`, trimmed: "OPTION: empty list" for none, "OPTION: empty item
// in '1,,2'" for an empty one.
std::vector<std::string_view> splitItems(std::string_view text, std::string_view option) {
    if (trimmed(text).empty()) throwUsage(std::string(option) + ": empty list");
    std::vector<std::string_view> items;
    for (std::size_t start = 0;;) {
        const std::size_t comma = text.find(',', start);
        const std::string_view item = trimmed(text.substr(start, comma - start));
        if (item.empty()) throwUsage(std::string(option) + ": empty item in " + quotedText(text));
        items.push_back(item);
        if (comma == std::string_view::npos) return items;
        start = comma + 1;
    }
}

// One index of an index list (digits only: a sign would be read as a range).
int parseIndex(std::string_view item, std::string_view whole, int count, std::string_view option) {
    int value = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    const bool digits = !item.empty() && end == item.data() + item.size() && item[0] != '-';
    if (digits && ec == std::errc::result_out_of_range)  // more than int holds: never wrapped
        throwUsage(std::string(option) + ": " + printableText(item) + " is out of range (valid: 0-" +
                   std::to_string(count - 1) + ")");
    if (!digits || ec != std::errc())
        throwUsage(std::string(option) + ": " + quotedText(item) + " in " + quotedText(whole) +
                   " is not a non-negative integer");
    return value;
}

void sortUnique(std::vector<int>& values) {
    std::sort(values.begin(), values.end());
    values.erase(std::unique(values.begin(), values.end()), values.end());
}

// A leading '+' is read as a sign (std::from_chars takes only '-').
const char* afterPlus(std::string_view text) {
    return text.data() + (text.size() > 1 && text[0] == '+' && text[1] != '-' ? 1 : 0);
}

}  // namespace

double parseNumber(std::string_view text, std::string_view option) {
    const std::optional<double> value = finiteNumber(text);
    if (!value) throwUsage(std::string(option) + ": " + quotedText(text) + " is not a finite number");
    return *value;
}

int parseInt(std::string_view text, int min, int max, std::string_view option) {
    const std::string range = "[" + std::to_string(min) + ", " + std::to_string(max) + "]";
    const char* first = afterPlus(text);
    const char* last = text.data() + text.size();
    long long value = 0;
    const auto [end, ec] = std::from_chars(first, last, value);
    const bool digits = first != last && end == last;
    if (digits && ec == std::errc::result_out_of_range)
        throwUsage(std::string(option) + ": " + printableText(text) + " is out of range " + range);
    if (!digits || ec != std::errc())
        throwUsage(std::string(option) + ": " + quotedText(text) + " is not an integer (allowed: " + range + ")");
    if (value < min || value > max)
        throwUsage(std::string(option) + ": " + printableText(text) + " is out of range " + range);
    return int(value);
}

std::vector<int> parseIntList(std::string_view text, int min, int max, std::string_view option) {
    std::vector<int> values;
    for (const std::string_view item : splitItems(text, option)) values.push_back(parseInt(item, min, max, option));
    return values;
}

namespace {

// The ranges [lo, hi] of an index list, sorted and merged: a list's size is known before it is made.
std::vector<std::pair<int, int>> indexRanges(std::string_view text, int count, std::string_view option) {
    std::vector<std::pair<int, int>> ranges;
    for (const std::string_view item : splitItems(text, option)) {
        const auto dash = item.find('-');
        int lo = 0, hi = 0;
        if (dash == std::string_view::npos) {
            lo = hi = parseIndex(item, text, count, option);
        } else {
            if (dash == 0 || dash + 1 == item.size())
                throwUsage(std::string(option) + ": " + quotedText(item) + " in " + quotedText(text) +
                           " is neither an index nor a range A-B of non-negative integers");
            lo = parseIndex(item.substr(0, dash), text, count, option);
            hi = parseIndex(item.substr(dash + 1), text, count, option);
            if (hi < lo) throwUsage(std::string(option) + ": range " + quotedText(item) + " is empty");
        }
        if (hi >= count)
            throwUsage(std::string(option) + ": " + std::to_string(hi) + " is out of range (valid: 0-" +
                       std::to_string(count - 1) + ")");
        ranges.emplace_back(lo, hi);
    }
    std::sort(ranges.begin(), ranges.end());
    std::vector<std::pair<int, int>> merged;
    for (const auto& r : ranges) {
        if (!merged.empty() && std::int64_t(r.first) <= std::int64_t(merged.back().second) + 1)
            merged.back().second = std::max(merged.back().second, r.second);
        else
            merged.push_back(r);
    }
    return merged;
}

}  // namespace

std::size_t indexListSize(std::string_view text, int count, std::string_view option) {
    std::size_t size = 0;
    for (const auto& [lo, hi] : indexRanges(text, count, option)) size += std::size_t(std::int64_t(hi) - lo + 1);
    return size;
}

std::string indexListText(std::vector<int> indices) {
    std::sort(indices.begin(), indices.end());
    indices.erase(std::unique(indices.begin(), indices.end()), indices.end());
    std::string text;
    for (std::size_t i = 0; i < indices.size();) {
        std::size_t j = i;
        while (j + 1 < indices.size() && std::int64_t(indices[j + 1]) == std::int64_t(indices[j]) + 1) ++j;
        if (!text.empty()) text += ',';
        text += std::to_string(indices[i]);
        if (j > i) text += '-' + std::to_string(indices[j]);
        i = j + 1;
    }
    return text;
}

std::vector<int> parseIndexList(std::string_view text, int count, std::string_view option) {
    const std::vector<std::pair<int, int>> ranges = indexRanges(text, count, option);
    std::size_t size = 0;
    for (const auto& [lo, hi] : ranges) size += std::size_t(std::int64_t(hi) - lo + 1);
    std::vector<int> out;
    try {
        out.reserve(size);
    } catch (const std::bad_alloc&) {
        std::ostringstream gib;
        gib.precision(3);
        gib << double(size) * sizeof(int) / double(1ull << 30);
        throwInput(std::string(option) + ": " + quotedText(text) + " selects " + std::to_string(size) +
                   " indices, whose list alone needs " + gib.str() +
                   " GiB, more than this process may allocate; select fewer (shard a study: "
                   "docs/CLI.md \"Studies of many images\")");
    }
    for (const auto& [lo, hi] : ranges)
        for (std::int64_t v = lo; v <= hi; ++v) out.push_back(int(v));
    return out;
}

std::vector<int> parseLayerList(std::string_view text, const DumpInfo& info, std::string_view option) {
    std::vector<int> out;
    for (const std::string_view item : splitItems(text, option)) {
        bool byName = false;
        for (std::size_t i = 0; i < info.layers.size(); ++i)
            if (info.layers[i].name == item) {
                out.push_back(int(i));
                byName = true;
            }
        if (byName) continue;
        if (std::all_of(item.begin(), item.end(),
                        [](char c) { return std::isdigit(static_cast<unsigned char>(c)) || c == '-'; })) {
            for (int v : parseIndexList(item, int(info.layers.size()), option)) out.push_back(v);
            continue;
        }
        std::string known;
        for (const auto& l : info.layers) known += (known.empty() ? "" : ", ") + l.name;
        throwUsage(std::string(option) + ": no layer named " + quotedText(item) +
                   " (layers: " + printableText(known, 2000) + ")");
    }
    sortUnique(out);
    return out;
}

int parseLayer(std::string_view text, const DumpInfo& info, std::string_view option) {
    const std::vector<int> layers = parseLayerList(text, info, option);
    if (layers.size() != 1) throwUsage(std::string(option) + ": name one layer, got " + quotedText(text));
    return layers.front();
}

long long parseQueryToken(std::string_view text, const TokenLayout& layout, std::string_view option) {
    std::string q(text);
    q.erase(0, q.find_first_not_of(" \t"));
    q.erase(q.find_last_not_of(" \t") + 1);
    std::transform(q.begin(), q.end(), q.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    const std::string name(option);
    if (q == "cls") {
        if (layout.prefix == 0) throwUsage(name + " cls: the layer has no prefix tokens");
        return 0;
    }
    if (const std::size_t comma = q.find(','); comma != std::string::npos) {
        if (q.find(',', comma + 1) != std::string::npos || layout.gridH <= 0 || layout.gridW <= 0)
            throwUsage(name + ": expected a token, y,x or cls, got " + quotedText(text));
        const int y = parseInt(std::string_view(q).substr(0, comma), 0, layout.gridH - 1, name + " y");
        const int x = parseInt(std::string_view(q).substr(comma + 1), 0, layout.gridW - 1, name + " x");
        return layout.token(y, x);
    }
    return parseInt(q, 0, int(std::min<long long>(layout.tokens(), 1ll << 31) - 1), name);
}

}  // namespace attnlens
