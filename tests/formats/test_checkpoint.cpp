#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <set>

#include "core/check.h"
#include "formats/safetensors.h"
#include "test_util.h"

using namespace fp8rl;
using fp8rl::test::expect_error;
using fp8rl::test::ScratchDir;

namespace {

std::vector<std::pair<std::string, Tensor>> make_tensors() {
  std::vector<std::pair<std::string, Tensor>> out;
  const DType dts[] = {DType::bf16, DType::f32, DType::f8e4m3, DType::i64};
  for (int i = 0; i < 12; ++i) {
    Tensor t = Tensor::empty({i % 3 + 1, 16}, dts[i % 4]);
    auto* p = t.ptr<unsigned char>();
    for (size_t b = 0; b < t.nbytes(); ++b) p[b] = static_cast<unsigned char>(b * 13 + i);
    out.emplace_back("model.layers." + std::to_string(i) + ".weight", std::move(t));
  }
  out.emplace_back("model.empty", Tensor::empty({0}, DType::f16));
  return out;
}

std::vector<std::pair<std::string, TensorView>> views_of(
    const std::vector<std::pair<std::string, Tensor>>& ts) {
  std::vector<std::pair<std::string, TensorView>> out;
  for (const auto& [n, t] : ts) out.emplace_back(n, t.view());
  return out;
}

void write_index(const std::string& path, const nlohmann::json& weight_map,
                 nlohmann::json metadata = nlohmann::json::object()) {
  fp8rl::test::write_bytes(
      path, nlohmann::json{{"metadata", metadata}, {"weight_map", weight_map}}.dump());
}

}  // namespace

TEST(Checkpoint, ShardedRoundTripThroughTheIndex) {
  ScratchDir dir;
  const auto tensors = make_tensors();
  write_checkpoint(dir.str(), views_of(tensors), /*max_shard_bytes=*/200);

  const std::string index_path = dir / "model.safetensors.index.json";
  ASSERT_TRUE(std::filesystem::exists(index_path));
  EXPECT_FALSE(std::filesystem::exists(dir / "model.safetensors"));
  const auto index = nlohmann::json::parse(fp8rl::test::read_bytes(index_path));
  size_t total = 0;
  for (const auto& [n, t] : tensors) total += t.nbytes();
  EXPECT_EQ(index["metadata"]["total_size"].get<size_t>(), total);
  EXPECT_EQ(index["weight_map"].size(), tensors.size());

  Checkpoint c = Checkpoint::open(dir.str());
  EXPECT_GT(c.files().size(), 2u);
  std::set<std::string> shard_files;
  for (const auto& f : c.files()) {
    EXPECT_NE(f->path().find("-of-0000"), std::string::npos) << f->path();
    shard_files.insert(f->path());
  }
  EXPECT_EQ(shard_files.size(), c.files().size());
  EXPECT_EQ(c.total_bytes(), total);
  std::vector<std::string> names = c.names();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_EQ(names.size(), tensors.size());
  for (const auto& [n, t] : tensors) {
    ASSERT_TRUE(c.contains(n));
    EXPECT_EQ(
        c.file_of(n),
        (std::filesystem::path(dir.str()) / index["weight_map"][n].get<std::string>()).string());
    const TensorView v = c.view(n);
    EXPECT_EQ(v.shape, t.shape());
    EXPECT_EQ(v.dtype, t.dtype());
    EXPECT_TRUE(t.nbytes() == 0 || std::memcmp(v.data, t.view().data, t.nbytes()) == 0) << n;
    EXPECT_EQ(c.info(n).nbytes(), t.nbytes());
  }
  Checkpoint by_index = Checkpoint::open(index_path);
  EXPECT_EQ(by_index.names(), c.names());
  EXPECT_EQ(by_index.file_of(tensors[0].first), c.file_of(tensors[0].first));
  EXPECT_FALSE(c.contains("nope"));
  expect_error([&] { c.info("nope"); }, {"'nope'", dir.str()});
  expect_error([&] { c.view("nope"); }, {"'nope'"});

  // Rewriting the same folder unsharded replaces the index.
  write_checkpoint(dir.str(), views_of(tensors));
  EXPECT_FALSE(std::filesystem::exists(index_path));
  Checkpoint single = Checkpoint::open(dir.str());
  EXPECT_EQ(single.files().size(), 1u);
  EXPECT_EQ(single.names(), names);
}

TEST(Checkpoint, SingleFilePathAndFolder) {
  ScratchDir dir;
  const auto tensors = make_tensors();
  write_checkpoint(dir.str(), views_of(tensors));
  const std::string file = dir / "model.safetensors";
  ASSERT_TRUE(std::filesystem::exists(file));
  Checkpoint a = Checkpoint::open(file), b = Checkpoint::open(dir.str());
  EXPECT_EQ(a.names(), b.names());
  EXPECT_EQ(a.file_of(tensors[0].first), file);
  EXPECT_EQ(a.total_bytes(), b.total_bytes());
}

TEST(Checkpoint, WriterRejectsDuplicateNames) {
  ScratchDir dir;
  Tensor t = Tensor::zeros({4}, DType::f32);
  expect_error(
      [&] {
        write_checkpoint(dir.str(), {{"w", t.view()}, {"w", t.view()}}, 8);
      },
      {"duplicate", "'w'"});
}

TEST(Checkpoint, IndexWithEmptyMetadataAndNoTotalSizeIsAccepted) {
  ScratchDir dir;
  Tensor t = Tensor::zeros({4}, DType::f32);
  SafetensorsWriter w;
  w.add("x", t);
  w.write(dir / "part.safetensors");
  write_index(dir / "model.safetensors.index.json", {{"x", "part.safetensors"}});
  Checkpoint c = Checkpoint::open(dir.str());
  EXPECT_EQ(c.names(), std::vector<std::string>{"x"});
}

TEST(Checkpoint, InconsistentIndexesAreRejectedNamingTheTensor) {
  ScratchDir dir;
  Tensor t = Tensor::zeros({4}, DType::f32);
  SafetensorsWriter w1, w2;
  w1.add("a", t);
  w1.add("shared", t);
  w2.add("b", t);
  w2.add("shared", t);
  w1.write(dir / "s1.safetensors");
  w2.write(dir / "s2.safetensors");
  const std::string index = dir / "model.safetensors.index.json";

  write_index(index, {{"a", "s1.safetensors"}, {"b", "missing.safetensors"}});
  expect_error([&] { Checkpoint::open(dir.str()); }, {index, "missing.safetensors", "'b'"});

  write_index(index, {{"a", "s1.safetensors"}, {"ghost", "s1.safetensors"}});
  expect_error([&] { Checkpoint::open(dir.str()); }, {index, "'ghost'", "s1.safetensors"});

  write_index(index,
              {{"a", "s1.safetensors"}, {"b", "s2.safetensors"}, {"shared", "s1.safetensors"}});
  expect_error([&] { Checkpoint::open(dir.str()); },
               {index, "'shared'", "two shards", "s1.safetensors", "s2.safetensors"});

  write_index(index, {{"shared", "s1.safetensors"}});
  expect_error([&] { Checkpoint::open(dir.str()); }, {index, "'a'", "not in the index"});

  write_index(index, {{"a", "../s1.safetensors"}});
  expect_error([&] { Checkpoint::open(dir.str()); }, {index, "'a'", "../s1.safetensors"});

  write_index(index, {{"a", 7}});
  expect_error([&] { Checkpoint::open(dir.str()); }, {index, "'a'"});

  fp8rl::test::write_bytes(index, R"({"metadata": {}})");
  expect_error([&] { Checkpoint::open(dir.str()); }, {index, "weight_map"});

  fp8rl::test::write_bytes(index, R"({"weight_map": {)");
  expect_error([&] { Checkpoint::open(dir.str()); }, {index, "JSON"});

  // A broken shard is reported with its own path.
  fp8rl::test::write_bytes(dir / "s2.safetensors", "garbage");
  write_index(index, {{"b", "s2.safetensors"}});
  expect_error([&] { Checkpoint::open(dir.str()); }, {dir / "s2.safetensors"});
}

// The goldens' model.safetensors files were written by HF transformers (the Rust writer).
TEST(Checkpoint, OpensFilesWrittenByTransformers) {
  const std::string root = std::string(FP8RL_TEST_DATA) + "/goldens";
  int seen = 0;
  for (const char* arch : {"llama", "qwen2", "qwen3", "mistral", "gemma3"}) {
    const std::string dir = root + "/" + arch;
    if (!std::filesystem::exists(dir + "/model.safetensors")) continue;
    Checkpoint c = Checkpoint::open(dir);
    EXPECT_FALSE(c.names().empty()) << dir;
    for (const auto& n : c.names()) {
      EXPECT_TRUE(c.info(n).supported) << n;
      EXPECT_EQ(c.view(n).nbytes(), c.info(n).nbytes());
    }
    ++seen;
  }
  if (seen == 0) GTEST_SKIP() << "no goldens under " << root;
}

TEST(Checkpoint, MissingPathsAreErrors) {
  ScratchDir dir;
  expect_error([&] { Checkpoint::open(dir / "nowhere"); }, {"nowhere", "does not exist"});
  expect_error([&] { Checkpoint::open(dir.str()); }, {dir.str(), "model.safetensors"});
}
