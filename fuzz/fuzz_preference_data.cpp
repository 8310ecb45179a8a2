// DPO preference and KTO unpaired dataset lines (rl/preference_data.h), each read both ways by
// one of several readers (chat template, length limits, truncation) chosen by the line.
#include <memory>
#include <vector>

#include "dataset_input.h"
#include "rl/preference_data.h"

namespace {

struct Readers {
  fp8rl::fuzz::DatasetFixture f;
  std::vector<std::unique_ptr<fp8rl::PreferenceRowReader>> readers;

  Readers() {
    for (int v = 0; v < 6; ++v) {
      fp8rl::PreferenceDataOptions o;
      o.eos_token_id = f.eos_token_id;
      if (v % 3 == 1) o.max_length = 12, o.max_prompt_length = 6;
      if (v % 3 == 2) o.max_prompt_length = std::nullopt;
      o.truncation = v >= 3;
      readers.push_back(
          std::make_unique<fp8rl::PreferenceRowReader>(f.tokenizer, &f.chats[size_t(v) % 2], o));
    }
    readers.push_back(std::make_unique<fp8rl::PreferenceRowReader>(f.tokenizer, nullptr,
                                                                   fp8rl::PreferenceDataOptions{}));
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Readers r;
  const auto check = [&](const std::vector<int32_t>& ids) {
    for (int32_t id : ids)
      if (id < 0 || id >= r.f.tokenizer.vocab_size()) __builtin_trap();
  };
  fp8rl::fuzz::for_each_row(fp8rl::fuzz::as_text(data, size), [&](const auto& row, auto line) {
    const fp8rl::UnpairedExample e =
        r.readers[fp8rl::fuzz::pick(line, r.readers.size())]->read_unpaired(row);
    check(e.prompt);
    check(e.completion);
  });
  fp8rl::fuzz::for_each_row(fp8rl::fuzz::as_text(data, size), [&](const auto& row, auto line) {
    const fp8rl::PreferencePair p = r.readers[fp8rl::fuzz::pick(line, r.readers.size())]->read(row);
    for (const auto* ids : {&p.prompt, &p.chosen, &p.rejected})
      for (int32_t id : *ids)
        if (id < 0 || id >= r.f.tokenizer.vocab_size()) __builtin_trap();
  });
  return 0;
}
