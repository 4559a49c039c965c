#pragma once
#include <cstdint>
#include <string>

namespace attnlens {
// Lower-case hex SHA-256 of a file, streamed in 1 MiB blocks. Error(Input) when unreadable.
std::string sha256File(const std::string& path);
std::string sha256Hex(const void* data, std::size_t size);
}  // namespace attnlens
