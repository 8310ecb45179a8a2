#include "core/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/check.h"

namespace fp8rl {

InputFile InputFile::open(const std::filesystem::path& path, std::string_view what) {
  const std::string p = path.string();
  // O_NONBLOCK: open() of a FIFO with no writer would block forever without it.
  const int fd = ::open(p.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  CHECK(fd >= 0, "{} '{}': cannot open: {}", what, p, std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    RAISE("{} '{}': cannot stat: {}", what, p, std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    RAISE("{} '{}' is not a regular file{}", what, p, S_ISDIR(st.st_mode) ? " (a directory)" : "");
  }
  // Regular files ignore O_NONBLOCK; clearing it keeps later reads plain all the same.
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return InputFile(fd, uint64_t(st.st_size), p, std::string(what));
}

InputFile::InputFile(InputFile&& other) noexcept
    : fd_(other.fd_),
      size_(other.size_),
      path_(std::move(other.path_)),
      what_(std::move(other.what_)) {
  other.fd_ = -1;
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::string InputFile::read_all(uint64_t max_bytes) const {
  CHECK(size_ <= max_bytes, "{} '{}': {} bytes, above the limit of {} bytes", what_, path_, size_,
        max_bytes);
  std::string out;
  out.reserve(size_t(size_));
  char chunk[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd_, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    CHECK(n >= 0, "{} '{}': read failed: {}", what_, path_, std::strerror(errno));
    if (n == 0) break;
    CHECK(out.size() + size_t(n) <= max_bytes, "{} '{}': more than the limit of {} bytes", what_,
          path_, max_bytes);
    out.append(chunk, size_t(n));
  }
  return out;
}

std::string read_input_file(const std::filesystem::path& path, std::string_view what,
                            uint64_t max_bytes) {
  return InputFile::open(path, what).read_all(max_bytes);
}

InputLines::InputLines(const std::filesystem::path& path, std::string_view what,
                       uint64_t max_line_bytes)
    : file_(InputFile::open(path, what)), max_line_bytes_(max_line_bytes) {}

bool InputLines::next(std::string& line) {
  for (;;) {
    const size_t nl = buffer_.find('\n', begin_);
    if (nl != std::string::npos || (eof_ && begin_ < buffer_.size())) {
      const size_t end = nl == std::string::npos ? buffer_.size() : nl;
      CHECK(end - begin_ <= max_line_bytes_, "{} '{}' line {}: longer than the limit of {} bytes",
            file_.what(), file_.path(), line_number_ + 1, max_line_bytes_);
      line.assign(buffer_, begin_, end - begin_);
      begin_ = nl == std::string::npos ? buffer_.size() : nl + 1;
      ++line_number_;
      return true;
    }
    if (eof_) return false;
    CHECK(buffer_.size() - begin_ <= max_line_bytes_,
          "{} '{}' line {}: longer than the limit of {} bytes", file_.what(), file_.path(),
          line_number_ + 1, max_line_bytes_);
    buffer_.erase(0, begin_);
    begin_ = 0;
    char chunk[1 << 16];
    const ssize_t n = ::read(file_.fd(), chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    CHECK(n >= 0, "{} '{}': read failed: {}", file_.what(), file_.path(), std::strerror(errno));
    if (n == 0) {
      eof_ = true;
    } else {
      buffer_.append(chunk, size_t(n));
    }
  }
}

}  // namespace fp8rl
