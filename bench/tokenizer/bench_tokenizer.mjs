#!/usr/bin/env node
// Tokenizer speed: encode a ~4 MB mixed corpus with the Qwen3 tokenizer,
// ours against the JavaScript peer (@lenml/tokenizers), in the same run on the same file.
//
//   node bench/tokenizer/bench_tokenizer.mjs --fp8rl BUILD/src/cli/fp8rl
//        [--bytes 4000000] [--seed 1] [--repeats 3] [--work DIR]
//
// Ours is `fp8rl tokenize QWEN3_DIR --text-file CORPUS`: one process, one thread, tokenizer.json
// load included. The peer is one node process: library import, tokenizer.json load, encode.
// Each side runs --repeats times; the best wall time is reported (the least disturbed by other
// load on the machine) next to its CPU time (user + system). Both must produce the same ids.
// The corpus (tools/peers/make_corpus.mjs --kind bench) is generated, not committed.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "..", "..");
const args = process.argv.slice(2);
const opt = (name, fallback) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : fallback;
};
const fp8rl = opt("--fp8rl");
const bytes = opt("--bytes", "4000000");
const seed = opt("--seed", "1");
const repeats = Number(opt("--repeats", "3"));
const work = opt("--work", fs.mkdtempSync(path.join(os.tmpdir(), "fp8rl-tokbench-")));
if (!fp8rl) {
  process.stderr.write("bench_tokenizer: --fp8rl PATH (the fp8rl binary) is required\n");
  process.exit(2);
}
fs.mkdirSync(work, { recursive: true });

const node = process.execPath;
const corpus = path.join(work, "corpus.txt");
execFileSync(node, [path.join(root, "tools", "peers", "make_corpus.mjs"), "--kind", "bench",
                    "--seed", seed, "--bytes", bytes, "--out", corpus]);
const modelDir = execFileSync(node, [path.join(root, "tools", "peers", "tokenize_peer.mjs"),
                                     "--model", "qwen3", "--print-model-dir"],
                              { encoding: "utf8" }).trim();

// Runs a command under bash so that `times` reports the children's CPU time.
function timed(cmd, cmdArgs, stdoutFile) {
  const script = `"$@" > ${JSON.stringify(stdoutFile)}; status=$?; times; exit $status`;
  const start = process.hrtime.bigint();
  const out = execFileSync("bash", ["-c", script, "bash", cmd, ...cmdArgs],
                           { encoding: "utf8", env: { ...process.env, OMP_NUM_THREADS: "1" } });
  const wall = Number(process.hrtime.bigint() - start) / 1e9;
  // `times` prints the shell's, then its children's "XmY.YYYs XmY.YYYs" (user, system).
  const children = out.trim().split("\n").pop().split(/\s+/);
  const seconds = (t) => {
    const m = /^(\d+)m([\d.]+)s$/.exec(t);
    return m ? Number(m[1]) * 60 + Number(m[2]) : NaN;
  };
  return { wall, cpu: seconds(children[0]) + seconds(children[1]) };
}

function best(run) {
  let result = null;
  for (let i = 0; i < repeats; ++i) {
    const r = run();
    if (!result || r.wall < result.wall) result = r;
  }
  return result;
}

const oursOut = path.join(work, "ours.json");
const peerOut = path.join(work, "peer.json");
const peerLog = path.join(work, "peer.log");
const ours = best(() => timed(fp8rl, ["tokenize", modelDir, "--text-file", corpus], oursOut));
const peer = best(() => timed(node, [path.join(here, "peer_encode.mjs"), modelDir, corpus, peerOut], peerLog));
const peerPhases = JSON.parse(fs.readFileSync(peerLog, "utf8"));

const a = fs.readFileSync(oursOut, "utf8").trim();
const b = fs.readFileSync(peerOut, "utf8").trim();
const size = fs.statSync(corpus).size;
const ids = JSON.parse(a).length;
const mb = size / 1e6;
const line = (name, r) =>
  `  ${name.padEnd(28)} wall ${r.wall.toFixed(3)} s   cpu ${r.cpu.toFixed(3)} s   ` +
  `${(mb / r.wall).toFixed(2)} MB/s`;
process.stdout.write(
  `tokenizer benchmark: Qwen3 tokenizer.json, ${size} bytes of mixed text (seed ${seed}), ` +
  `${ids} ids, best of ${repeats}\n` +
  line("fp8rl tokenize (C++)", ours) + "\n" +
  line("@lenml/tokenizers (node)", peer) +
  `   [load ${peerPhases.load_ms.toFixed(0)} ms, encode ${peerPhases.encode_ms.toFixed(0)} ms]\n` +
  `  speedup: ${(peer.wall / ours.wall).toFixed(1)}x wall, ${(peer.cpu / ours.cpu).toFixed(1)}x cpu ` +
  `(target >= 5x)\n` +
  `  ids identical: ${a === b ? "yes" : "NO"}\n`);
process.exit(a === b ? 0 : 1);
