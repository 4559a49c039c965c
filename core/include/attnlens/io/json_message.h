#pragma once
// The message of a JSON library (nlohmann::json) exception in plain words for users: without the
// library's internal id ("[json.exception.type_error.302] type must be number, but is string" ->
// "type must be number, but is string"), printable and capped like every quoted text (text.h).
#include <cstddef>
#include <exception>
#include <optional>
#include <string>
#include <string_view>

#include "attnlens/io/text.h"

namespace attnlens {

inline std::string jsonErrorText(const std::exception& e, std::size_t maxBytes = 400) {
    std::string text = e.what();
    if (text.rfind("[json.exception.", 0) == 0) {
        const auto end = text.find("] ");
        if (end != std::string::npos) text.erase(0, end + 2);
    }
    return printableText(text, maxBytes);
}

// JSON nested deeper than this is refused before it is parsed: AttnLens's reports and sessions nest
// about ten deep, and a value nested tens of thousands deep would overflow the stack of every
// recursive copy or comparison of it.
inline constexpr int kMaxJsonNesting = 256;

// The byte offset at which `text` opens its (limit + 1)-th nested array or object, or nothing when it
// stays within `limit`. Brackets inside strings (escapes included) do not count; the text need not be
// valid JSON (the parser says what else is wrong).
inline std::optional<std::size_t> jsonNestingBeyond(std::string_view text, int limit = kMaxJsonNesting) {
    int depth = 0;
    bool inString = false;
    for (std::size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (inString) {
            if (c == '\\')
                ++i;
            else if (c == '"')
                inString = false;
        } else if (c == '"') {
            inString = true;
        } else if (c == '[' || c == '{') {
            if (++depth > limit) return i;
        } else if (c == ']' || c == '}') {
            --depth;
        }
    }
    return std::nullopt;
}

}  // namespace attnlens
