#pragma once
// Text that comes from outside (dump attributes, layer names, command-line arguments) ends up in
// JSON reports, which must be valid UTF-8, and on terminals, where an escape sequence would act.
// Such text is checked once, where it enters, so that nothing fails after the work has been done.
#include <optional>
#include <string>
#include <string_view>

namespace attnlens {

// Why `text` cannot be used as a name, or nothing when it can: it must be valid UTF-8 (no overlong
// forms, surrogates or code points above U+10FFFF) without control characters (C0, DEL, C1).
// Example: "byte 0xff at offset 3 is not valid UTF-8".
std::optional<std::string> textProblem(std::string_view text);

// `text` for a message: control characters and bytes that are not UTF-8 become \xNN, and text
// longer than `maxBytes` is cut (at a character boundary) with "... (N bytes)" appended.
std::string printableText(std::string_view text, std::size_t maxBytes = 200);
// printableText in single quotes, the form messages quote an argument or a name in: "'abc'".
std::string quotedText(std::string_view text);

// The finite number `text` spells in full, with an optional leading '+' or '-' (std::from_chars
// takes only '-'): the one reading of numbers in options and paradigm specs. Nothing otherwise.
std::optional<double> finiteNumber(std::string_view text);

// A byte count for a message, in GiB with three significant digits: "1.5 GiB", "0.000977 GiB".
std::string formatGiB(double bytes);

}  // namespace attnlens
