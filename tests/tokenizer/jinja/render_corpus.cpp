// Renders a batch of chat-template jobs with fp8rl's interpreter, for the peer comparison in
// tools/peers/jinja_render.py (which renders the same jobs with Python jinja2).
//
// Usage: jinja_render_corpus JOBS.json > RESULTS.json
// JOBS.json: {"fixed_now": "YYYY-MM-DDTHH:MM:SS", "jobs": [job...]}, where a job is either
//   {"id": ..., "template": "...", "context": {...}}                       (a raw template), or
//   {"id": ..., "config": "path", "template_name": "...", "messages": [...], "tools": ...,
//    "add_generation_prompt": bool, "variables": {...}}                    (HF's context)
// RESULTS.json: [{"id": ..., "ok": true, "text": "..."} | {"id": ..., "ok": false, "error": "..."}]
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>

#include "core/check.h"
#include "tokenizer/jinja/chat_template.h"

namespace {

// Configs and parsed templates by (path, template name): the corpus renders each many times.
struct LoadedTemplate {
  fp8rl::ChatTemplateConfig config;
  std::shared_ptr<const fp8rl::ChatTemplate> tpl;
};
using TemplateCache = std::map<std::pair<std::string, std::string>, LoadedTemplate>;

std::string render_job(const nlohmann::ordered_json& job, const fp8rl::ChatTemplateOptions& options,
                       TemplateCache& cache) {
  if (job.contains("template")) {
    return fp8rl::render_chat_template(job["template"].get<std::string>(),
                                       job.value("context", nlohmann::ordered_json::object()),
                                       options);
  }
  const auto key =
      std::make_pair(job["config"].get<std::string>(), job.value("template_name", std::string()));
  auto it = cache.find(key);
  if (it == cache.end()) {
    LoadedTemplate loaded;
    loaded.config = fp8rl::load_chat_template_config(key.first, key.second);
    loaded.tpl = std::make_shared<const fp8rl::ChatTemplate>(loaded.config.source);
    it = cache.emplace(key, std::move(loaded)).first;
  }
  fp8rl::ChatRequest request;
  request.messages = job["messages"];
  request.add_generation_prompt = job.value("add_generation_prompt", false);
  if (job.contains("tools")) request.tools = job["tools"];
  if (job.contains("variables")) request.variables = job["variables"];
  return it->second.tpl->render(fp8rl::build_chat_context(it->second.config, request), options);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s JOBS.json\n", argv[0]);
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot open %s\n", argv[1]);
    return 2;
  }
  const auto spec = nlohmann::ordered_json::parse(in);
  fp8rl::ChatTemplateOptions options;
  if (spec.contains("fixed_now")) {
    options.fixed_now = fp8rl::parse_local_datetime(spec["fixed_now"].get<std::string>());
  }
  TemplateCache cache;
  nlohmann::ordered_json results = nlohmann::ordered_json::array();
  for (const auto& job : spec["jobs"]) {
    nlohmann::ordered_json r;
    r["id"] = job["id"];
    try {
      r["text"] = render_job(job, options, cache);
      r["ok"] = true;
    } catch (const fp8rl::Error& e) {
      r["ok"] = false;
      r["error"] = e.what();
    }
    results.push_back(std::move(r));
  }
  std::cout << results.dump(1, ' ', false, nlohmann::ordered_json::error_handler_t::replace)
            << "\n";
  return 0;
}
