#include "tokenizer/tokenizer_config.h"

#include <algorithm>

#include "core/input_file.h"
#include "tokenizer/json_util.h"
#include "tokenizer/tokenizer.h"

namespace fp8rl::tok {

namespace {

// tokenizer_config.json reaches a few MB (added_tokens_decoder of 256k-token vocabularies).
constexpr uint64_t kMaxConfigBytes = uint64_t{64} << 20;

std::string read_text(const std::filesystem::path& path) {
  return read_input_file(path, "model configuration file", kMaxConfigBytes);
}

Json parse(std::string_view text, std::string_view file) {
  Json j = parse_json_text(text, file);
  CHECK(j.is_object(), "{}: the top level must be a JSON object", file);
  return j;
}

// A special token is a string, an AddedToken object ({"content": ...}), or null.
std::optional<std::string> token_field(const Json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    return json_string(*it, "content", fmt::format("tokenizer_config.json {}", key));
  }
  RAISE("tokenizer_config.json: '{}' must be a string, an AddedToken object or null, got {}", key,
        json_excerpt(*it));
}

std::optional<bool> bool_field(const Json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  CHECK(it->is_boolean(), "tokenizer_config.json: '{}' must be true or false", key);
  return it->get<bool>();
}

std::optional<int32_t> id_field(const Json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  CHECK(it->is_number_integer(), "generation_config.json: '{}' must be an integer", key);
  return it->get<int32_t>();
}

void read_tokenizer_config(const Json& j, TokenizerConfig& c) {
  c.bos_token = token_field(j, "bos_token");
  c.eos_token = token_field(j, "eos_token");
  c.unk_token = token_field(j, "unk_token");
  c.pad_token = token_field(j, "pad_token");
  c.sep_token = token_field(j, "sep_token");
  c.cls_token = token_field(j, "cls_token");
  c.mask_token = token_field(j, "mask_token");
  if (auto it = j.find("additional_special_tokens"); it != j.end() && !it->is_null()) {
    CHECK(it->is_array(), "tokenizer_config.json: 'additional_special_tokens' must be a list");
    for (const Json& t : *it) {
      if (t.is_string()) {
        c.additional_special_tokens.push_back(t.get<std::string>());
      } else {
        c.additional_special_tokens.push_back(
            json_string(t, "content", "tokenizer_config.json additional_special_tokens"));
      }
    }
  }
  c.add_bos_token = bool_field(j, "add_bos_token");
  c.add_eos_token = bool_field(j, "add_eos_token");
  c.clean_up_tokenization_spaces = bool_field(j, "clean_up_tokenization_spaces").value_or(false);

  auto it = j.find("chat_template");
  if (it == j.end() || it->is_null()) return;
  if (it->is_string()) {
    c.chat_templates.push_back({"default", it->get<std::string>()});
    return;
  }
  // A list of {"name": ..., "template": ...}.
  CHECK(it->is_array(),
        "tokenizer_config.json: 'chat_template' must be a string or a list of "
        "{{\"name\", \"template\"}} objects");
  for (const Json& t : *it) {
    const std::string where = "tokenizer_config.json chat_template entry";
    c.chat_templates.push_back({json_string(t, "name", where), json_string(t, "template", where)});
  }
}

void read_generation_config(const Json& j, TokenizerConfig& c) {
  if (auto it = j.find("eos_token_id"); it != j.end() && !it->is_null()) {
    if (it->is_array()) {
      for (const Json& id : *it) {
        CHECK(id.is_number_integer(),
              "generation_config.json: eos_token_id entries must be integers");
        c.generation_eos_token_ids.push_back(id.get<int32_t>());
      }
    } else {
      CHECK(it->is_number_integer(),
            "generation_config.json: 'eos_token_id' must be an integer or a list of integers");
      c.generation_eos_token_ids.push_back(it->get<int32_t>());
    }
  }
  c.generation_bos_token_id = id_field(j, "bos_token_id");
  c.generation_pad_token_id = id_field(j, "pad_token_id");
}

void set_template(TokenizerConfig& c, std::string name, std::string source) {
  for (NamedChatTemplate& t : c.chat_templates) {
    if (t.name == name) {
      t.source = std::move(source);
      return;
    }
  }
  c.chat_templates.push_back({std::move(name), std::move(source)});
}

}  // namespace

TokenizerConfig TokenizerConfig::from_json_text(std::string_view tokenizer_config_json,
                                                std::string_view generation_config_json) {
  TokenizerConfig c;
  try {
    if (!tokenizer_config_json.empty()) {
      read_tokenizer_config(parse(tokenizer_config_json, "tokenizer_config.json"), c);
    }
    if (!generation_config_json.empty()) {
      read_generation_config(parse(generation_config_json, "generation_config.json"), c);
    }
  } catch (const Json::exception& e) {
    RAISE("model configuration: unexpected content: {}", e.what());
  }
  return c;
}

TokenizerConfig TokenizerConfig::load(const std::filesystem::path& path) {
  const std::filesystem::path model_dir =
      std::filesystem::is_regular_file(path) ? path.parent_path() : path;
  CHECK(std::filesystem::is_directory(model_dir),
        "{} is neither a model directory nor a tokenizer_config.json", path.string());
  auto optional_text = [&](const char* name) {
    const auto file = model_dir / name;
    return std::filesystem::exists(file) ? read_text(file) : std::string();
  };
  TokenizerConfig c = from_json_text(optional_text("tokenizer_config.json"),
                                     optional_text("generation_config.json"));
  if (const auto path = model_dir / "chat_template.jinja"; std::filesystem::exists(path)) {
    set_template(c, "default", read_text(path));
  }
  if (const auto dir = model_dir / "additional_chat_templates";
      std::filesystem::is_directory(dir)) {
    std::vector<std::filesystem::path> files;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      if (entry.is_regular_file() && entry.path().extension() == ".jinja")
        files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) set_template(c, f.stem().string(), read_text(f));
  }
  return c;
}

const std::string* TokenizerConfig::chat_template(std::string_view name) const {
  for (const NamedChatTemplate& t : chat_templates) {
    if (t.name == name) return &t.source;
  }
  return nullptr;
}

std::vector<std::pair<std::string, std::string>> TokenizerConfig::special_tokens_map() const {
  std::vector<std::pair<std::string, std::string>> out;
  const std::pair<const char*, const std::optional<std::string>*> fields[] = {
      {"bos_token", &bos_token},  {"eos_token", &eos_token}, {"unk_token", &unk_token},
      {"sep_token", &sep_token},  {"pad_token", &pad_token}, {"cls_token", &cls_token},
      {"mask_token", &mask_token}};
  for (const auto& [name, value] : fields) {
    if (*value) out.emplace_back(name, **value);
  }
  return out;
}

std::vector<int32_t> TokenizerConfig::stop_token_ids(const Tokenizer& tokenizer) const {
  std::vector<int32_t> ids = generation_eos_token_ids;
  if (eos_token) {
    const int32_t id = tokenizer.token_to_id(*eos_token);
    if (id >= 0 && std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  }
  return ids;
}

}  // namespace fp8rl::tok
