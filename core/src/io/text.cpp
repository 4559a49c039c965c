#include "attnlens/io/text.h"

#include <charconv>
#include <cmath>

#include <cstdio>

namespace attnlens {

namespace {

// Length of the UTF-8 sequence at `text[i]` and its code point, or 0 when it is not valid UTF-8.
std::size_t decodeUtf8(std::string_view text, std::size_t i, char32_t& codePoint) {
    const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
    const unsigned char lead = byte(i);
    std::size_t length;
    char32_t value;
    if (lead < 0x80) {
        codePoint = lead;
        return 1;
    } else if (lead >= 0xC2 && lead <= 0xDF) {
        length = 2;
        value = lead & 0x1F;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
        length = 3;
        value = lead & 0x0F;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
        length = 4;
        value = lead & 0x07;
    } else {
        return 0;
    }
    if (i + length > text.size()) return 0;
    for (std::size_t k = 1; k < length; ++k) {
        if ((byte(i + k) & 0xC0) != 0x80) return 0;
        value = (value << 6) | (byte(i + k) & 0x3F);
    }
    const bool overlong = (length == 3 && value < 0x800) || (length == 4 && value < 0x10000);
    const bool surrogate = value >= 0xD800 && value <= 0xDFFF;
    if (overlong || surrogate || value > 0x10FFFF) return 0;
    codePoint = value;
    return length;
}

bool isControl(char32_t c) { return c < 0x20 || (c >= 0x7F && c <= 0x9F); }

std::string hexByte(unsigned char c) {
    char buffer[8];
    std::snprintf(buffer, sizeof buffer, "\\x%02x", c);
    return buffer;
}

}  // namespace

std::optional<std::string> textProblem(std::string_view text) {
    for (std::size_t i = 0; i < text.size();) {
        char32_t c = 0;
        const std::size_t length = decodeUtf8(text, i, c);
        if (length == 0) {
            char buffer[96];
            std::snprintf(buffer, sizeof buffer, "byte 0x%02x at offset %zu is not valid UTF-8",
                          static_cast<unsigned char>(text[i]), i);
            return std::string(buffer);
        }
        if (isControl(c)) {
            char buffer[96];
            std::snprintf(buffer, sizeof buffer, "control character U+%04X at offset %zu", unsigned(c), i);
            return std::string(buffer);
        }
        i += length;
    }
    return std::nullopt;
}

std::string printableText(std::string_view text, std::size_t maxBytes) {
    std::string out;
    std::size_t i = 0;
    while (i < text.size() && i < maxBytes) {
        char32_t c = 0;
        const std::size_t length = decodeUtf8(text, i, c);
        if (length == 0 || isControl(c)) {
            out += hexByte(static_cast<unsigned char>(text[i]));
            ++i;
        } else {
            if (i + length > maxBytes) break;
            out.append(text.substr(i, length));
            i += length;
        }
    }
    if (i < text.size()) out += "... (" + std::to_string(text.size()) + " bytes)";
    return out;
}

// Appended rather than "'" + ...: GCC 12 at -O3 warns (-Wrestrict, a false positive, GCC PR 105329)
// where a string literal is prepended to a temporary std::string.
std::string quotedText(std::string_view text) {
    std::string out(1, '\'');
    out += printableText(text);
    out += '\'';
    return out;
}

std::string formatGiB(double bytes) {
    char text[32];
    std::snprintf(text, sizeof text, "%.3g GiB", bytes / double(1ull << 30));
    return text;
}

std::optional<double> finiteNumber(std::string_view text) {
    const char* first = text.data() + (text.size() > 1 && text[0] == '+' && text[1] != '-' ? 1 : 0);
    const char* last = text.data() + text.size();
    double value = 0;
    const auto [end, ec] = std::from_chars(first, last, value);
    if (first == last || end != last || ec != std::errc() || !std::isfinite(value)) return std::nullopt;
    return value;
}

}  // namespace attnlens
