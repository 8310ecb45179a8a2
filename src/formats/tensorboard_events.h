// TensorBoard event files: what `report_to: tensorboard` writes and TensorBoard reads.
//
// An event file is a TFRecord file of serialized Event messages (tensorboard_event.proto,
// TensorBoard's field numbers). Each record is framed as
//   uint64 length (little-endian) | masked CRC-32C of those 8 bytes | data | masked CRC-32C of data
// with mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8. The first record is an Event with
// file_version "brain.Event:2"; TensorBoard finds the files by the name events.out.tfevents.*.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fp8rl {

// CRC-32C (Castagnoli) of `data` (ISA-L's crc32_iscsi), and TFRecord's masked form of it:
// rotated and offset, so that the CRC of data that holds CRCs is not trivially related to them.
uint32_t crc32c(std::string_view data);
uint32_t masked_crc32c(std::string_view data);

// `data` framed as one TFRecord.
std::string tfrecord_frame(std::string_view data);

// The records of a TFRecord file, each checked against both of its CRCs. A mismatch, or a
// record cut short at the end (a writer killed mid-record), is an error naming the file, the
// record's byte offset and what failed.
std::vector<std::string> read_tfrecords(const std::string& path);

// A new event file events.out.tfevents.<unix time>.<hostname>.<pid>.<n> in `dir` (created
// with its parents), as TensorBoard's own writers name them: n counts the files this process
// opened, so two writers never share a file. Every call writes its records with write(2)
// before returning, so a killed run keeps what it logged; a failed write is an error naming
// the file and the reason, and leaves no partial record behind.
class TensorBoardWriter {
 public:
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  const std::string& path() const { return path_; }

  // One Event per scalar, {wall_time: now, step, summary {value {tag, simple_value}}}, as
  // TensorBoard's add_scalar writes them.
  void add_scalars(int64_t step, const std::vector<std::pair<std::string, float>>& scalars);

  // A SessionLog START at `step`: TensorBoard then drops the points at steps >= step that
  // earlier files of the directory hold (what an interrupted run logged after the checkpoint
  // a resumed run starts from), as PyTorch's SummaryWriter(purge_step) does.
  void add_session_start(int64_t step);

 private:
  void write_records(const std::string& framed);

  std::string path_;
  int fd_ = -1;
  int64_t size_ = 0;  // bytes of whole records in the file
};

}  // namespace fp8rl
