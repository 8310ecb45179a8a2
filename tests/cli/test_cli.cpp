// The fp8rl binary end to end: the happy paths, and bad input of every kind giving a clear
// message and a non-zero exit (never a crash).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "formats/npy.h"
#include "formats/safetensors.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace fp8rl;

namespace {

struct Result {
  int exit_code;  // -1: killed by a signal
  std::string output;
};

Result run(const std::string& args) {
  const std::string cmd = std::string(FP8RL_BIN) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  Result r{0, ""};
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

void expect_error(const std::string& args, const std::string& fragment) {
  const Result r = run(args);
  EXPECT_GT(r.exit_code, 0) << args << "\n" << r.output;
  EXPECT_NE(r.output.find(fragment), std::string::npos) << args << "\n" << r.output;
}

std::string temp(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("fp8rl_cli_" + name + std::to_string(::getpid()));
  fs::remove_all(p);
  return p.string();
}

const std::string kQwen3 = fp8rl::test::golden_dir("qwen3");

TEST(Cli, HelpForEverySubcommand) {
  for (const char* sub : {"info", "logits", "quantize", "init", "schemes"}) {
    const Result r = run(std::string(sub) + " --help");
    EXPECT_EQ(r.exit_code, 0) << sub;
    EXPECT_NE(r.output.find("Usage"), std::string::npos) << sub;
  }
}

TEST(Cli, LogitsWritesTheNpy) {
  const std::string out = temp("logits") + ".npy";
  const Result r = run("logits " + kQwen3 + " --ids 5,6,7 --fp8 row --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Tensor t = read_npy(out);
  EXPECT_EQ(t.shape(), (Shape{3, 256}));
  fs::remove(out);
}

// --activations bf16 emulates CUDA's bf16 activations on the CPU: other logits, close ones.
TEST(Cli, LogitsWithBf16Activations) {
  const std::string f32 = temp("logits_f32") + ".npy", bf16 = temp("logits_bf16") + ".npy";
  const std::string args = "logits " + kQwen3 + " --ids 5,6,7,8 --fp8 block --device cpu";
  ASSERT_EQ(run(args + " --out " + f32).exit_code, 0);
  const Result r = run(args + " --activations bf16 --out " + bf16);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Tensor a = read_npy(f32), b = read_npy(bf16);
  ASSERT_EQ(b.shape(), a.shape());
  const double d = fp8rl::test::rel_max_diff(b, a);
  EXPECT_GT(d, 0.0);
  EXPECT_LT(d, 0.5);
  EXPECT_NE(run("logits --help").output.find("--activations"), std::string::npos);
  fs::remove(f32);
  fs::remove(bf16);
}

TEST(Cli, InitQuantizeInfo) {
  const std::string dir = temp("init"), q = temp("q");
  ASSERT_EQ(run("init --arch gemma3 --preset tiny --out " + dir + " --seed 3").exit_code, 0);
  const Result qr = run("quantize " + dir + " " + q + " --scheme block --format fp8");
  ASSERT_EQ(qr.exit_code, 0) << qr.output;
  const Result info = run("info " + q);
  ASSERT_EQ(info.exit_code, 0) << info.output;
  EXPECT_NE(info.output.find("Gemma3ForCausalLM"), std::string::npos);
  EXPECT_NE(info.output.find("fp8: weights block scaling (weight_scale_inv)"), std::string::npos)
      << info.output;
  EXPECT_NE(info.output.find("F8_E4M3"), std::string::npos);
  const Result s = run("schemes " + dir + " --tokens 8 --repeat 1");
  ASSERT_EQ(s.exit_code, 0) << s.output;
  EXPECT_NE(s.output.find("block"), std::string::npos);
  expect_error("schemes " + q, "already FP8");
  fs::remove_all(dir);
  fs::remove_all(q);
}

TEST(Cli, BadArgumentsAreClearErrors) {
  expect_error("", "A subcommand is required");
  expect_error("bogus", "unknown command 'bogus'");
  expect_error("info /nonexistent/model", "cannot open '/nonexistent/model/config.json'");
  expect_error("logits " + kQwen3 + " --ids 1,x,3 --out /tmp/x.npy", "'x' is not a token id");
  expect_error("logits " + kQwen3 + " --ids 1,,3 --out /tmp/x.npy", "'' is not a token id");
  expect_error("logits " + kQwen3 + " --ids 1,-2 --out /tmp/x.npy", "'-2' is not a token id");
  expect_error("logits " + kQwen3 + " --ids 1,300 --out /tmp/x.npy",
               "token id 300 is outside the vocabulary");
  expect_error("logits " + kQwen3 + " --ids 1 --fp8 int4 --out /tmp/x.npy",
               "unknown FP8 scheme 'int4'");
  expect_error("logits " + kQwen3 + " --ids 1 --device tpu --out /tmp/x.npy",
               "'tpu' is not a device");
  expect_error("logits " + kQwen3 + " --ids 1 --activations fp16 --out /tmp/x.npy",
               "'fp16' is not f32 or bf16");
  expect_error("logits " + kQwen3 + " --ids 1 --device cuda --activations bf16 --out /tmp/x.npy",
               "--activations bf16 applies to --device cpu only; CUDA activations are always bf16");
  expect_error("logits " + kQwen3 + " --ids 1 --out /nonexistent/dir/x.npy", "x.npy");
  expect_error("logits " + kQwen3 + " --ids 1", "--out is required");
  expect_error("quantize " + kQwen3 + " /tmp/q --scheme off", "choose row, block or tensor");
  expect_error("quantize " + kQwen3 + " /tmp/q --scheme row --format fp8", "block scales only");
  expect_error("quantize " + kQwen3 + " /tmp/q --scheme row --format gguf",
               "unknown checkpoint format 'gguf'");
  expect_error("init --arch bert --preset tiny --out /tmp/b", "'bert' is not one of");
  expect_error("init --arch qwen3 --preset 9000b --out /tmp/b", "unknown preset 'qwen3-9000b'");
  expect_error("schemes " + kQwen3 + " --tokens 0", "--tokens must be positive");
}

TEST(Cli, CorruptModelsAreClearErrors) {
  const std::string dir = temp("corrupt");
  fs::create_directories(dir);
  std::ofstream(dir + "/config.json") << "{ not json";
  expect_error("info " + dir, "is not valid JSON");
  fs::copy_file(kQwen3 + "/config.json", dir + "/config.json",
                fs::copy_options::overwrite_existing);
  expect_error("info " + dir, "model.safetensors");  // no weights at all
  {
    std::ifstream in(kQwen3 + "/model.safetensors", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(dir + "/model.safetensors", std::ios::binary)
        << bytes.substr(0, bytes.size() / 2);
  }
  expect_error("logits " + dir + " --ids 1 --out /tmp/x.npy", "model.safetensors");
  {
    std::ifstream f(kQwen3 + "/config.json");
    std::string c((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    c.replace(c.find("\"hidden_size\": 192"), 18, "\"hidden_size\": 128");
    std::ofstream(dir + "/config.json") << c;
  }
  fs::copy_file(kQwen3 + "/model.safetensors", dir + "/model.safetensors",
                fs::copy_options::overwrite_existing);
  expect_error(
      "logits " + dir + " --ids 1 --out /tmp/x.npy",
      "tensor 'model.embed_tokens.weight' has shape [256, 192], the config implies [256, 128]");
  fs::remove_all(dir);
}

}  // namespace

namespace {

// Every argument error: exit code 1 and exactly one line, "fp8rl: error: ...".
void expect_one_line_error(const std::string& args, const std::string& fragment) {
  const Result r = run(args);
  EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.output;
  EXPECT_EQ(r.output.rfind("fp8rl: error: ", 0), 0u) << args << "\n" << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << args << "\n" << r.output;
  EXPECT_NE(r.output.find(fragment), std::string::npos) << args << "\n" << r.output;
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A snapshot of every file under dir (name -> bytes), to show that a refused command left the
// input untouched.
std::map<std::string, std::string> snapshot(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) files[e.path().string()] = file_bytes(e.path().string());
  return files;
}

}  // namespace

TEST(Cli, ArgumentErrorsAreOneLineWithExitCodeOne) {
  expect_one_line_error("info", "is required");
  expect_one_line_error("", "subcommand");
  expect_one_line_error("nosuchcommand", "unknown command 'nosuchcommand'");
  expect_one_line_error("info " + kQwen3 + " --bogus", "--bogus");
  expect_one_line_error("logits " + kQwen3 + " --ids", "--ids");
  expect_one_line_error("init --arch qwen3 --preset tiny --out /tmp/x --seed notanumber", "seed");
  expect_one_line_error("schemes " + kQwen3 + " --tokens 0", "--tokens must be positive");
  // --help and --version still succeed.
  EXPECT_EQ(run("--help").exit_code, 0);
  EXPECT_EQ(run("info --help").exit_code, 0);
  const Result v = run("--version");
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_NE(v.output.find("fp8rl"), std::string::npos);
}

TEST(Cli, OutputsNeverOverwriteInputsOrSpecialFiles) {
  const std::string base = temp("outputs");
  const std::string model = base + "/model", link = base + "/link";
  fs::create_directories(base);
  ASSERT_EQ(run("init --arch qwen3 --preset tiny --out " + model).exit_code, 0);
  fs::create_directory_symlink(model, link);
  const auto before = snapshot(model);
  for (const std::string& out :
       {model, model + "/", model + "/.", model + "/../model", link, base, base + "/."}) {
    expect_one_line_error("quantize " + model + " " + out + " --scheme row", "refusing to write");
  }
  EXPECT_EQ(snapshot(model), before);
  // init over an existing model directory: refused, unless --force.
  expect_one_line_error("init --arch qwen3 --preset tiny --out " + model + " --seed 9",
                        "already holds a model: give --force");
  EXPECT_EQ(snapshot(model), before);
  ASSERT_EQ(run("init --arch qwen3 --preset tiny --out " + model + " --seed 9 --force").exit_code,
            0);
  EXPECT_NE(snapshot(model), before);

  // logits --out: never a FIFO, a symlink, a device or an input file.
  const std::string fifo = base + "/fifo", target = base + "/target.npy", sym = base + "/sym.npy";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::ofstream(target) << "keep";
  fs::create_symlink(target, sym);
  expect_one_line_error("logits " + model + " --ids 1 --out " + fifo, "is a FIFO");
  expect_one_line_error("logits " + model + " --ids 1 --out " + sym, "is a symbolic link");
  EXPECT_EQ(file_bytes(target), "keep");
  expect_one_line_error("logits " + model + " --ids 1 --out " + model + "/config.json",
                        "inside the input");
  expect_one_line_error("logits " + model + " --ids 1 --out " + model, "is a directory");
  struct stat null_before, null_after;
  ASSERT_EQ(::stat("/dev/null", &null_before), 0);
  expect_one_line_error("logits " + model + " --ids 1 --out /dev/null", "is a device");
  ASSERT_EQ(::stat("/dev/null", &null_after), 0);
  EXPECT_TRUE(S_ISCHR(null_after.st_mode));
  EXPECT_EQ(null_before.st_ino, null_after.st_ino);
  EXPECT_TRUE(fs::is_fifo(fifo));
  // A regular file is replaced (write-then-rename).
  ASSERT_EQ(run("logits " + model + " --ids 1,2 --out " + target).exit_code, 0);
  EXPECT_EQ(read_npy(target).shape().dims[0], 2);
  fs::remove_all(base);
}

TEST(Cli, InputsAreRegularFilesAndBoundedJson) {
  const std::string base = temp("inputs");
  const std::string model = base + "/model";
  fs::create_directories(base);
  ASSERT_EQ(run("init --arch qwen3 --preset tiny --out " + model).exit_code, 0);
  // A FIFO in place of config.json fails at once instead of blocking in open().
  fs::rename(model + "/config.json", base + "/config.json");
  ASSERT_EQ(::mkfifo((model + "/config.json").c_str(), 0600), 0);
  expect_one_line_error("info " + model, "is not a regular file");
  fs::remove(model + "/config.json");
  // 100k-deep nesting: a clean error from every file kind the CLI reads.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  std::ofstream(model + "/config.json") << R"({"architectures":)" << deep << "}";
  expect_one_line_error("info " + model, "limit of 256");
  fs::copy_file(base + "/config.json", model + "/config.json",
                fs::copy_options::overwrite_existing);
  std::ofstream(base + "/messages.json") << deep;
  std::ofstream(model + "/tokenizer_config.json") << R"({"chat_template":"x"})";
  expect_one_line_error("chat-template " + model + " --messages-file " + base + "/messages.json",
                        "limit of 256");
  std::ofstream(model + "/tokenizer_config.json") << R"({"chat_template":"x","y":)" << deep << "}";
  expect_one_line_error("chat-template " + model + " --messages-file " + base + "/messages.json",
                        "limit of 256");
  // More tokens than the model has positions (the golden Qwen3: max_position_embeddings 256).
  std::string ids = "1";
  for (int i = 0; i < 256; ++i) ids += ",1";
  expect_one_line_error("logits " + kQwen3 + " --ids " + ids + " --out " + base + "/x.npy",
                        "257 tokens, more than the model's max_position_embeddings 256");
  fs::remove_all(base);
}

// info checks the checkpoint against its architecture as loading does.
TEST(Cli, InfoRejectsACheckpointWithTensorsMissing) {
  const std::string base = temp("info_missing");
  const std::string model = base + "/model";
  fs::create_directories(base);
  ASSERT_EQ(run("init --arch qwen3 --preset tiny --out " + model).exit_code, 0);
  ASSERT_EQ(run("info " + model).exit_code, 0);
  {
    const Checkpoint ck = Checkpoint::open(model);
    std::vector<std::pair<std::string, TensorView>> kept;
    std::map<std::string, std::string> copies;  // the views must outlive the mapping
    for (const std::string& n : ck.names()) {
      if (n == "model.layers.0.mlp.down_proj.weight") continue;
      const TensorView v = ck.view(n);
      copies[n].assign(static_cast<const char*>(v.data), v.nbytes());
    }
    for (auto& [n, bytes] : copies)
      kept.emplace_back(n, TensorView(bytes.data(), ck.info(n).dtype, ck.info(n).shape));
    write_checkpoint(base + "/rewritten", kept);
  }
  fs::rename(base + "/rewritten/model.safetensors", model + "/model.safetensors");
  expect_one_line_error("info " + model,
                        "missing tensors (1): model.layers.0.mlp.down_proj.weight");
  fs::remove_all(base);
}
