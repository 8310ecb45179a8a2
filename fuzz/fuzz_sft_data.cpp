// SFT dataset lines (train/sft_data.h), each read by one of several readers (chat template,
// truncation, loss options) chosen by the line.
#include <memory>
#include <vector>

#include "dataset_input.h"
#include "train/sft_data.h"

namespace {

struct Readers {
  fp8rl::fuzz::DatasetFixture f;
  std::vector<std::unique_ptr<fp8rl::SftRowReader>> readers;

  Readers() {
    for (int v = 0; v < 8; ++v) {
      fp8rl::SftDataOptions o;
      o.eos_token_id = f.eos_token_id;
      o.max_length = v % 2 ? 16 : 1024;
      o.truncation = v % 4 >= 2;
      o.assistant_only_loss = v < 4;
      if (v == 5) o.completion_only_loss = false;
      if (v == 6) o.dataset_text_field = "content";
      readers.push_back(
          std::make_unique<fp8rl::SftRowReader>(f.tokenizer, &f.chats[size_t(v) % 2], o));
    }
    readers.push_back(
        std::make_unique<fp8rl::SftRowReader>(f.tokenizer, nullptr, fp8rl::SftDataOptions{}));
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Readers r;
  fp8rl::fuzz::for_each_row(fp8rl::fuzz::as_text(data, size), [&](const auto& row, auto line) {
    const fp8rl::SftExample ex = r.readers[fp8rl::fuzz::pick(line, r.readers.size())]->read(row);
    // An accepted example: one mask entry per token, ids in the vocabulary, something to train.
    if (ex.loss_mask.size() != ex.input_ids.size() || ex.num_targets() <= 0) __builtin_trap();
    for (int32_t id : ex.input_ids)
      if (id < 0 || id >= r.f.tokenizer.vocab_size()) __builtin_trap();
  });
  return 0;
}
