// Corrupt safetensors files, built byte by byte: each must be rejected with an fp8rl::Error
// that names the file and, where there is one, the tensor.
#include <gtest/gtest.h>

#include <random>

#include "core/check.h"
#include "formats/safetensors.h"
#include "formats/safetensors_header.h"
#include "test_util.h"

using namespace fp8rl;
using fp8rl::test::expect_error;
using fp8rl::test::safetensors_bytes;
using fp8rl::test::ScratchDir;

namespace {

// a: F32 [2] at [0, 8), b: I64 [1] at [8, 16).
const std::string kA = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
const std::string kB = R"("b":{"dtype":"I64","shape":[1],"data_offsets":[8,16]})";

class Corrupt : public ::testing::Test {
 protected:
  // Writes the bytes and expects open() to fail with the path and parts in the message.
  void expect_rejected(const std::string& bytes, std::vector<std::string> parts) {
    const std::string path = dir_ / ("case" + std::to_string(n_++) + ".safetensors");
    fp8rl::test::write_bytes(path, bytes);
    parts.push_back(path);
    expect_error([&] { SafetensorsFile::open(path); }, parts);
  }
  void expect_header_rejected(const std::string& header, size_t data_bytes,
                              std::vector<std::string> parts) {
    expect_rejected(safetensors_bytes(header, std::string(data_bytes, '\0')), std::move(parts));
  }
  ScratchDir dir_;
  int n_ = 0;
};

}  // namespace

TEST_F(Corrupt, ValidBaseOpens) {
  const std::string path = dir_ / "ok.safetensors";
  fp8rl::test::write_bytes(path,
                           safetensors_bytes("{" + kA + "," + kB + "}  ", std::string(16, 0)));
  auto f = SafetensorsFile::open(path);
  EXPECT_EQ(f->tensors().size(), 2u);
}

TEST_F(Corrupt, TruncatedFiles) {
  expect_rejected("", {"shorter than"});
  expect_rejected("\x10\0\0", {"shorter than"});
  const std::string good = safetensors_bytes("{" + kA + "," + kB + "}", std::string(16, 0));
  expect_rejected(good.substr(0, good.size() - 3), {"'b'", "out of bounds"});
  expect_rejected(good.substr(0, 20), {"header length", "past the end"});
}

TEST_F(Corrupt, HeaderLengths) {
  const std::string header = "{" + kA + "}";
  expect_rejected(safetensors_bytes(header, std::string(8, 0), 1ull << 62), {"above the limit"});
  expect_rejected(safetensors_bytes(header, std::string(8, 0), ~0ull), {"above the limit"});
  expect_rejected(safetensors_bytes(header, std::string(8, 0), header.size() + 9),
                  {"header length", "past the end"});
  expect_rejected(safetensors_bytes("", "", 0), {"does not start with '{'"});
}

TEST_F(Corrupt, BadJsonAndNonObjects) {
  expect_header_rejected(R"({"a": {"dtype": )", 0, {"not valid JSON"});
  expect_header_rejected("{" + kA + "}}", 8, {"not valid JSON"});
  expect_header_rejected("{" + kA + ",}", 8, {"not valid JSON"});
  expect_header_rejected(R"([{"a":1}])", 0, {"does not start with '{'"});
  expect_header_rejected(R"(  {})", 0, {"does not start with '{'"});
  expect_header_rejected("{\"\xff\":1}", 0, {"not valid JSON"});  // not UTF-8
  expect_header_rejected(R"({"a":{"dtype":"F32","shape":[NaN],"data_offsets":[0,0]}})", 0,
                         {"not valid JSON"});
  expect_header_rejected("{" + kA + std::string("}\0\0", 3), 8, {"not valid JSON"});
}

TEST_F(Corrupt, BadDtype) {
  expect_header_rejected(R"({"t.w":{"dtype":"F31","shape":[2],"data_offsets":[0,8]}})", 8,
                         {"'t.w'", "unknown dtype 'F31'"});
  expect_header_rejected(R"({"t.w":{"dtype":"f32","shape":[2],"data_offsets":[0,8]}})", 8,
                         {"'t.w'", "unknown dtype 'f32'"});
  expect_header_rejected(R"({"t.w":{"dtype":4,"shape":[2],"data_offsets":[0,8]}})", 8,
                         {"'t.w'", "dtype"});
  expect_header_rejected(R"({"t.w":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", 2,
                         {"'t.w'", "whole bytes"});
}

TEST_F(Corrupt, ShapeAndSizeMismatch) {
  expect_header_rejected(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8,
                         {"'w'", "needs 12 bytes"});
  expect_header_rejected(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8,
                         {"'w'", "negative shape entry -2"});
  expect_header_rejected(R"({"w":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", 8,
                         {"'w'", "not a non-negative integer"});
  expect_header_rejected(R"({"w":{"dtype":"F32","shape":["2"],"data_offsets":[0,8]}})", 8,
                         {"'w'", "not a non-negative integer"});
  expect_header_rejected(R"({"w":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", 8,
                         {"'w'", "not an array"});
  expect_header_rejected(
      R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", 8,
      {"'w'", "overflows"});
  expect_header_rejected(
      R"({"w":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,8]}})", 8,
      {"'w'", "overflows"});
  expect_header_rejected(
      R"({"w":{"dtype":"F32","shape":[0,4611686018427387904,4],"data_offsets":[0,0]}})", 0,
      {"'w'", "overflows"});
  expect_header_rejected(R"({"w":{"dtype":"F32","shape":[1e999],"data_offsets":[0,8]}})", 8,
                         {"not valid JSON"});
  expect_header_rejected(R"({"w":{"dtype":"F32","shape":[1,1,1,1,1,1,2],"data_offsets":[0,8]}})", 8,
                         {"'w'", "rank 7"});
}

TEST_F(Corrupt, DataOffsets) {
  expect_header_rejected("{" + kA + R"(,"b":{"dtype":"I64","shape":[1],"data_offsets":[8,24]}})",
                         16, {"'b'", "out of bounds"});
  expect_header_rejected(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8,
                         {"'w'", "begin > end"});
  expect_header_rejected(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8,8]}})", 8,
                         {"'w'", "not [begin, end]"});
  expect_header_rejected(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", 8,
                         {"'w'", "negative data_offsets"});
  expect_header_rejected(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":"0-8"}})", 8,
                         {"'w'", "data_offsets"});
}

TEST_F(Corrupt, OverlapsAndHoles) {
  expect_header_rejected("{" + kA + R"(,"b":{"dtype":"I64","shape":[1],"data_offsets":[4,12]}})",
                         12, {"'b'", "overlap", "'a'"});
  expect_header_rejected("{" + kA + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8,
                         {"'b'", "overlap", "'a'"});
  expect_header_rejected("{" + kA + R"(,"b":{"dtype":"I64","shape":[1],"data_offsets":[12,20]}})",
                         20, {"'b'", "hole"});
  expect_header_rejected("{" + kA + "," + kB + "}", 24, {"hole", "[16, 24)"});
  expect_header_rejected("{}", 4, {"hole", "[0, 4)"});
}

TEST_F(Corrupt, DuplicateNames) {
  expect_header_rejected("{" + kA + "," + kA + "}", 8, {"'a'", "duplicate tensor name"});
  expect_header_rejected(R"({"a":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                         8, {"'a'", "duplicate key 'dtype'"});
  expect_header_rejected(R"({"__metadata__":{"k":"v","k":"w"}})", 0, {"duplicate key 'k'"});
}

TEST_F(Corrupt, EntriesOfTheWrongForm) {
  expect_header_rejected(R"({"w":[1,2]})", 0, {"'w'", "not an object"});
  expect_header_rejected(R"({"w":{"dtype":"F32","shape":[2]}})", 8, {"'w'", "data_offsets"});
  expect_header_rejected(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"extra":1}})", 8,
                         {"'w'", "unexpected key 'extra'"});
}

TEST_F(Corrupt, BadMetadata) {
  expect_header_rejected(R"({"__metadata__":{"format":1}})", 0, {"__metadata__", "'format'"});
  expect_header_rejected(R"({"__metadata__":["pt"]})", 0, {"__metadata__"});
  expect_header_rejected(R"({"__metadata__":{"nested":{"a":"b"}}})", 0, {"__metadata__"});
}

TEST_F(Corrupt, NotAFile) {
  expect_error([&] { SafetensorsFile::open(dir_ / "absent.safetensors"); },
               {"absent.safetensors", "cannot open"});
  expect_error([&] { SafetensorsFile::open(dir_.str()); }, {dir_.str(), "not a regular file"});
}

// Byte mutations of a valid file: every open either succeeds or throws fp8rl::Error, and a
// file that opens has views that stay inside the mapping.
TEST_F(Corrupt, SeededByteFuzz) {
  SafetensorsWriter w;
  std::vector<Tensor> keep;
  const DType dts[] = {DType::f32, DType::bf16, DType::f8e4m3, DType::i64};
  for (int i = 0; i < 5; ++i) {
    keep.push_back(Tensor::zeros({i + 1, 3}, dts[i % 4]));
    w.add("layer." + std::to_string(i), keep.back());
  }
  keep.push_back(Tensor::zeros({}, DType::f16));
  w.add("scalar", keep.back());
  w.add_metadata("k", "v");
  const std::string base_path = dir_ / "base.safetensors";
  w.write(base_path);
  const std::string base = fp8rl::test::read_bytes(base_path);
  const std::string path = dir_ / "fuzz.safetensors";

  std::mt19937_64 rng(20261129);
  const std::string json_chars = "{}[]\",:-.e0123456789 ";
  int opened = 0, rejected = 0;
  unsigned checksum = 0;  // reads every byte of every view
  for (int iter = 0; iter < 3000; ++iter) {
    std::string bytes = base;
    const int mutations = 1 + int(rng() % 4);
    for (int m = 0; m < mutations && !bytes.empty(); ++m) {
      const size_t pos = rng() % bytes.size();
      switch (rng() % 6) {
        case 0:
          bytes[pos] = char(rng());
          break;
        case 1:
          bytes[pos] ^= char(1u << (rng() % 8));
          break;
        case 2:
          bytes[pos] = json_chars[rng() % json_chars.size()];
          break;
        case 3:
          bytes.resize(pos);
          break;
        case 4:
          bytes.insert(pos, 1, json_chars[rng() % json_chars.size()]);
          break;
        case 5:
          bytes[rng() % std::min<size_t>(8, bytes.size())] = char(rng());
          break;
      }
    }
    fp8rl::test::write_bytes(path, bytes);
    try {
      auto f = SafetensorsFile::open(path);
      for (const auto& t : f->tensors()) {
        ASSERT_LE(8 + t.end, f->file_size());
        if (!t.supported) continue;
        const TensorView v = f->view(t.name);
        unsigned sum = 0;
        for (size_t b = 0; b < v.nbytes(); ++b) sum += static_cast<const unsigned char*>(v.data)[b];
        checksum += sum;
      }
      ++opened;
    } catch (const Error&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 1000);
  EXPECT_GE(checksum, 0u);
  EXPECT_GT(opened, 10);  // many mutations hit tensor data, which is not validated
}

// The header parser alone, on random JSON-ish text.
TEST(SafetensorsHeader, RandomTextNeverCrashes) {
  std::mt19937_64 rng(7);
  const std::string alphabet = R"({}[]",:-.e0123456789 "dtypeshapedata_offsetsF32__metadata__)";
  for (int iter = 0; iter < 20000; ++iter) {
    std::string text = "{";
    const size_t len = rng() % 64;
    for (size_t i = 0; i < len; ++i) text += alphabet[rng() % alphabet.size()];
    try {
      parse_safetensors_header(text, rng() % 32, "mem");
    } catch (const Error&) {
    }
  }
}
