#pragma once
// The message of a JSON library (nlohmann::json) exception in plain words for users: without the
// library's internal id ("[json.exception.type_error.302] type must be number, but is string" ->
// "type must be number, but is string"), printable and capped like every quoted text (text.h).
#include <exception>
#include <string>

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

}  // namespace attnlens
