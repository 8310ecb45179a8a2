// Open-addressing hash maps for the tokenizer's hot lookups (vocabulary strings, merge pairs):
// one flat probe array each, linear probing, power-of-two capacity. Built once at load time,
// read-only afterwards. std::unordered_map's node per entry costs more memory and cache
// misses than the whole BPE step on a short word.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

namespace fp8rl::tok {

// Byte string -> int32 id. Keys are views: the caller keeps their storage alive and unmoved.
class StringIdMap {
 public:
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    slots_.assign(cap, Slot{});
    mask_ = cap - 1;
    size_ = 0;
  }
  // Inserts or overwrites (the last duplicate wins, as in tokenizers' HashMap collect).
  void insert(std::string_view key, int32_t value) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    const uint64_t h = hash(key);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.value < 0) {
        s = Slot{key.data(), static_cast<uint32_t>(key.size()), value, static_cast<uint32_t>(h)};
        ++size_;
        return;
      }
      if (s.tag == static_cast<uint32_t>(h) && view(s) == key) {
        s.value = value;
        return;
      }
    }
  }
  // The id of key, or -1.
  int32_t find(std::string_view key) const {
    if (slots_.empty()) return -1;
    const uint64_t h = hash(key);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.value < 0) return -1;
      if (s.tag == static_cast<uint32_t>(h) && view(s) == key) return s.value;
    }
  }
  size_t size() const { return size_; }

 private:
  struct Slot {
    const char* data = nullptr;
    uint32_t length = 0;
    int32_t value = -1;  // -1: empty
    uint32_t tag = 0;    // low hash bits, compared before the bytes
  };
  static uint64_t hash(std::string_view key) { return std::hash<std::string_view>{}(key); }
  static std::string_view view(const Slot& s) { return {s.data, s.length}; }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    reserve(old.empty() ? 8 : old.size());
    for (const Slot& s : old) {
      if (s.value >= 0) insert(view(s), s.value);
    }
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

// (left id, right id) -> (rank, merged id): the BPE merge table.
class MergeMap {
 public:
  struct Merge {
    int32_t rank = -1;  // -1: no merge
    int32_t merged_id = -1;
  };
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    slots_.assign(cap, Slot{});
    mask_ = cap - 1;
    size_ = 0;
  }
  // Inserts or overwrites (the last duplicate wins).
  void insert(int32_t left, int32_t right, Merge merge) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    const uint64_t k = key(left, right);
    for (size_t i = hash(k) & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.key == kEmpty) ++size_;
      if (s.key == kEmpty || s.key == k) {
        s.key = k;
        s.merge = merge;
        return;
      }
    }
  }
  Merge find(int32_t left, int32_t right) const {
    const uint64_t k = key(left, right);
    for (size_t i = hash(k) & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == k) return s.merge;
      if (s.key == kEmpty) return Merge{};
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~0ull;
  struct Slot {
    uint64_t key = kEmpty;
    Merge merge;
  };
  static uint64_t key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  static uint64_t hash(uint64_t k) { return (k * 0x9E3779B97F4A7C15ull) >> 20; }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    reserve(old.size());
    for (const Slot& s : old) {
      if (s.key != kEmpty)
        insert(static_cast<int32_t>(s.key >> 32), static_cast<int32_t>(s.key), s.merge);
    }
  }

  std::vector<Slot> slots_ = std::vector<Slot>(16);
  size_t mask_ = 15;
  size_t size_ = 0;
};

}  // namespace fp8rl::tok
