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

void write_file_replacing(const std::filesystem::path& path, std::string_view bytes) {
  check_replaceable(path);
  const std::string tmp = path.string() + ".tmp";
  ::unlink(tmp.c_str());  // a stale temporary, or a symlink planted there
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  CHECK(fd >= 0, "cannot create '{}': {}", tmp, std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      RAISE("writing '{}' failed: {}", tmp, std::strerror(err));
    }
    done += size_t(n);
  }
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    RAISE("writing '{}' failed: {}", tmp, std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    RAISE("renaming '{}' to '{}' failed: {}", tmp, path.string(), std::strerror(err));
  }
}

}  // namespace fp8rl
