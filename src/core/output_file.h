// Files fp8rl writes are written to a temporary name beside the target and renamed over it, and
// only ever replace a regular file: a symlink, FIFO, device node or directory at the target is
// an error (renaming over /dev/null as root would replace the device).
#pragma once

#include <filesystem>
#include <string_view>

namespace fp8rl {

// Throws fp8rl::Error when `path` exists and is not a regular file (lstat: a symlink counts as
// not regular, whatever it points to).
void check_replaceable(const std::filesystem::path& path);

// check_replaceable, then bytes -> path + ".tmp" (created without following a symlink there),
// fsync-free rename over path.
void write_file_replacing(const std::filesystem::path& path, std::string_view bytes);

}  // namespace fp8rl
