// Files fp8rl writes are written to a temporary name beside the target, made durable (fsync)
// and renamed over it, so a reader sees the old file or the complete new one, never a part
// (a kill, a full disk, a power loss). Only a regular file is ever replaced: a symlink, FIFO,
// device node or directory at the target is an error (renaming over /dev/null as root would
// replace the device). Every failure is an fp8rl::Error naming the file and the system's
// reason (ENOSPC "No space left on device", EFBIG "File too large", EACCES, ...).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace fp8rl {

// Throws fp8rl::Error when `path` exists and is not a regular file (lstat: a symlink counts as
// not regular, whatever it points to).
void check_replaceable(const std::filesystem::path& path);

// A file being written under path + ".tmp" (created without following a symlink there).
// commit() fsyncs, closes and renames it over `path`; destroyed without a commit (an error on
// the way) it removes the temporary, so a failed write leaves the target as it was.
class ReplacingFile {
 public:
  explicit ReplacingFile(std::filesystem::path path);
  ~ReplacingFile();
  ReplacingFile(const ReplacingFile&) = delete;
  ReplacingFile& operator=(const ReplacingFile&) = delete;

  void write(const void* data, size_t bytes);
  void commit();

 private:
  void discard();
  std::filesystem::path path_;
  std::string tmp_;
  int fd_ = -1;
};

// bytes -> path through a ReplacingFile.
void write_file_replacing(const std::filesystem::path& path, std::string_view bytes);

// Appends `bytes` to the file open as `fd` (of `size` bytes so far; `path` names it in errors)
// as a whole: a write that fails part way is cut back to `size`, so a log stays whole records.
// Returns the new size.
int64_t append_whole(int fd, int64_t size, std::string_view bytes, const std::string& path);

// Makes the entries of directory `dir` (files created or renamed in it) durable.
void fsync_directory(const std::filesystem::path& dir);

}  // namespace fp8rl
