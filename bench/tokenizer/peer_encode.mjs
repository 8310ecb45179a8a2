#!/usr/bin/env node
// The JavaScript side of the tokenizer benchmark: load @lenml/tokenizers with a model's
// tokenizer.json, encode one text file without special tokens, write the ids as one JSON
// array, and print the time of each phase.
//   node bench/tokenizer/peer_encode.mjs MODEL_DIR IN.txt OUT.json
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const t0 = performance.now();
const [modelDir, input, output] = process.argv.slice(2);
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");
const lib = path.join(root, "tools", "peers", "npm", "node_modules", "@lenml", "tokenizers",
                      "dist", "main.mjs");
const { TokenizerLoader } = await import(pathToFileURL(lib).href);
const tokenizer = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(fs.readFileSync(path.join(modelDir, "tokenizer.json"), "utf8")),
  tokenizerConfig: JSON.parse(fs.readFileSync(path.join(modelDir, "tokenizer_config.json"), "utf8")),
});
const t1 = performance.now();
const text = fs.readFileSync(input, "utf8");
const ids = tokenizer.encode(text, { add_special_tokens: false });
const t2 = performance.now();
fs.writeFileSync(output, "[" + ids.join(",") + "]\n");
process.stdout.write(JSON.stringify({ load_ms: t1 - t0, encode_ms: t2 - t1, ids: ids.length }) + "\n");
