#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/check.h"
#include "formats/safetensors.h"
#include "test_util.h"

using namespace fp8rl;
using fp8rl::test::ScratchDir;

namespace {

// Bytes 0, 1, 2, ... so that any misplaced byte shows.
Tensor patterned(Shape shape, DType dt, int seed) {
  Tensor t = Tensor::empty(shape, dt);
  auto* p = t.ptr<unsigned char>();
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<unsigned char>(i * 7 + seed);
  return t;
}

bool same_bytes(const TensorView& a, const TensorView& b) {
  return a.dtype == b.dtype && a.shape == b.shape && a.nbytes() == b.nbytes() &&
         (a.nbytes() == 0 || std::memcmp(a.data, b.data, a.nbytes()) == 0);
}

}  // namespace

TEST(Safetensors, RoundTripEveryDtypeIncludingScalarsAndEmpty) {
  ScratchDir dir;
  const std::vector<DType> dtypes = {DType::f32,    DType::bf16, DType::f16, DType::f8e4m3,
                                     DType::f8e5m2, DType::i32,  DType::i64};
  std::vector<std::pair<std::string, Tensor>> tensors;
  int seed = 0;
  for (DType dt : dtypes) {
    const std::string n(dtype_name(dt));
    tensors.emplace_back(n + ".matrix", patterned({3, 5}, dt, ++seed));
    tensors.emplace_back(n + ".scalar", patterned({}, dt, ++seed));
    tensors.emplace_back(n + ".empty", patterned({0, 4}, dt, ++seed));
    tensors.emplace_back(n + ".odd", patterned({1, 1, 3, 1, 7, 1}, dt, ++seed));
  }
  SafetensorsWriter w;
  size_t bytes = 0;
  for (auto& [name, t] : tensors) {
    w.add(name, t);
    bytes += t.nbytes();
  }
  w.add_metadata("note", "round trip");
  EXPECT_EQ(w.bytes(), bytes);
  const std::string path = dir / "rt.safetensors";
  w.write(path);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

  auto f = SafetensorsFile::open(path);
  EXPECT_EQ(f->path(), path);
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->metadata().at("note"), "round trip");
  ASSERT_EQ(f->tensors().size(), tensors.size());
  for (size_t i = 1; i < f->tensors().size(); ++i)
    EXPECT_LT(f->tensors()[i - 1].name, f->tensors()[i].name);
  for (auto& [name, t] : tensors) {
    const SafetensorsTensorInfo* info = f->find(name);
    ASSERT_NE(info, nullptr) << name;
    EXPECT_TRUE(info->supported);
    EXPECT_EQ(info->dtype_str, dtype_to_safetensors(t.dtype()));
    EXPECT_EQ(info->nbytes(), t.nbytes());
    const TensorView v = f->view(name);
    EXPECT_TRUE(same_bytes(v, t.view())) << name;
    // The writer orders by element size after an 8-aligned header: every tensor is aligned.
    EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data) % dtype_size(t.dtype()), 0u) << name;
  }
  EXPECT_EQ(f->find("absent"), nullptr);
  EXPECT_THROW(f->view("absent"), Error);
}

TEST(Safetensors, HeaderIsSpacePaddedToEightBytes) {
  ScratchDir dir;
  Tensor t = patterned({3}, DType::f16, 1);
  SafetensorsWriter w;
  w.add("x", t);
  w.write(dir / "p.safetensors");
  const std::string raw = fp8rl::test::read_bytes(dir / "p.safetensors");
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(raw.size(), 8 + n + 6);
  EXPECT_EQ(raw[8], '{');
}

TEST(Safetensors, EmptyFileOfNoTensors) {
  ScratchDir dir;
  SafetensorsWriter w;
  w.write(dir / "none.safetensors");
  auto f = SafetensorsFile::open(dir / "none.safetensors");
  EXPECT_TRUE(f->tensors().empty());
  EXPECT_EQ(f->metadata().at("format"), "pt");
}

TEST(Safetensors, UnsupportedDtypeIsListedButNotViewable) {
  ScratchDir dir;
  const std::string header = R"({"flags":{"dtype":"BOOL","shape":[3],"data_offsets":[8,11]},)"
                             R"("wide":{"dtype":"F64","shape":[1],"data_offsets":[0,8]},)"
                             R"("nib":{"dtype":"F4","shape":[2],"data_offsets":[11,12]}})";
  fp8rl::test::write_bytes(dir / "u.safetensors",
                           fp8rl::test::safetensors_bytes(header, std::string(12, '\1')));
  auto f = SafetensorsFile::open(dir / "u.safetensors");
  ASSERT_NE(f->find("flags"), nullptr);
  EXPECT_FALSE(f->find("flags")->supported);
  EXPECT_EQ(f->find("wide")->dtype_str, "F64");
  EXPECT_EQ(f->find("nib")->nbytes(), 1u);
  try {
    f->view("wide");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'wide'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("F64"), std::string::npos) << e.what();
  }
}

TEST(SafetensorsWriter, RejectsDuplicatesAndNonContiguousViews) {
  Tensor t = patterned({4, 4}, DType::f32, 0);
  SafetensorsWriter w;
  w.add("a", t);
  EXPECT_THROW(w.add("a", t), Error);
  TensorView strided = t.view();
  strided.shape = Shape{4, 2};
  strided.strides = {4, 2};
  EXPECT_THROW(w.add("b", strided), Error);
  EXPECT_THROW(w.add("__metadata__", t), Error);
}
