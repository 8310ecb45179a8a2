#include "core/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "core/check.h"

namespace fp8rl {

void check_replaceable(const std::filesystem::path& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    CHECK(errno == ENOENT, "output '{}': cannot stat: {}", path.string(), std::strerror(errno));
    return;
  }
  const char* kind = S_ISLNK(st.st_mode)                          ? "a symbolic link"
                     : S_ISDIR(st.st_mode)                        ? "a directory"
                     : S_ISFIFO(st.st_mode)                       ? "a FIFO"
                     : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                     : S_ISSOCK(st.st_mode)                       ? "a socket"
                                                                  : nullptr;
  CHECK(kind == nullptr, "output '{}' is {}, not a regular file: refusing to replace it",
        path.string(), kind);
}

ReplacingFile::ReplacingFile(std::filesystem::path path)
    : path_(std::move(path)), tmp_(path_.string() + ".tmp") {
  check_replaceable(path_);
  ::unlink(tmp_.c_str());  // a stale temporary, or a symlink planted there
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  CHECK(fd_ >= 0, "cannot create '{}': {}", tmp_, std::strerror(errno));
}

ReplacingFile::~ReplacingFile() {
  discard();
}

void ReplacingFile::discard() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(tmp_.c_str());
  fd_ = -1;
}

void ReplacingFile::write(const void* data, size_t bytes) {
  CHECK(fd_ >= 0, "'{}' is already committed", tmp_);
  const char* p = static_cast<const char*>(data);
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::write(fd_, p + done, bytes - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;  // 0 bytes written for a non-empty request
      discard();
      RAISE("writing '{}' failed: {}", tmp_, std::strerror(err));
    }
    done += size_t(n);
  }
}

void ReplacingFile::commit() {
  CHECK(fd_ >= 0, "'{}' is already committed", tmp_);
  // A file system may report a full disk only when the data is flushed (NFS, delayed
  // allocation): fsync and close are checked like write.
  if (::fsync(fd_) != 0) {
    const int err = errno;
    discard();
    RAISE("writing '{}' failed: fsync: {}", tmp_, std::strerror(err));
  }
  const int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) {
    const int err = errno;
    ::unlink(tmp_.c_str());
    RAISE("writing '{}' failed: close: {}", tmp_, std::strerror(err));
  }
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp_.c_str());
    RAISE("renaming '{}' to '{}' failed: {}", tmp_, path_.string(), std::strerror(err));
  }
}

void write_file_replacing(const std::filesystem::path& path, std::string_view bytes) {
  ReplacingFile f(path);
  f.write(bytes.data(), bytes.size());
  f.commit();
}

void fsync_directory(const std::filesystem::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  CHECK(fd >= 0, "cannot open the directory '{}': {}", dir.string(), std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  // Some file systems cannot sync a directory (EINVAL); the entries are then as durable as
  // they can be made.
  CHECK(rc == 0 || err == EINVAL, "fsync of the directory '{}' failed: {}", dir.string(),
        std::strerror(err));
}

int64_t append_whole(int fd, int64_t size, std::string_view bytes, const std::string& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;
      [[maybe_unused]] const int rc = ::ftruncate(fd, size);
      RAISE("cannot write '{}': {}", path, std::strerror(err));
    }
    done += size_t(n);
  }
  return size + int64_t(bytes.size());
}

}  // namespace fp8rl
