#include <gtest/gtest.h>

#include "core/arena.h"
#include "core/check.h"
#include "core/parallel.h"
#include "core/tensor.h"
#include "test_util.h"

using namespace fp8rl;

TEST(Tensor, ContiguousStridesAndSlices) {
  Tensor t = Tensor::zeros({3, 4, 5}, DType::f32);
  EXPECT_EQ(t.view().strides[0], 20);
  EXPECT_EQ(t.view().strides[2], 1);
  EXPECT_TRUE(t.view().is_contiguous());
  TensorView rows = t.view().slice_rows(1, 3);
  EXPECT_EQ(rows.shape, (Shape{2, 4, 5}));
  EXPECT_EQ(rows.ptr<float>(), t.ptr<float>() + 20);
  EXPECT_THROW(t.view().slice_rows(2, 4), Error);
  EXPECT_THROW(t.view().reshape({7}), Error);
}

TEST(Check, ReportsFileLineAndMessage) {
  try {
    CHECK(1 + 1 == 3, "arithmetic is {}", "broken");
    FAIL() << "CHECK did not throw";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "arithmetic is broken");
    EXPECT_GT(e.line(), 0);
    EXPECT_NE(e.describe().find("test_tensor.cpp"), std::string::npos);
  }
}

TEST(Arena, AllocRewindAndExhaustion) {
  Arena a(1024);
  {
    ArenaScope scope(a);
    TensorView v = a.alloc({10}, DType::f32);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data) % 64, 0u);
    EXPECT_EQ(a.mark(), 64u);
    EXPECT_THROW(a.alloc({1000}, DType::f32), Error);
  }
  EXPECT_EQ(a.mark(), 0u);
  EXPECT_EQ(a.high_water(), 64u);
}

TEST(Parallel, ForwardsExceptions) {
  std::vector<int> hits(100, 0);
  parallel_for(0, 100, [&](int64_t i) { hits[i] += 1; });
  for (int h : hits) EXPECT_EQ(h, 1);
  EXPECT_THROW(parallel_for(0, 10, [](int64_t i) { CHECK(i != 5, "boom"); }), Error);
}

TEST(Arena, OverExternalMemory) {
  std::vector<char> block(4096);
  Arena a(Device::cuda, 256);
  EXPECT_THROW(a.alloc({1}, DType::f32), Error);  // nothing attached yet
  a.attach(block.data(), block.size());
  TensorView v = a.alloc({3}, DType::f32);
  EXPECT_EQ(v.device, Device::cuda);
  EXPECT_EQ(v.data, static_cast<void*>(block.data()));
  EXPECT_EQ(a.mark(), 256u);
  EXPECT_THROW(a.reserve(1 << 20), Error);  // external memory is grown by attaching
  EXPECT_THROW(a.attach(block.data(), block.size()), Error);  // in use
  a.rewind(0);
  a.attach(block.data(), 512);
  EXPECT_THROW(a.alloc({200}, DType::f32), Error);
}

// The comparison every numeric test uses: same values give 0, a shape mismatch (even with equal
// element counts) fails every bound.
TEST(TestUtil, RelMaxDiffRequiresEqualShapes) {
  Tensor a = Tensor::zeros({2, 3}, DType::f32), b = Tensor::zeros({3, 2}, DType::f32);
  a.ptr<float>()[0] = b.ptr<float>()[0] = 2.0f;
  EXPECT_TRUE(std::isinf(test::rel_max_diff(a, b)));
  Tensor c = Tensor::zeros({2, 3}, DType::f32);
  c.ptr<float>()[0] = 2.0f;
  EXPECT_EQ(test::rel_max_diff(a, c), 0.0);
  c.ptr<float>()[1] = 1.0f;
  EXPECT_EQ(test::rel_max_diff(a, c), 0.5);
}
