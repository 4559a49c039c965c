#pragma once
#include <atomic>
#include <cstdint>
#include <string>

namespace attnlens {
// Lower-case hex SHA-256 of a file, streamed in 1 MiB blocks. Error(Input) when unreadable;
// Error(Cancelled) when *cancel becomes true (checked between blocks), so that a hash running
// beside an analysis stops with it.
std::string sha256File(const std::string& path, const std::atomic<bool>* cancel = nullptr);
std::string sha256Hex(const void* data, std::size_t size);
}  // namespace attnlens
