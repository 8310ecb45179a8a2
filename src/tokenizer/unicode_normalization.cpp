#include "tokenizer/unicode_normalization.h"

#include <algorithm>
#include <vector>

#include "tokenizer/unicode.h"
#include "tokenizer/unicode_tables.h"

namespace fp8rl::tok {

namespace {

namespace ut = unicode_tables;

// Hangul syllables compose and decompose arithmetically (Unicode §3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr char32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

uint8_t range_value(std::span<const ut::CodePointRange> table, char32_t cp) {
  auto it = std::upper_bound(table.begin(), table.end(), cp,
                             [](char32_t c, const ut::CodePointRange& r) { return c < r.first; });
  if (it == table.begin()) return 0;
  --it;
  return cp <= it->last ? it->value : 0;
}

uint8_t combining_class(char32_t cp) {
  return cp < 0x300 ? 0 : range_value(ut::kCombiningClasses, cp);
}

bool is_boundary(char32_t cp, NormalizationForm form) {
  if (form == NormalizationForm::kNfc) {
    return cp < ut::kFirstUnsafeNfc || !(range_value(ut::kQuickCheck, cp) & ut::kUnsafeNfc);
  }
  return cp < ut::kFirstUnsafeNfd || !(range_value(ut::kQuickCheck, cp) & ut::kUnsafeNfd);
}

void decompose(char32_t cp, std::vector<char32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  auto it =
      std::lower_bound(ut::kDecompositions.begin(), ut::kDecompositions.end(), cp,
                       [](const ut::Decomposition& d, char32_t c) { return d.code_point < c; });
  if (it == ut::kDecompositions.end() || it->code_point != cp) {
    out.push_back(cp);
    return;
  }
  decompose(it->first, out);
  if (it->second != 0) decompose(it->second, out);
}

// The primary composite of (a, b), or 0.
char32_t compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  auto it = std::lower_bound(ut::kCompositions.begin(), ut::kCompositions.end(), std::pair{a, b},
                             [](const ut::Composition& c, std::pair<char32_t, char32_t> k) {
                               return c.first != k.first ? c.first < k.first : c.second < k.second;
                             });
  return (it != ut::kCompositions.end() && it->first == a && it->second == b) ? it->composite : 0;
}

// Canonical ordering: a stable sort by combining class of every run of non-starters.
void reorder(std::vector<char32_t>& cps) {
  size_t i = 0;
  while (i < cps.size()) {
    if (combining_class(cps[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && combining_class(cps[j]) != 0) ++j;
    std::stable_sort(cps.begin() + i, cps.begin() + j, [](char32_t a, char32_t b) {
      return combining_class(a) < combining_class(b);
    });
    i = j;
  }
}

// Canonical composition (UAX #15 §1.3): a character combines with the last starter unless a
// character in between is a starter or has a combining class at least as high.
void compose_all(std::vector<char32_t>& cps) {
  if (cps.empty()) return;
  size_t out = 1;
  size_t starter = 0;
  bool have_starter = combining_class(cps[0]) == 0;
  int last_class = have_starter ? 0 : 256;
  for (size_t i = 1; i < cps.size(); ++i) {
    const char32_t c = cps[i];
    const int cc = combining_class(c);
    if (have_starter && (last_class < cc || last_class == 0)) {
      if (const char32_t composite = compose(cps[starter], c)) {
        cps[starter] = composite;
        continue;
      }
    }
    if (cc == 0) {
      starter = out;
      have_starter = true;
    }
    last_class = cc;
    cps[out++] = c;
  }
  cps.resize(out);
}

void normalize_segment(std::string_view segment, NormalizationForm form,
                       std::vector<char32_t>& scratch, std::string& out) {
  scratch.clear();
  for (size_t i = 0; i < segment.size();) decompose(next_code_point(segment, i), scratch);
  reorder(scratch);
  if (form == NormalizationForm::kNfc) compose_all(scratch);
  for (char32_t cp : scratch) append_utf8(out, cp);
}

}  // namespace

void normalize_unicode(std::string& text, NormalizationForm form) {
  // Text between two boundary code points normalizes independently of the rest, so only the
  // segments around non-boundary code points are rebuilt; the rest is copied as is.
  std::string out;
  std::vector<char32_t> scratch;
  size_t copied = 0;  // text[0, copied) is already in out
  size_t last_boundary = 0;
  size_t i = 0;
  const std::string_view s = text;
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      last_boundary = i++;
      continue;
    }
    const size_t at = i;
    const char32_t cp = next_code_point(s, i);
    if (is_boundary(cp, form)) {
      last_boundary = at;
      continue;
    }
    const size_t seg_begin = std::max(last_boundary, copied);
    size_t seg_end = i;
    while (seg_end < s.size()) {
      size_t next = seg_end;
      if (is_boundary(next_code_point(s, next), form)) break;
      seg_end = next;
    }
    if (out.empty()) out.reserve(s.size() + 16);
    out.append(s.substr(copied, seg_begin - copied));
    normalize_segment(s.substr(seg_begin, seg_end - seg_begin), form, scratch, out);
    copied = seg_end;
    last_boundary = seg_end;
    i = seg_end;
  }
  if (copied == 0) return;
  out.append(s.substr(copied));
  text = std::move(out);
}

const char* unicode_normalization_version() {
  return unicode_tables::kUnicodeVersion;
}

}  // namespace fp8rl::tok
