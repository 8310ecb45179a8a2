// A GRPO run whose environment is an agent written with the npm `openai` package
// (tools/peers/npm), as users would write one: `fp8rl grpo` with environment_server running this
// file in --agent mode, which reads OPENAI_BASE_URL and OPENAI_API_KEY as the package does by
// itself, asks for each episode's completions (half of them streamed) with the episode id as the
// model, and reports each episode's reward. The driver checks the run trained one step on the
// agent's completions with no request refused.
//   node grpo_agent_openai.mjs --fp8rl BIN --work DIR      (the driver)
//   node grpo_agent_openai.mjs --agent                      (the agent fp8rl starts)
import { spawnSync } from "node:child_process";
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";
import readline from "node:readline";
import { fileURLToPath } from "node:url";

const self = fileURLToPath(import.meta.url);
const root = path.resolve(path.dirname(self), "..", "..");
const args = process.argv.slice(2);

async function openai() {
  try {
    const require = createRequire(path.join(root, "tools", "peers", "npm", "package.json"));
    return (await import(require.resolve("openai"))).default;
  } catch (e) {
    process.stderr.write(`grpo_agent_openai: the openai package is missing (${e.message}); ` +
                         "run npm ci --prefix tools/peers/npm\n");
    process.exit(1);
  }
}

async function agent() {
  const OpenAI = await openai();
  const client = new OpenAI();  // OPENAI_BASE_URL and OPENAI_API_KEY from fp8rl
  const ask = async (id, messages, stream) => {
    if (!stream) {
      const r = await client.chat.completions.create({ model: id, messages, max_tokens: 8 });
      return r.choices[0].message.content;
    }
    let text = "";
    const s = await client.chat.completions.create({ model: id, messages, max_tokens: 8, stream });
    for await (const chunk of s) text += chunk.choices[0]?.delta?.content ?? "";
    return text;
  };
  const lines = readline.createInterface({ input: process.stdin });
  for await (const line of lines) {
    const request = JSON.parse(line);
    const episodes = await Promise.all(request.episodes.map(async (e, k) => {
      const messages = e.row.messages;
      const answer = await ask(e.id, messages, k % 2 === 1);
      // A second turn in the same conversation.
      const again = [...messages, { role: "assistant", content: answer },
                     { role: "user", content: "And 1+1?" }];
      await ask(e.id, again, k % 2 === 0);
      return { id: e.id, reward: answer.trim() === String(e.row.answer) ? 1 : 0 };
    }));
    process.stdout.write(JSON.stringify({ episodes }) + "\n");
  }
}

function driver() {
  const opt = (name) => {
    const i = args.indexOf(name);
    if (i < 0) {
      process.stderr.write(`grpo_agent_openai: ${name} is required\n`);
      process.exit(2);
    }
    return args[i + 1];
  };
  const work = opt("--work");
  fs.rmSync(work, { recursive: true, force: true });
  fs.mkdirSync(work, { recursive: true });
  const config = path.join(work, "agent.yaml");
  fs.writeFileSync(config, [
    `model: ${path.join(root, "examples", "demo", "model")}`,
    `data: ${path.join(root, "examples", "demo", "train.jsonl")}`,
    `output_dir: ${path.join(work, "run")}`,
    "device: cpu", "fp8: row", "seed: 3", "rewards: []",
    `environment_server: ${JSON.stringify(`exec '${process.execPath}' '${self}' --agent`)}`,
    "lora_r: 8", "lora_alpha: 16", "lora_target_modules: all-linear",
    "num_generations: 4", "per_device_train_batch_size: 8", "max_prompt_length: 32",
    "max_completion_length: 48", "max_steps: 1", "save_steps: 1", "",
  ].join("\n"));
  const run = spawnSync(opt("--fp8rl"), ["grpo", "--config", config], { encoding: "utf8" });
  let failures = 0;
  const check = (cond, what) => {
    if (!cond) {
      failures++;
      process.stderr.write(`FAIL ${what}\n`);
    }
  };
  check(run.status === 0, `fp8rl grpo exited with ${run.status}: ${run.stderr}`);
  const metrics = path.join(work, "run", "metrics.jsonl");
  const lines = fs.existsSync(metrics) ? fs.readFileSync(metrics, "utf8").trim().split("\n") : [];
  check(lines.length === 1, `one metrics line, got ${lines.length}`);
  if (lines.length === 1) {
    const m = JSON.parse(lines[0]);
    check(m["env/agent/requests"] === 16, `16 completions answered, got ${m["env/agent/requests"]}`);
    check(m["env/agent/refused_requests"] === 0, "no request refused");
    check(m["env/agent/extra_sequences"] === 0, "each episode one growing sequence");
    check(Number.isFinite(m["loss"]), "a finite loss");
  }
  if (failures > 0) process.exit(1);
  process.stdout.write("grpo_agent_openai: ok\n");
}

if (args.includes("--agent")) await agent();
else driver();
