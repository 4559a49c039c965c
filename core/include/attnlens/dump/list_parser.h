#pragma once
// The one parser of the numbers and lists that users type: numbers (--tau), integers (--threads),
// index lists (--images, --heads, --local-channels), layer lists (--layers) and integer lists
// (--local-k), for attnlens-cli, `attnlens render`, the desktop program's command line and its
// preferences. The option's name is a parameter, so that every Error(Usage) starts with it as the
// user typed it ("--image: ...").
// Items are separated by commas; spaces around an item are ignored; an empty item is an error.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace attnlens {

struct DumpInfo;
struct TokenLayout;

// A finite decimal number with an optional sign ("1e-3", "+0.5"): "OPTION: 'x' is not a finite
// number" (also for values beyond double's range).
double parseNumber(std::string_view text, std::string_view option);
// A decimal integer with an optional sign, in [min, max]: "OPTION: 'x' is not an integer
// (allowed: [1, 99])", "OPTION: 100 is out of range [1, 99]". Values beyond long long are out of
// range like any other, never wrapped or clamped.
int parseInt(std::string_view text, int min, int max, std::string_view option);
// "3,5,7": integers in [min, max] (parseInt's messages), in the order given, duplicates kept.
std::vector<int> parseIntList(std::string_view text, int min, int max, std::string_view option);
// "0-3,7,9": indices and inclusive ranges A-B, each below `count`; sorted, duplicates merged.
// The list is sized before it is made: Error(Input) with its size when it cannot be allocated.
std::vector<int> parseIndexList(std::string_view text, int count, std::string_view option);
// The number of distinct indices parseIndexList would return, without making the list (a selection
// is planned before its bookkeeping is allocated); the same Error(Usage)s.
std::size_t indexListSize(std::string_view text, int count, std::string_view option);
// The inverse of parseIndexList: the shortest text that it reads back as `indices` ("0-11,24-35",
// "7"; "" for none). Any order and duplicates are accepted; the text is of the sorted set.
std::string indexListText(std::vector<int> indices);
// Layers by name or by position (indices and ranges as parseIndexList): "blocks.0,blocks.3" or
// "0-3"; sorted, duplicates merged.
std::vector<int> parseLayerList(std::string_view text, const DumpInfo& info, std::string_view option);
// Exactly one layer, by name or position: "OPTION: name one layer, got '0,1'".
int parseLayer(std::string_view text, const DumpInfo& info, std::string_view option);

// A query token of `layout`: its index ("40"), "y,x" on the grid ("3,4"), or "cls" (the first
// prefix token); case and surrounding spaces are ignored. Error(Usage) naming the option:
// "OPTION cls: the layer has no prefix tokens", "OPTION y: 9 is out of range [0, 6]".
long long parseQueryToken(std::string_view text, const TokenLayout& layout, std::string_view option);

}  // namespace attnlens
