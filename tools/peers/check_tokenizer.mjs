#!/usr/bin/env node
// The tokenizer peer test: our encode/decode against @lenml/tokenizers on the same inputs.
//
//   node tools/peers/check_tokenizer.mjs --driver BUILD/peer_driver [--fp8rl BUILD/fp8rl]
//        [--work DIR] [--random-lines N]
//
// For each of the Qwen3, Llama 3 and Gemma 3 tokenizer files, with and without special tokens,
// over tests/data/tokenizer/corpus.jsonl, a seeded random corpus, and the corpus as one text:
//   - ids must be identical;
//   - decode(ids) and decode(ids, skip_special) must be identical;
//   - without special tokens, decode(encode(text)) must give back the text (after the
//     tokenizer's own normalization: NFC for Qwen3, "▁" read as a space for Gemma 3; the
//     corpora hold no character whose NFC changed after Unicode 9.0, the version of tokenizers);
//   - peer_driver itself checks that streaming (IncrementalDecoder) equals the full decode.
// Inputs in tests/data/tokenizer/known_disagreements.jsonl are where the JavaScript peer and
// Hugging Face's Rust tokenizers (which decides) disagree: regex whitespace and case folding,
// the Unicode version of NFC and of \p{...}. They are compared with the output of tokenizers
// itself (tools/peers/hf_tokenize.py), committed as known_disagreements.hf.jsonl. With --fp8rl,
// `fp8rl tokenize --jsonl` must print the same ids as the driver.
// Exits non-zero on any difference, printing the first few.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "..", "..");
const data = path.join(root, "tests", "data", "tokenizer");
const args = process.argv.slice(2);
const opt = (name, fallback) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : fallback;
};
const driver = opt("--driver");
const fp8rl = opt("--fp8rl");
const work = opt("--work", fs.mkdtempSync(path.join(os.tmpdir(), "fp8rl-tokpeer-")));
const randomLines = opt("--random-lines", "1000");
if (!driver) {
  process.stderr.write("check_tokenizer: --driver PATH is required\n");
  process.exit(2);
}
fs.mkdirSync(work, { recursive: true });

function run(cmd, cmdArgs) {
  try {
    return execFileSync(cmd, cmdArgs, { encoding: "utf8", maxBuffer: 1 << 30 });
  } catch (e) {
    process.stderr.write(`check_tokenizer: ${cmd} ${cmdArgs.join(" ")} failed:\n${e.stderr ?? e}\n`);
    process.exit(1);
  }
}
const peer = (extra) => run(process.execPath, [path.join(here, "tokenize_peer.mjs"), ...extra]);
const lines = (text) => text.split("\n").filter((l) => l.length > 0);

// Corpora: the hand-written one, a seeded random one, and the hand-written one as one text.
const corpus = path.join(data, "corpus.jsonl");
const random = path.join(work, "random.jsonl");
run(process.execPath, [path.join(here, "make_corpus.mjs"), "--kind", "random", "--seed", "20261129",
                       "--lines", randomLines, "--out", random]);
const wholeText = path.join(work, "corpus.txt");
fs.writeFileSync(wholeText, lines(fs.readFileSync(corpus, "utf8")).map((l) => JSON.parse(l)).join("\n"));

let failures = 0;
let checked = 0;
function report(what, detail) {
  if (++failures <= 10) process.stderr.write(`MISMATCH ${what}\n${detail}\n\n`);
}
const roundTrip = {
  qwen3: (t) => t.normalize("NFC"),
  llama3: (t) => t,
  gemma3: (t) => t.replaceAll("\u2581", " "),
};

function compare(model, label, inputs, ours, theirs, special, roundTripCheck = true) {
  const a = lines(ours);
  const b = lines(theirs);
  if (a.length !== b.length) {
    report(`${model} ${label}`, `line counts differ: ours ${a.length}, peer ${b.length}`);
    return;
  }
  for (let i = 0; i < a.length; ++i) {
    const x = JSON.parse(a[i]);
    const y = JSON.parse(b[i]);
    const text = inputs ? inputs[i] : null;
    ++checked;
    const where = `${model} ${label} line ${i + 1}${special ? " --special" : ""}`;
    const shown = text === null ? "" : `text: ${JSON.stringify(text).slice(0, 300)}\n`;
    if (JSON.stringify(x.ids) !== JSON.stringify(y.ids)) {
      let k = 0;
      while (k < x.ids.length && x.ids[k] === y.ids[k]) ++k;
      report(`ids: ${where}`, `${shown}first difference at index ${k}: ours ` +
             `${JSON.stringify(x.ids.slice(k, k + 8))} peer ${JSON.stringify(y.ids.slice(k, k + 8))}`);
      continue;
    }
    for (const key of ["decoded", "decoded_skip"]) {
      if (x[key] !== y[key]) {
        report(`${key}: ${where}`, `${shown}ours ${JSON.stringify(x[key]).slice(0, 300)}\n` +
               `peer ${JSON.stringify(y[key]).slice(0, 300)}`);
      }
    }
    if (roundTripCheck && !special && text !== null && x.decoded !== roundTrip[model](text)) {
      report(`round trip: ${where}`, `${shown}decoded ${JSON.stringify(x.decoded).slice(0, 300)}`);
    }
  }
}

const readInputs = (file) => lines(fs.readFileSync(file, "utf8")).map((l) => JSON.parse(l));
for (const model of ["qwen3", "llama3", "gemma3"]) {
  const dir = peer(["--model", model, "--print-model-dir"]).trim();
  for (const special of [false, true]) {
    const flag = special ? ["--special"] : [];
    for (const [label, file] of [["corpus", corpus], ["random", random]]) {
      compare(model, label, readInputs(file), run(driver, [dir, file, ...flag]),
              peer(["--model", model, "--jsonl", file, ...flag]), special);
    }
    compare(model, "whole-text", null, run(driver, [dir, wholeText, "--text-file", ...flag]),
            peer(["--model", model, "--text-file", wholeText, ...flag]), special);
    const disagreements = path.join(data, "known_disagreements.jsonl");
    const golden = lines(fs.readFileSync(path.join(data, "known_disagreements.hf.jsonl"), "utf8"))
      .map((l) => JSON.parse(l))
      .filter((g) => g.model === model && g.special === special)
      .map((g) => JSON.stringify({ ids: g.ids, decoded: g.decoded, decoded_skip: g.decoded_skip }))
      .join("\n");
    // No round-trip check here: JavaScript's NFC (a newer Unicode) is not the reference.
    compare(model, "known-disagreements (vs Hugging Face tokenizers)", readInputs(disagreements),
            run(driver, [dir, disagreements, ...flag]), golden, special, false);
    if (fp8rl) {
      const cli = lines(run(fp8rl, ["tokenize", dir, "--jsonl", corpus, ...flag]));
      const drv = lines(run(driver, [dir, corpus, ...flag])).map((l) => JSON.stringify(JSON.parse(l).ids));
      cli.forEach((l, i) => {
        if (l !== drv[i]) report(`fp8rl tokenize CLI: ${model} line ${i + 1}`, `cli ${l}\ndriver ${drv[i]}`);
      });
    }
  }
}
if (failures > 0) {
  process.stderr.write(`check_tokenizer: ${failures} mismatches in ${checked} comparisons\n`);
  process.exit(1);
}
process.stdout.write(`check_tokenizer: ${checked} comparisons identical (work dir ${work})\n`);
