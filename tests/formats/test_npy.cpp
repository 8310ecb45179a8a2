#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "core/check.h"
#include "formats/npy.h"
#include "test_util.h"

using namespace fp8rl;
using fp8rl::test::expect_error;
using fp8rl::test::ScratchDir;

namespace {

Tensor patterned(Shape shape, DType dt) {
  Tensor t = Tensor::empty(shape, dt);
  auto* p = t.ptr<unsigned char>();
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<unsigned char>(i * 31 + 5);
  return t;
}

// A .npy file with the given dict text (padded as numpy pads it) and data bytes.
std::string npy_bytes(const std::string& dict, size_t data_bytes, int major = 1) {
  std::string h = dict;
  const size_t prefix = major == 1 ? 10 : 12;
  while ((prefix + h.size() + 1) % 64 != 0) h += ' ';
  h += '\n';
  std::string out = "\x93NUMPY";
  out += char(major);
  out += char(0);
  for (size_t i = 0; i < prefix - 8; ++i) out += char((h.size() >> (8 * i)) & 0xff);
  return out + h + std::string(data_bytes, '\0');
}

}  // namespace

TEST(Npy, RoundTripSupportedDtypesAndShapes) {
  ScratchDir dir;
  for (DType dt : {DType::f32, DType::f16, DType::i32, DType::i64}) {
    for (Shape s : {Shape{}, Shape{0}, Shape{7}, Shape{3, 5}, Shape{2, 0, 3}, Shape{1, 2, 3, 4}}) {
      Tensor t = patterned(s, dt);
      const std::string path = dir / "t.npy";
      write_npy(path, t);
      const std::string raw = fp8rl::test::read_bytes(path);
      ASSERT_EQ((raw.size() - t.nbytes()) % 64, 0u) << "data not 64-aligned";
      for (const Tensor& r : {read_npy(path), parse_npy(raw, path)}) {
        EXPECT_EQ(r.dtype(), dt);
        EXPECT_EQ(r.shape(), s) << s.str();
        EXPECT_TRUE(t.nbytes() == 0 || std::memcmp(r.ptr<void>(), t.ptr<void>(), t.nbytes()) == 0);
      }
    }
  }
}

TEST(Npy, HeaderTextMatchesNumpy) {
  ScratchDir dir;
  write_npy(dir / "a.npy", patterned({7}, DType::f32));
  EXPECT_NE(fp8rl::test::read_bytes(dir / "a.npy").find("'shape': (7,), }"), std::string::npos);
  write_npy(dir / "b.npy", patterned({}, DType::i64));
  EXPECT_NE(fp8rl::test::read_bytes(dir / "b.npy")
                .find("{'descr': '<i8', 'fortran_order': "
                      "False, 'shape': (), }"),
            std::string::npos);
}

// Goldens were written by numpy: reading and rewriting one gives the same bytes.
TEST(Npy, NumpyWrittenFileRoundTripsByteForByte) {
  const std::string golden = std::string(FP8RL_TEST_DATA) + "/goldens/llama/logits_fp32.npy";
  if (!std::filesystem::exists(golden)) GTEST_SKIP() << golden << " not present";
  Tensor t = read_npy(golden);
  EXPECT_EQ(t.dtype(), DType::f32);
  EXPECT_EQ(t.shape().rank, 2);
  ScratchDir dir;
  write_npy(dir / "copy.npy", t);
  EXPECT_EQ(fp8rl::test::read_bytes(dir / "copy.npy"), fp8rl::test::read_bytes(golden));
}

TEST(Npy, WritesStridedViewsInLogicalOrder) {
  ScratchDir dir;
  Tensor t = Tensor::empty({3, 4}, DType::i32);
  for (int i = 0; i < 12; ++i) t.ptr<int32_t>()[i] = i;
  TensorView cols = t.view();
  cols.shape = Shape{3, 2};
  cols.strides = {4, 2};  // columns 0 and 2
  write_npy(dir / "s.npy", cols);
  Tensor r = read_npy(dir / "s.npy");
  ASSERT_EQ(r.shape(), (Shape{3, 2}));
  const int32_t want[] = {0, 2, 4, 6, 8, 10};
  EXPECT_EQ(std::memcmp(r.ptr<int32_t>(), want, sizeof(want)), 0);
}

TEST(Npy, LargeHeaderUsesVersion2) {
  ScratchDir dir;
  // Version 1.0 holds headers up to 65535 bytes; emulate a long one by reading a 2.0 file.
  const std::string path = dir / "v2.npy";
  fp8rl::test::write_bytes(
      path, npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 8, 2));
  EXPECT_EQ(read_npy(path).shape(), (Shape{2}));
}

TEST(Npy, RejectsBadFilesNamingTheProblem) {
  ScratchDir dir;
  int n = 0;
  auto rejects = [&](const std::string& bytes, std::vector<std::string> parts) {
    const std::string path = dir / ("bad" + std::to_string(n++) + ".npy");
    fp8rl::test::write_bytes(path, bytes);
    // The same bytes in memory fail the same check (parse_npy is what the fuzzer drives).
    std::vector<std::string> in_memory = parts;
    in_memory.push_back("bytes of bad.npy");
    expect_error([&] { parse_npy(bytes, "bytes of bad.npy"); }, in_memory);
    parts.push_back(path);
    expect_error([&] { read_npy(path); }, parts);
  };
  const std::string ok = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  rejects("", {"bad magic"});
  rejects("PK\3\4 a zip file", {"bad magic"});
  std::string v4 = npy_bytes(ok, 24);
  v4[6] = 4;
  rejects(v4, {"version 4.0"});
  rejects(npy_bytes(ok, 20), {"24 data bytes", "holds 20"});
  rejects(npy_bytes(ok, 28), {"24 data bytes", "holds 28"});
  rejects(npy_bytes(ok, 0).substr(0, 40), {"past the end"});
  rejects(npy_bytes("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 8), {"'>f4'"});
  rejects(npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", 16), {"'<f8'"});
  rejects(npy_bytes("{'descr': '|b1', 'fortran_order': False, 'shape': (2,), }", 2), {"'|b1'"});
  rejects(npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", 8), {"Fortran"});
  rejects(npy_bytes("{'descr': '<f4', 'shape': (2,), }", 8), {"exactly the keys"});
  rejects(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", 8),
          {"unexpected value"});
  rejects(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", 8),
          {"not a non-negative integer"});
  rejects(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2.5,), }", 8),
          {"malformed"});
  rejects(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,) ", 8), {"malformed"});
  rejects(
      npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}", 8),
      {"overflows"});
  rejects(
      npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296)}", 8),
      {"overflows"});
  rejects(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1)}", 4),
          {"rank 7"});
  rejects(npy_bytes("{'descr': '<f4', 'descr': '<f4', 'shape': (1,)}", 4), {"repeats key"});
}

TEST(Npy, WriteRejectsTypesWithoutANumpyDtype) {
  ScratchDir dir;
  expect_error([&] { write_npy(dir / "x.npy", Tensor::zeros({2}, DType::bf16)); }, {"bf16"});
  expect_error([&] { write_npy(dir / "x.npy", Tensor::zeros({2}, DType::f8e4m3)); }, {"f8e4m3"});
  expect_error([&] { read_npy(dir / "absent.npy"); }, {"absent.npy", "cannot open"});
}
