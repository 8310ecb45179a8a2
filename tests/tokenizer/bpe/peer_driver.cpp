// Test driver for the peer comparison (tools/peers/check_tokenizer.mjs): encodes every line
// of a JSONL file of strings and prints what tokenize_peer.mjs prints, one JSON object per line:
//   {"ids": [...], "decoded": "...", "decoded_skip": "..."}
// It also streams each id sequence through IncrementalDecoder (with and without
// skip_special) and fails when the concatenated pieces differ from the full decode.
//
//   peer_driver TOKENIZER_DIR IN.jsonl [--special] [--text-file]
// --text-file treats IN as one plain text and prints one object for it.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "tokenizer/incremental_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

using fp8rl::tok::IncrementalDecoder;
using fp8rl::tok::Tokenizer;

namespace {

std::string stream_decode(const Tokenizer& t, const std::vector<int32_t>& ids, bool skip) {
  IncrementalDecoder d(t, skip);
  std::string text;
  for (int32_t id : ids) {
    const std::string piece = d.push(id);
    CHECK(fp8rl::tok::find_invalid_utf8(piece) == std::string::npos,
          "incremental decoder emitted invalid UTF-8");
    text += piece;
  }
  return text + d.finish();
}

nlohmann::json process(const Tokenizer& t, const std::string& text, bool special, size_t line) {
  const std::vector<int32_t> ids = t.encode(text, special);
  nlohmann::json out;
  out["ids"] = ids;
  for (bool skip : {false, true}) {
    const std::string decoded = t.decode(ids, skip);
    const std::string streamed = stream_decode(t, ids, skip);
    CHECK(streamed == decoded,
          "line {}: incremental decode (skip_special={}) gave '{}', full "
          "decode '{}'",
          line, skip, streamed, decoded);
    out[skip ? "decoded_skip" : "decoded"] = decoded;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    CHECK(argc >= 3, "usage: peer_driver TOKENIZER_DIR IN.jsonl [--special] [--text-file]");
    bool special = false, text_file = false;
    for (int i = 3; i < argc; ++i) {
      const std::string a = argv[i];
      CHECK(a == "--special" || a == "--text-file", "unknown option {}", a);
      special = special || a == "--special";
      text_file = text_file || a == "--text-file";
    }
    const Tokenizer t = Tokenizer::from_file(argv[1]);
    std::ifstream in(argv[2], std::ios::binary);
    CHECK(in.good(), "cannot open {}", argv[2]);
    std::ostringstream out;
    if (text_file) {
      std::ostringstream ss;
      ss << in.rdbuf();
      out << process(t, ss.str(), special, 1).dump() << '\n';
    } else {
      std::string line;
      for (size_t n = 1; std::getline(in, line); ++n) {
        if (line.empty()) continue;
        out << process(t, nlohmann::json::parse(line).get<std::string>(), special, n).dump()
            << '\n';
      }
    }
    std::cout << out.str();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "peer_driver: %s\n", e.what());
    return 1;
  }
}
