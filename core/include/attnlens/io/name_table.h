#pragma once
// The one way an enum meets its names (JSON values, option values, session files): a table of
// (value, name) pairs, read both ways. Unknown text is Error(Usage) "unknown WHAT 'TEXT' (known:
// a, b, c)", the names in the table's order.
#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "attnlens/io/error.h"
#include "attnlens/io/text.h"

namespace attnlens {

template <typename E, std::size_t Size>
struct NameTable {
    std::array<std::pair<E, std::string_view>, Size> entries;

    // The name of `value`; "?" for a value the table lacks (a cast from a bad integer).
    constexpr std::string_view name(E value) const {
        for (const auto& [v, n] : entries)
            if (v == value) return n;
        return "?";
    }
    // The value named `text`, if any (for callers whose message about unknown text is their own).
    constexpr std::optional<E> find(std::string_view text) const {
        for (const auto& [v, n] : entries)
            if (n == text) return v;
        return std::nullopt;
    }
    E parse(std::string_view text, std::string_view what) const {
        if (const std::optional<E> value = find(text)) return *value;
        throwUsage("unknown " + std::string(what) + " '" + printableText(text) + "' (known: " + names() + ")");
    }
    // "a, b, c": for help texts and messages.
    std::string names() const {
        std::string known;
        for (const auto& [v, n] : entries) known += (known.empty() ? "" : ", ") + std::string(n);
        return known;
    }
};

}  // namespace attnlens
