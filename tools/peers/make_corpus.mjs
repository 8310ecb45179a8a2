#!/usr/bin/env node
// Deterministic test and benchmark corpora (same seed, same bytes, on every machine).
//
//   node tools/peers/make_corpus.mjs --kind random --seed 1 --lines 2000 --out F.jsonl
//       one JSON string per line: random mixtures of scripts, emoji sequences, combining
//       marks, digits, whitespace runs, control and zero-width characters, and added-token
//       strings of the three peer tokenizers, with line lengths from 0 to a few thousand.
//   node tools/peers/make_corpus.mjs --kind bench --seed 1 --bytes 4000000 --out F.txt
//       one plain-text file of mixed prose, code, CJK, other scripts, emoji and numbers.
//
// Characters are drawn only from blocks assigned before Unicode 13 and avoid the few code
// points on which the JavaScript peer and Hugging Face tokenizers disagree by design (U+FEFF,
// U+0085, U+017F; see tests/data/tokenizer/known_disagreements.jsonl).
import fs from "node:fs";

const args = process.argv.slice(2);
const opt = (name, fallback) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : fallback;
};
const kind = opt("--kind", "random");
const seed = Number(opt("--seed", "1"));
const out = opt("--out");
if (!out) {
  process.stderr.write("make_corpus: --out FILE is required\n");
  process.exit(2);
}

// mulberry32: small, fast, and identical everywhere.
let state = seed >>> 0;
function random() {
  state = (state + 0x6d2b79f5) >>> 0;
  let t = state;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const int = (n) => Math.floor(random() * n);
const pick = (list) => list[int(list.length)];
const cp = (lo, hi) => String.fromCodePoint(lo + int(hi - lo + 1));

const RANGES = [
  [0x21, 0x7e], [0x21, 0x7e], [0x21, 0x7e], [0x61, 0x7a], [0x61, 0x7a], [0x41, 0x5a],
  [0xa1, 0xff], [0x100, 0x17e], [0x391, 0x3a9], [0x3b1, 0x3c9], [0x400, 0x4ff],
  [0x5d0, 0x5ea], [0x621, 0x64a], [0x660, 0x669], [0x905, 0x939], [0x966, 0x96f],
  [0xe01, 0xe3a], [0x3041, 0x3096], [0x30a1, 0x30fa], [0x4e00, 0x9fa5], [0x4e00, 0x9fa5],
  [0xac00, 0xd7a3], [0xac00, 0xd7a3], [0x1100, 0x1112], [0x1161, 0x1175], [0x11a8, 0x11c2],
  [0xff01, 0xff5e], [0xff10, 0xff19], [0x2010, 0x2027], [0x2030, 0x205e], [0x2190, 0x21ff],
  [0x2200, 0x22ff], [0x2500, 0x257f], [0x2070, 0x2079], [0x2150, 0x2182], [0x1f300, 0x1f5ff],
  [0x1f600, 0x1f64f], [0x20000, 0x2a6d6], [0x1d400, 0x1d7ff], [0x10330, 0x1034a],
];
const COMBINING = [[0x300, 0x36f], [0x483, 0x487], [0x591, 0x5bd], [0x64b, 0x65f],
                   [0x93c, 0x94d], [0x1dc0, 0x1df5], [0x1dfb, 0x1dff], [0x20d0, 0x20f0]];
const SPACES = [" ", " ", " ", "  ", "\t", "\n", "\n\n", "\r\n", "\r", "\u00a0", "\u3000",
                "\u2009", "\u202f", "\u2028", "\u000b", "\u000c", "\u200b", "\u200c", "\u200d",
                "\u2060", "\u180e", "\u1680"];
const SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>",
                  "<tool_call>", "<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>",
                  "<|reserved_special_token_17|>", "<bos>", "<eos>", "<start_of_turn>",
                  "<end_of_turn>", "<pad>", "<unk>", "<mask>", "<unused42>", "<table>", "</td>",
                  "<|im_", "im_end|>", "<think", "<start_of"];
const EMOJI = ["👍🏽", "👨‍👩‍👧‍👦", "🧑🏿‍🚀", "🏳️‍🌈", "🇯🇵", "🇫🇷🇩🇪", "❤️", "1️⃣", "🤷‍♀️", "👩🏻‍🤝‍👨🏾", "😀", "🔥"];
const WORDS = ("the of and to in is was that for on with as by at from his her it an are " +
  "were be this which or have not but had they you all their we one can there been if more " +
  "when will would who so no model token training data learning reward policy gradient " +
  "value function network layer weight update step batch sample output input language " +
  "system user assistant answer question problem solution result however because between " +
  "through during without within another example different important following number " +
  "people state world government university history century company children information")
  .split(" ");

function randomPiece() {
  const r = random();
  if (r < 0.35) return cp(...pick(RANGES));
  if (r < 0.55) return pick(WORDS) + (random() < 0.3 ? pick([".", ",", "'s", "'t", "n't", "'re", "!", "?"]) : "");
  if (r < 0.70) return pick(SPACES);
  if (r < 0.75) return cp(...pick(RANGES)) + cp(...pick(COMBINING)) + (random() < 0.3 ? cp(...pick(COMBINING)) : "");
  if (r < 0.80) return String(int(10 ** (1 + int(12))));
  if (r < 0.86) return pick(SPECIALS);
  if (r < 0.92) return pick(EMOJI);
  if (r < 0.96) return pick(SPACES).repeat(1 + int(20));
  return cp(...pick(RANGES)).repeat(1 + int(40));
}

function randomLine() {
  const n = random() < 0.05 ? int(3000) : int(60);
  let s = "";
  for (let i = 0; i < n; ++i) s += randomPiece();
  // A NUL-free, valid string: lone surrogates cannot occur since pieces are whole code points.
  return s;
}

const CODE = [
  "def {w}_{w}(x, y={n}):\n    return [{w} for {w} in range(x) if {w} % {n} == 0]\n",
  "for (int i = 0; i < {n}; ++i) {\n  {w}[i] = {w}(i) * {n};\n}\n",
  "const {w} = await fetch(`/api/{w}?id=${{{w}}}`).then((r) => r.json());\n",
  "SELECT {w}, COUNT(*) FROM {w} WHERE {w} > {n} GROUP BY {w};\n",
  "    if self.{w} is None:\n        raise ValueError(\"{w} must be set\")\n",
  "#include <{w}.h>\nstatic int {w}_{w}(void) {{ return {n}; }}\n",
];
function fill(template) {
  return template.replace(/\{w\}/g, () => pick(WORDS)).replace(/\{n\}/g, () => String(int(1000)));
}
function sentence(length) {
  const words = [];
  for (let i = 0; i < length; ++i) words.push(pick(WORDS));
  const s = words.join(" ");
  return s[0].toUpperCase() + s.slice(1) + pick([".", ".", ".", "?", "!"]);
}
function benchParagraph() {
  const r = random();
  if (r < 0.55) {
    let p = "";
    for (let i = 0, n = 2 + int(6); i < n; ++i) p += (i ? " " : "") + sentence(5 + int(20));
    return p + "\n\n";
  }
  if (r < 0.75) {
    let p = "";
    for (let i = 0, n = 1 + int(4); i < n; ++i) p += fill(pick(CODE));
    return p + "\n";
  }
  if (r < 0.85) {
    let p = "";
    for (let i = 0, n = 20 + int(80); i < n; ++i) p += cp(0x4e00, 0x9fa5);
    return p + "。\n";
  }
  if (r < 0.92) {
    let p = "";
    const range = pick([[0xac00, 0xd7a3], [0x430, 0x44f], [0x621, 0x64a], [0x3b1, 0x3c9], [0x3041, 0x3096]]);
    for (let i = 0, n = 5 + int(20); i < n; ++i) {
      for (let k = 0, m = 2 + int(6); k < m; ++k) p += cp(...range);
      p += " ";
    }
    return p + "\n";
  }
  if (r < 0.96) {
    let p = "";
    for (let i = 0, n = 5 + int(20); i < n; ++i) p += pick(EMOJI) + pick([" ", "", " ok ", "\n"]);
    return p + "\n";
  }
  let p = "";
  for (let i = 0, n = 5 + int(20); i < n; ++i) p += String(int(1e9)) + pick([", ", "\t", " | ", "\n"]);
  return p + "\n";
}

if (kind === "random") {
  const lines = Number(opt("--lines", "1000"));
  const outLines = [];
  for (let i = 0; i < lines; ++i) outLines.push(JSON.stringify(randomLine()));
  fs.writeFileSync(out, outLines.join("\n") + "\n");
} else if (kind === "bench") {
  const bytes = Number(opt("--bytes", "4000000"));
  const parts = [];
  let size = 0;
  while (size < bytes) {
    const p = benchParagraph();
    parts.push(p);
    size += Buffer.byteLength(p);
  }
  fs.writeFileSync(out, parts.join(""));
} else {
  process.stderr.write("make_corpus: --kind must be random or bench\n");
  process.exit(2);
}
