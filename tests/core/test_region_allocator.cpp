#include <gtest/gtest.h>

#include <vector>

#include "core/check.h"
#include "core/region_allocator.h"
#include "core/rng.h"

using namespace fp8rl;

TEST(RegionAllocator, FirstFitHolesMergeAndTopComesDown) {
  RegionAllocator r(4096, 256);
  const size_t a = *r.allocate(1), b = *r.allocate(300), c = *r.allocate(256);
  EXPECT_EQ(a, 0u);
  EXPECT_EQ(b, 256u);  // one unit for a 1-byte block, two for 300 bytes
  EXPECT_EQ(c, 768u);
  EXPECT_EQ(r.top(), 1024u);
  EXPECT_EQ(r.used(), 1024u);
  r.free(b);  // a hole of 512 below the top
  EXPECT_EQ(r.top(), 1024u);
  EXPECT_EQ(r.free_below_top(), 512u);
  EXPECT_EQ(*r.allocate(200), 256u);  // first fit: into the hole, by address
  EXPECT_EQ(*r.allocate(256), 512u);  // the rest of the hole
  EXPECT_EQ(r.free_below_top(), 0u);
  r.free(512);
  r.free(256);  // merges with the free range at 512
  EXPECT_EQ(*r.allocate(512), 256u);
  r.free(256);
  r.free(c);  // the highest block: the top comes down over it and the merged hole below
  EXPECT_EQ(r.top(), 256u);
  EXPECT_EQ(r.used(), 256u);
  r.free(a);
  EXPECT_EQ(r.top(), 0u);
  EXPECT_EQ(r.blocks(), 0u);
}

TEST(RegionAllocator, ExhaustionAndMisuse) {
  RegionAllocator r(1000, 256);  // capacity rounds down to 768
  EXPECT_EQ(r.capacity(), 768u);
  EXPECT_FALSE(r.allocate(769).has_value());
  const size_t a = *r.allocate(512);
  EXPECT_FALSE(r.allocate(257).has_value());  // 256 left
  EXPECT_TRUE(r.allocate(256).has_value());
  EXPECT_FALSE(r.allocate(1).has_value());
  r.free(a);
  EXPECT_THROW(r.free(a), Error);   // a block freed twice
  EXPECT_THROW(r.free(17), Error);  // never allocated
  EXPECT_THROW(RegionAllocator(1024, 100), Error);
}

// Random allocations and frees against a map of which units are taken: blocks never overlap,
// stay aligned and inside the range, the top is the end of the highest live block, and a
// request fails only when no free run of units at or above the alignment fits it.
TEST(RegionAllocator, RandomOperationsAgainstAUnitMap) {
  constexpr size_t kUnit = 64, kUnits = 512;
  RegionAllocator r(kUnit * kUnits, kUnit);
  std::vector<int> owner(kUnits, -1);
  std::vector<std::pair<size_t, size_t>> live;  // offset, units
  int failures = 0;
  for (uint64_t i = 0; i < 20000; ++i) {
    const uint64_t h = rng_key(0x5eed, i);
    if (live.empty() || h % 3 != 0) {
      const size_t bytes = 1 + (rng_key(0xb17e5, i) % (kUnit * 40));
      const size_t units = (bytes + kUnit - 1) / kUnit;
      const auto got = r.allocate(bytes);
      size_t run = 0;
      bool fits = false;
      for (size_t u = 0; u < kUnits && !fits; ++u) {
        run = owner[u] < 0 ? run + 1 : 0;
        fits = run >= units;
      }
      ASSERT_EQ(got.has_value(), fits) << "step " << i;
      if (!got) {
        ++failures;
        continue;
      }
      ASSERT_EQ(*got % kUnit, 0u);
      for (size_t u = *got / kUnit; u < *got / kUnit + units; ++u) {
        ASSERT_LT(u, kUnits);
        ASSERT_EQ(owner[u], -1) << "overlap at unit " << u;
        owner[u] = int(i);
      }
      live.emplace_back(*got, units);
    } else {
      const size_t k = rng_key(0xf4ee, i) % live.size();
      r.free(live[k].first);
      for (size_t u = live[k].first / kUnit; u < live[k].first / kUnit + live[k].second; ++u)
        owner[u] = -1;
      live.erase(live.begin() + std::ptrdiff_t(k));
    }
    size_t top = 0, used = 0;
    for (const auto& [off, units] : live) {
      top = std::max(top, off + units * kUnit);
      used += units * kUnit;
    }
    ASSERT_EQ(r.top(), top) << "step " << i;
    ASSERT_EQ(r.used(), used);
  }
  EXPECT_GT(failures, 0);  // the range filled up at times: the failure branch was exercised
}
