// TensorBoard event files: the CRC-32C against the standard's check values, the TFRecord
// framing byte by byte, and a writer's file read back record by record with the generated
// Event classes; a corrupted byte, a cut-off record and an unwritable directory are errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <regex>

#include "core/check.h"
#include "formats/tensorboard_event.pb.h"
#include "formats/tensorboard_events.h"
#include "test_util.h"

using namespace fp8rl;
using fp8rl::test::read_bytes;
using fp8rl::test::ScratchDir;
using fp8rl::test::write_bytes;
namespace fs = std::filesystem;
namespace pb = fp8rl::tensorboard;

namespace {

uint32_t le32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | uint8_t(s[at + size_t(i)]);
  return v;
}

// TFRecord's mask, written out here from its definition.
uint32_t mask(uint32_t c) {
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::vector<pb::Event> read_events(const std::string& path) {
  std::vector<pb::Event> events;
  for (const std::string& r : read_tfrecords(path)) {
    pb::Event e;
    EXPECT_TRUE(e.ParseFromString(r));
    events.push_back(e);
  }
  return events;
}

void expect_error_with(const std::function<void()>& f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one with '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

}  // namespace

// RFC 3720 (iSCSI) B.4's vectors and the common "123456789" check value.
TEST(TensorBoard, Crc32cIsCastagnolis) {
  EXPECT_EQ(crc32c("123456789"), 0xe3069283u);
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8a9136aau);
  EXPECT_EQ(crc32c(std::string(32, '\xff')), 0x62a8ab43u);
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending += char(i);
  EXPECT_EQ(crc32c(ascending), 0x46dd794eu);
  EXPECT_EQ(crc32c(""), 0u);
  EXPECT_EQ(masked_crc32c("123456789"), mask(0xe3069283u));
}

// A record of an event file TensorFlow wrote (the checksum as TensorBoard's own reader tests
// quote it): Event{file_version: "CRC test, one two"} serializes to the same bytes, whose
// masked CRC is TensorFlow's.
TEST(TensorBoard, MaskedCrcOfATensorFlowRecord) {
  pb::Event e;
  e.set_file_version("CRC test, one two");
  const std::string bytes = e.SerializeAsString();
  EXPECT_EQ(bytes, std::string("\x1a\x11"
                               "CRC test, one two"));
  EXPECT_EQ(masked_crc32c(bytes), 0x5794d08au);
}

TEST(TensorBoard, RecordFraming) {
  const std::string data = "hello, event";
  const std::string r = tfrecord_frame(data);
  ASSERT_EQ(r.size(), 8 + 4 + data.size() + 4);
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | uint8_t(r[size_t(i)]);
  EXPECT_EQ(length, data.size());
  EXPECT_EQ(le32(r, 8), mask(crc32c(r.substr(0, 8))));
  EXPECT_EQ(r.substr(12, data.size()), data);
  EXPECT_EQ(le32(r, 12 + data.size()), mask(crc32c(data)));
}

TEST(TensorBoard, WriterFileReadsBack) {
  ScratchDir dir;
  const std::string logdir = dir / "runs/a";  // created with its parent
  const double before = double(std::time(nullptr));
  std::string path;
  {
    TensorBoardWriter w(logdir);
    path = w.path();
    w.add_scalars(1, {{"train/loss", 2.5f}, {"train/learning_rate", 1e-4f}});
    w.add_scalars(2, {{"train/loss", 1.25f}, {"train/learning_rate", 0.0f}});
    w.add_session_start(3);
  }
  EXPECT_EQ(fs::path(path).parent_path(), fs::path(logdir));
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof host - 1), 0);
  const std::string name = fs::path(path).filename().string();
  EXPECT_TRUE(std::regex_match(
      name, std::regex("events\\.out\\.tfevents\\.[0-9]{10}\\." + std::string(host) + "\\." +
                       std::to_string(::getpid()) + "\\.[0-9]+")))
      << name;

  const std::vector<pb::Event> ev = read_events(path);
  ASSERT_EQ(ev.size(), 6u);
  EXPECT_EQ(ev[0].file_version(), "brain.Event:2");
  EXPECT_GE(ev[0].wall_time(), before - 1);
  EXPECT_LE(ev[0].wall_time(), double(std::time(nullptr)) + 1);
  const struct {
    int64_t step;
    const char* tag;
    float value;
  } want[] = {{1, "train/loss", 2.5f},
              {1, "train/learning_rate", 1e-4f},
              {2, "train/loss", 1.25f},
              {2, "train/learning_rate", 0.0f}};
  for (size_t i = 0; i < 4; ++i) {
    const pb::Event& e = ev[i + 1];
    ASSERT_TRUE(e.has_summary()) << i;
    EXPECT_EQ(e.step(), want[i].step);
    EXPECT_GE(e.wall_time(), ev[0].wall_time());
    ASSERT_EQ(e.summary().value_size(), 1);
    EXPECT_EQ(e.summary().value(0).tag(), want[i].tag);
    // A zero is still present (a oneof member), as TensorBoard's HasField("simple_value") needs.
    ASSERT_EQ(e.summary().value(0).value_case(), pb::Summary::Value::kSimpleValue);
    EXPECT_EQ(e.summary().value(0).simple_value(), want[i].value);
  }
  ASSERT_TRUE(ev[5].has_session_log());
  EXPECT_EQ(ev[5].session_log().status(), pb::SessionLog::START);
  EXPECT_EQ(ev[5].step(), 3);

  // A second writer in the same directory gets a file of its own.
  TensorBoardWriter other(logdir);
  EXPECT_NE(other.path(), path);
}

// Negative controls: one changed byte in a record's data or length, or a record cut short,
// and the reader refuses the file, naming what failed.
TEST(TensorBoard, CorruptRecordsAreDetected) {
  ScratchDir dir;
  std::string path;
  {
    TensorBoardWriter w(dir / "tb");
    w.add_scalars(7, {{"train/loss", 0.5f}});
    path = w.path();
  }
  const std::string good = read_bytes(path);
  ASSERT_EQ(read_tfrecords(path).size(), 2u);
  const size_t second = good.size() - (tfrecord_frame(read_tfrecords(path)[1]).size());

  std::string bad = good;
  bad[second + 12 + 3] ^= 0x01;  // a bit of the scalar event's data
  write_bytes(path, bad);
  expect_error_with([&] { read_tfrecords(path); }, "wrong data CRC");

  bad = good;
  bad[second + 1] ^= 0x01;  // a bit of its length
  write_bytes(path, bad);
  expect_error_with([&] { read_tfrecords(path); }, "wrong length CRC");

  write_bytes(path, good.substr(0, good.size() - 1));
  expect_error_with([&] { read_tfrecords(path); }, "cut short");

  write_bytes(path, good);  // restored: reads again
  EXPECT_EQ(read_tfrecords(path).size(), 2u);
}

TEST(TensorBoard, UnwritableDirectoryIsAnError) {
  ScratchDir dir;
  write_bytes(dir / "file", "x");
  expect_error_with([&] { TensorBoardWriter w(dir / "file/tb"); }, dir / "file/tb");
}
