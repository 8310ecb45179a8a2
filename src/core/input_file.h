// Every file fp8rl reads is opened here: read-only, close-on-exec and non-blocking, then required
// to be a regular file. A FIFO, device or directory named where a file is expected fails at once
// with "is not a regular file" instead of hanging in open() or reading without end.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace fp8rl {

class InputFile {
 public:
  // `what` names the file's role in errors ("config.json", "messages file").
  static InputFile open(const std::filesystem::path& path, std::string_view what);
  InputFile(InputFile&& other) noexcept;
  InputFile& operator=(InputFile&&) = delete;
  InputFile(const InputFile&) = delete;
  ~InputFile();

  int fd() const { return fd_; }
  uint64_t size() const { return size_; }  // at open time
  const std::string& path() const { return path_; }
  const std::string& what() const { return what_; }

  // The whole file; an error when it holds more than max_bytes (checked before reading and
  // again while reading, as a file can grow).
  std::string read_all(uint64_t max_bytes) const;

 private:
  InputFile(int fd, uint64_t size, std::string path, std::string what)
      : fd_(fd), size_(size), path_(std::move(path)), what_(std::move(what)) {}
  int fd_;
  uint64_t size_;
  std::string path_, what_;
};

// InputFile::open(path, what).read_all(max_bytes).
std::string read_input_file(const std::filesystem::path& path, std::string_view what,
                            uint64_t max_bytes);

// Lines of an input file, read in chunks; a line longer than max_line_bytes is an error (an
// endless line must not grow memory without bound). The '\n' is not part of the line.
class InputLines {
 public:
  InputLines(const std::filesystem::path& path, std::string_view what, uint64_t max_line_bytes);
  // false at the end of the file.
  bool next(std::string& line);
  uint64_t line_number() const { return line_number_; }

 private:
  InputFile file_;
  uint64_t max_line_bytes_;
  std::string buffer_;
  size_t begin_ = 0;
  bool eof_ = false;
  uint64_t line_number_ = 0;
};

}  // namespace fp8rl
