#include "formats/tensorboard_events.h"

#include <fcntl.h>
#include <isa-l/crc.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/check.h"
#include "core/input_file.h"
#include "core/output_file.h"
#include "formats/tensorboard_event.pb.h"

namespace fp8rl {

namespace {

namespace fs = std::filesystem;
namespace pb = ::fp8rl::tensorboard;

// An event file holds a run's scalars: tens of bytes per value, a few MB for a long run.
constexpr uint64_t kMaxEventFileBytes = uint64_t(1) << 32;

// Files this process has opened: the last part of their names.
std::atomic<uint64_t> g_files_opened{0};

void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out += char((v >> (8 * i)) & 0xff);
}
void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out += char((v >> (8 * i)) & 0xff);
}
uint64_t get_u64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | uint8_t(p[i]);
  return v;
}
uint32_t get_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | uint8_t(p[i]);
  return v;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  std::array<char, 256> buf{};
  if (::gethostname(buf.data(), buf.size() - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf.data();
}

std::string framed(const pb::Event& e) {
  std::string bytes;
  CHECK(e.SerializeToString(&bytes), "cannot serialize a TensorBoard event");
  return tfrecord_frame(bytes);
}

}  // namespace

uint32_t crc32c(std::string_view data) {
  // crc32_iscsi neither inverts its initial value nor its result; CRC-32C does both.
  uint32_t crc = 0xffffffffu;
  // Its length is an int: feed a huge buffer in slices.
  constexpr size_t kSlice = size_t(1) << 30;
  for (size_t done = 0; done < data.size(); done += kSlice) {
    const size_t n = std::min(kSlice, data.size() - done);
    crc = crc32_iscsi(reinterpret_cast<unsigned char*>(const_cast<char*>(data.data() + done)),
                      int(n), crc);
  }
  return ~crc;
}

uint32_t masked_crc32c(std::string_view data) {
  const uint32_t c = crc32c(data);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string tfrecord_frame(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  put_u64(out, data.size());
  put_u32(out, masked_crc32c(std::string_view(out.data(), 8)));
  out.append(data);
  put_u32(out, masked_crc32c(data));
  return out;
}

std::vector<std::string> read_tfrecords(const std::string& path) {
  const std::string bytes = read_input_file(path, "TFRecord file", kMaxEventFileBytes);
  std::vector<std::string> records;
  size_t at = 0;
  while (at < bytes.size()) {
    CHECK(bytes.size() - at >= 12, "{}: the record at byte {} is cut short in its header", path,
          at);
    const uint64_t length = get_u64(bytes.data() + at);
    CHECK(get_u32(bytes.data() + at + 8) == masked_crc32c(std::string_view(bytes.data() + at, 8)),
          "{}: the record at byte {} has a wrong length CRC", path, at);
    CHECK(length <= bytes.size() - at - 12 && bytes.size() - at - 12 - length >= 4,
          "{}: the record at byte {} ({} bytes) is cut short", path, at, length);
    const std::string_view data(bytes.data() + at + 12, length);
    CHECK(get_u32(bytes.data() + at + 12 + length) == masked_crc32c(data),
          "{}: the record at byte {} has a wrong data CRC", path, at);
    records.emplace_back(data);
    at += 16 + length;
  }
  return records;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  CHECK(!ec && fs::is_directory(dir), "cannot create the TensorBoard directory '{}': {}", dir,
        ec ? ec.message() : "not a directory");
  const double t = now_seconds();
  const std::string name = fmt::format("events.out.tfevents.{:010d}.{}.{}.{}", int64_t(t),
                                       host_name(), ::getpid(), g_files_opened.fetch_add(1));
  path_ = (fs::path(dir) / name).string();
  fd_ =
      ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0644);
  CHECK(fd_ >= 0, "cannot create '{}': {}", path_, std::strerror(errno));
  pb::Event e;
  e.set_wall_time(t);
  e.set_file_version("brain.Event:2");
  write_records(framed(e));
}

TensorBoardWriter::~TensorBoardWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void TensorBoardWriter::add_scalars(int64_t step,
                                    const std::vector<std::pair<std::string, float>>& scalars) {
  const double t = now_seconds();
  std::string out;
  pb::Event e;
  for (const auto& [tag, value] : scalars) {
    e.Clear();
    e.set_wall_time(t);
    e.set_step(step);
    pb::Summary::Value* v = e.mutable_summary()->add_value();
    v->set_tag(tag);
    v->set_simple_value(value);
    out += framed(e);
  }
  write_records(out);
}

void TensorBoardWriter::add_session_start(int64_t step) {
  pb::Event e;
  e.set_wall_time(now_seconds());
  e.set_step(step);
  e.mutable_session_log()->set_status(pb::SessionLog::START);
  write_records(framed(e));
}

void TensorBoardWriter::write_records(const std::string& bytes) {
  size_ = append_whole(fd_, size_, bytes, path_);
}

}  // namespace fp8rl
