#pragma once
#include <cstdint>
#include <string>

#include "attnlens/io/cancel.h"

namespace attnlens {
// Lower-case hex SHA-256 of a file, streamed in 1 MiB blocks. Error(Input) when unreadable;
// Error(Cancelled) when `cancel` is requested (checked between blocks), so that a hash running
// beside an analysis stops with it.
std::string sha256File(const std::string& path, CancelToken cancel = {});
std::string sha256Hex(const void* data, std::size_t size);
}  // namespace attnlens
