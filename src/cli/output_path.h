// Where a command may write, checked before any work is done. Paths are compared after
// resolution (symlinks, '.', '..': std::filesystem::weakly_canonical), so `quantize M M/`,
// `M/.`, `M/../M` and a symlink to M are all recognised as M.
#pragma once

#include <string>
#include <vector>

namespace fp8rl::cli {

// An output file (logits --out): never an input, nor an existing file inside an input
// directory; where it exists, a regular file (a symlink, FIFO, device such as /dev/null, or
// directory is refused, and left as it is). The file itself is written to a temporary name
// and renamed over the target by the writer. Empty inputs (optional ones not given) are skipped.
void check_output_file(const std::string& out, const std::vector<std::string>& inputs);

// An output directory (quantize OUT, init --out): never an input nor a directory holding one;
// where it exists, a directory, and one that already holds a model (config.json or
// *.safetensors) only with `force`.
void check_output_dir(const std::string& out, const std::vector<std::string>& inputs, bool force);

// A training run directory (sft, grpo, dpo --output-dir): never an input nor a directory
// holding one (`sft MODEL --out MODEL` would write adapters, checkpoints and logs among the
// model's files). Unlike check_output_dir it may hold a previous run's adapter: resuming
// writes into it. Empty inputs (an optional one not given) are skipped.
void check_run_dir(const std::string& dir, const std::vector<std::string>& inputs);

}  // namespace fp8rl::cli
