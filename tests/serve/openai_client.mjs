// fp8rl serve as users drive it: the npm `openai` package (tools/peers/npm) against a server on
// the CPU with a tiny random model made here (the qwen3 golden's weights, a byte-level
// tokenizer, a chat template that renders tools). Checks chat, streaming, n > 1, logprobs,
// tools reaching the template, OpenAI's errors (400, 401, 404), /v1/completions, /v1/models,
// then a bounded load: 64 concurrent streaming clients, 16 of them disconnecting mid-stream
// (each counted as an abort); every other client gets a whole answer and the server's live
// sequences return to 0. Ends with SIGTERM, which must stop the server cleanly.
//   node openai_client.mjs --fp8rl BIN --golden DIR --tokenizer FILE --work DIR
import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "..", "..");
const args = process.argv.slice(2);
const opt = (name) => {
  const i = args.indexOf(name);
  if (i < 0) {
    process.stderr.write(`openai_client: ${name} is required\n`);
    process.exit(2);
  }
  return args[i + 1];
};
const fp8rl = opt("--fp8rl");
const work = opt("--work");

let OpenAI;
try {
  const require = createRequire(path.join(root, "tools", "peers", "npm", "package.json"));
  OpenAI = (await import(require.resolve("openai"))).default;
} catch (e) {
  process.stderr.write(`openai_client: the openai package is missing (${e.message}); ` +
                       "run npm ci --prefix tools/peers/npm\n");
  process.exit(1);
}

let failures = 0;
function check(cond, what) {
  if (!cond) {
    failures++;
    process.stderr.write(`FAIL ${what}\n`);
  }
}

// The model: the golden's config and weights (vocab 256), the byte-level tokenizer cut to its
// 256 byte symbols, and a template that lists the tools and names Hermes' <tool_call>.
const model = path.join(work, "model");
fs.rmSync(work, { recursive: true, force: true });
fs.mkdirSync(model, { recursive: true });
for (const f of ["config.json", "model.safetensors", "generation_config.json"])
  fs.copyFileSync(path.join(opt("--golden"), f), path.join(model, f));
const tok = JSON.parse(fs.readFileSync(opt("--tokenizer"), "utf8"));
tok.model.vocab = Object.fromEntries(Object.entries(tok.model.vocab).filter(([, id]) => id < 256));
tok.model.merges = [];
tok.added_tokens = [];
fs.writeFileSync(path.join(model, "tokenizer.json"), JSON.stringify(tok));
fs.writeFileSync(path.join(model, "tokenizer_config.json"), JSON.stringify({
  chat_template:
    "{% if tools %}<tools>{% for t in tools %}{{ t.function.name }};{% endfor %}</tools> " +
    "call as <tool_call>{json}</tool_call>\n{% endif %}" +
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}" +
    "{% if add_generation_prompt %}<assistant>{% endif %}",
}));

const key = "sk-fp8rl-test";
const server = spawn(fp8rl, ["serve", model, "--port", "0", "--api-key", key,
                             "--served-model-name", "tiny", "--max-num-seqs", "64"],
                     { stdio: ["ignore", "pipe", "pipe"] });
let stderr = "";
server.stderr.on("data", (d) => (stderr += d));
const exited = new Promise((resolve) => server.on("exit", (code, signal) => resolve({ code, signal })));
const port = await new Promise((resolve, reject) => {
  let out = "";
  const timer = setTimeout(() => reject(new Error(`no listening line in 60 s; stderr:\n${stderr}`)), 60000);
  server.stdout.on("data", (d) => {
    out += d;
    const m = out.match(/http:\/\/127\.0\.0\.1:(\d+)\/v1/);
    if (m) {
      clearTimeout(timer);
      resolve(Number(m[1]));
    }
  });
  server.on("exit", () => reject(new Error(`the server exited; stderr:\n${stderr}`)));
});
const baseURL = `http://127.0.0.1:${port}/v1`;
const client = new OpenAI({ baseURL, apiKey: key, maxRetries: 0, timeout: 60000 });
const user = (content) => [{ role: "user", content }];

async function status(promise) {
  try {
    await promise;
    return { status: 200 };
  } catch (e) {
    return { status: e.status, error: e.error, message: e.message };
  }
}

async function health() {
  return (await fetch(`http://127.0.0.1:${port}/health`)).json();
}

const began = Date.now();
try {
  // /v1/models
  const models = await client.models.list();
  check(models.data.length === 1 && models.data[0].id === "tiny", `models: ${JSON.stringify(models.data)}`);

  // Chat, greedy: deterministic, usage counted, finish reason given.
  const ask = { model: "tiny", messages: user("hello there"), max_tokens: 8, temperature: 0 };
  const a = await client.chat.completions.create(ask);
  const b = await client.chat.completions.create(ask);
  const c0 = a.choices[0];
  check(a.object === "chat.completion" && c0.message.role === "assistant" &&
        typeof c0.message.content === "string", `chat shape: ${JSON.stringify(a)}`);
  check(["stop", "length"].includes(c0.finish_reason), `chat finish_reason ${c0.finish_reason}`);
  check(a.usage.prompt_tokens > 10 && a.usage.completion_tokens >= 1 &&
        a.usage.completion_tokens <= 8 &&
        a.usage.total_tokens === a.usage.prompt_tokens + a.usage.completion_tokens,
        `chat usage ${JSON.stringify(a.usage)}`);
  check(c0.message.content === b.choices[0].message.content, "greedy chat is not deterministic");

  // Streaming: the deltas add up to the same greedy answer; usage in the last chunk.
  const stream = await client.chat.completions.create({ ...ask, stream: true,
                                                        stream_options: { include_usage: true } });
  let text = "", finish = null, usage = null, role = null;
  for await (const chunk of stream) {
    check(chunk.object === "chat.completion.chunk", `chunk object ${chunk.object}`);
    if (chunk.usage) usage = chunk.usage;
    for (const ch of chunk.choices) {
      role = role ?? ch.delta.role;
      text += ch.delta.content ?? "";
      finish = ch.finish_reason ?? finish;
    }
  }
  check(role === "assistant", `stream role ${role}`);
  check(text === c0.message.content, `stream text ${JSON.stringify(text)} != ${JSON.stringify(c0.message.content)}`);
  check(finish === c0.finish_reason, `stream finish ${finish}`);
  check(usage && usage.completion_tokens === a.usage.completion_tokens, `stream usage ${JSON.stringify(usage)}`);

  // n > 1 with a seed: n choices, the same again with the same seed.
  const many = { model: "tiny", messages: user("pick"), max_tokens: 6, n: 3, seed: 7, temperature: 1 };
  const m1 = await client.chat.completions.create(many);
  const m2 = await client.chat.completions.create(many);
  check(m1.choices.length === 3 && m1.choices.map((c) => c.index).join() === "0,1,2", "n = 3 choices");
  check(JSON.stringify(m1.choices.map((c) => c.message.content)) ===
        JSON.stringify(m2.choices.map((c) => c.message.content)), "seeded n = 3 is not reproducible");

  // Logprobs: one entry per token with its alternatives.
  const lp = await client.chat.completions.create({ ...ask, logprobs: true, top_logprobs: 2 });
  const content = lp.choices[0].logprobs?.content ?? [];
  check(content.length === lp.usage.completion_tokens &&
        content.every((t) => typeof t.logprob === "number" && t.logprob <= 0 && t.top_logprobs.length === 2),
        `logprobs ${JSON.stringify(lp.choices[0].logprobs)}`);

  // Tools reach the template (the prompt grows by their listing); a random model calls none,
  // so its text comes back as content (the parsing is tests/serve/test_tool_calls.cpp's).
  const tools = [{ type: "function", function: { name: "get_weather", description: "weather",
                   parameters: { type: "object", properties: { city: { type: "string" } } } } }];
  const t = await client.chat.completions.create({ ...ask, tools });
  check(t.usage.prompt_tokens > a.usage.prompt_tokens + 20, `tools not rendered: ${t.usage.prompt_tokens}`);
  check(["stop", "length", "tool_calls"].includes(t.choices[0].finish_reason), "tools finish_reason");
  const none = await client.chat.completions.create({ ...ask, tools, tool_choice: "none" });
  check(none.usage.prompt_tokens === a.usage.prompt_tokens, "tool_choice none still renders tools");

  // Errors in OpenAI's shape.
  const wrongKey = new OpenAI({ baseURL, apiKey: "wrong", maxRetries: 0 });
  const e401 = await status(wrongKey.chat.completions.create(ask));
  check(e401.status === 401 && e401.error?.code === "invalid_api_key", `401: ${JSON.stringify(e401)}`);
  const e404 = await status(client.chat.completions.create({ ...ask, model: "nope" }));
  check(e404.status === 404 && e404.error?.code === "model_not_found", `404: ${JSON.stringify(e404)}`);
  const e400 = await status(client.chat.completions.create({ ...ask, temperature: -1 }));
  check(e400.status === 400 && /temperature/.test(e400.error?.message ?? "") &&
        e400.error?.type === "invalid_request_error", `400 temperature: ${JSON.stringify(e400)}`);
  const typo = await status(client.chat.completions.create({ ...ask, temprature: 0 }));
  check(typo.status === 400 && /did you mean 'temperature'/.test(typo.error?.message ?? ""),
        `400 typo: ${JSON.stringify(typo)}`);
  const long = await status(client.chat.completions.create({ ...ask, max_tokens: 100000 }));
  check(long.status === 400 && /context/.test(long.error?.message ?? ""), `400 context: ${JSON.stringify(long)}`);
  const raw = await fetch(`${baseURL}/chat/completions`, {
    method: "POST", headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json" },
    body: "{not json" });
  const rawBody = await raw.json();
  check(raw.status === 400 && /not valid JSON/.test(rawBody.error?.message) && "param" in rawBody.error,
        `400 bad JSON: ${JSON.stringify(rawBody)}`);

  // /v1/completions: text, several prompts x n, streaming equal to the whole answer.
  const cask = { model: "tiny", prompt: "hello", max_tokens: 6, temperature: 0 };
  const comp = await client.completions.create(cask);
  check(comp.object === "text_completion" && typeof comp.choices[0].text === "string" &&
        comp.usage.completion_tokens >= 1, `completion ${JSON.stringify(comp)}`);
  const multi = await client.completions.create({ ...cask, prompt: ["ab", "cd"], n: 2, logprobs: 1 });
  check(multi.choices.length === 4 && multi.choices[3].logprobs.tokens.length >= 1, "2 prompts x n = 2");
  let ctext = "";
  for await (const chunk of await client.completions.create({ ...cask, stream: true }))
    ctext += chunk.choices[0]?.text ?? "";
  check(ctext === comp.choices[0].text, `completion stream ${JSON.stringify(ctext)} != ${JSON.stringify(comp.choices[0].text)}`);

  process.stderr.write(`functional checks: ${Date.now() - began} ms\n`);

  // Load: 64 concurrent streaming clients; 16 disconnect after their third chunk while asking
  // for far more tokens than the others. Every other client gets a whole answer (a finish
  // reason and usage), each client that left is aborted, and the live sequences return to 0.
  const started = Date.now();
  const clients = Array.from({ length: 64 }, async (_, i) => {
    const leaves = i % 4 === 0;
    const s = await client.chat.completions.create({
      model: "tiny", messages: user(`client ${i}`), temperature: 1, seed: i, stream: true,
      stream_options: { include_usage: true }, max_tokens: leaves ? 220 : 16, ignore_eos: leaves });
    let chunks = 0, fin = null, use = null;
    for await (const chunk of s) {
      if (chunk.usage) use = chunk.usage;
      for (const ch of chunk.choices) fin = ch.finish_reason ?? fin;
      if (leaves && ++chunks === 3) {
        s.controller.abort();
        return { leaves };
      }
    }
    return { leaves, fin, use };
  });
  const results = await Promise.allSettled(clients);
  const stayed = results.filter((r) => r.status === "fulfilled" && !r.value.leaves);
  const bad = results.filter((r) => r.status === "rejected");
  check(bad.length === 0, `load: ${bad.length} clients failed: ${bad.map((r) => r.reason?.message).slice(0, 3)}`);
  check(stayed.length === 48 && stayed.every((r) => r.value.fin && r.value.use?.completion_tokens >= 1),
        `load: ${stayed.length} clients stayed; incomplete: ${JSON.stringify(stayed.filter((r) => !r.value.fin || !r.value.use).slice(0, 3))}`);
  let h = await health();
  for (let k = 0; k < 100 && (h.live_sequences !== 0 || h.live_requests !== 0); ++k) {
    await new Promise((r) => setTimeout(r, 100));
    h = await health();
  }
  check(h.status === "ok" && h.live_sequences === 0 && h.live_requests === 0, `after load: ${JSON.stringify(h)}`);
  // Each client that left reached the engine as an abort of its live request.
  check(h.aborted_requests === 16, `aborted requests ${h.aborted_requests}, 16 clients left`);
  process.stderr.write(`load: 64 clients in ${Date.now() - started} ms\n`);
} catch (e) {
  failures++;
  process.stderr.write(`FAIL ${e.stack}\n`);
}

// A second server on the same port fails and says so (no silent sharing of the port).
const second = spawn(fp8rl, ["serve", model, "--port", String(port)], { stdio: ["ignore", "pipe", "pipe"] });
let secondErr = "";
second.stderr.on("data", (d) => (secondErr += d));
const secondTimer = setTimeout(() => second.kill("SIGKILL"), 30000);  // it must not serve
const secondEnd = await new Promise((resolve) => second.on("exit", (code) => resolve(code)));
clearTimeout(secondTimer);
check(secondEnd === 1 && /cannot listen on 127\.0\.0\.1:\d+/.test(secondErr),
      `second server on the port: exit ${secondEnd}, ${secondErr}`);

// SIGTERM: a clean stop.
const stopping = Date.now();
server.kill("SIGTERM");
let timer;
const end = await Promise.race([exited, new Promise((r) => (timer = setTimeout(() => r(null), 15000)))]);
clearTimeout(timer);
process.stderr.write(`SIGTERM: stopped in ${Date.now() - stopping} ms\n`);
check(end && end.code === 0, `SIGTERM: ${JSON.stringify(end)}; stderr:\n${stderr}`);
if (!end) server.kill("SIGKILL");
if (failures > 0) {
  process.stderr.write(`openai_client: ${failures} failures\n`);
  process.exit(1);
}
process.stdout.write("openai_client: all checks passed\n");
