#!/usr/bin/env python3
"""Throughput of a running `fp8rl serve` under many concurrent clients (standard library only).

Each of --clients threads sends one POST /v1/completions whose prompt is --prompt-tokens random
token ids, asking for exactly --max-tokens tokens (ignore_eos, temperature 1), all at once, as
`fp8rl bench generate --prompts CLIENTS --n 1` generates them; prints one JSON line: requests,
completion tokens (the responses' usage), wall seconds from the first request to the last
response, output tokens/s, failures.

    python3 tools/bench/serve_load.py --port 8000 --clients 256 --prompt-tokens 128 --max-tokens 512
"""

import argparse
import http.client
import json
import random
import threading
import time


def wait_healthy(host, port, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            c = http.client.HTTPConnection(host, port, timeout=5)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(1)
    raise SystemExit(f"serve_load: no healthy server at {host}:{port} after {seconds} s")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--clients", type=int, default=256)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--model", default="", help="model name (default: the first /v1/models)")
    ap.add_argument("--wait", type=int, default=300, help="seconds to wait for /health")
    a = ap.parse_args()
    wait_healthy(a.host, a.port, a.wait)
    if not a.model:  # the server's first model name
        c = http.client.HTTPConnection(a.host, a.port, timeout=30)
        c.request("GET", "/v1/models")
        a.model = json.loads(c.getresponse().read())["data"][0]["id"]
    rng = random.Random(0)
    bodies = [json.dumps({"model": a.model, "prompt": [rng.randrange(a.vocab) for _ in
                                                       range(a.prompt_tokens)],
                          "max_tokens": a.max_tokens, "ignore_eos": True, "temperature": 1.0,
                          "seed": i}) for i in range(a.clients)]
    tokens = [0] * a.clients
    failures = []
    start = threading.Barrier(a.clients + 1)

    def client(i):
        c = http.client.HTTPConnection(a.host, a.port, timeout=3600)
        start.wait()
        try:
            c.request("POST", "/v1/completions", bodies[i], {"Content-Type": "application/json"})
            r = c.getresponse()
            body = r.read()
            if r.status != 200:
                failures.append(f"{r.status}: {body[:200]!r}")
                return
            tokens[i] = json.loads(body)["usage"]["completion_tokens"]
        except OSError as e:
            failures.append(str(e))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(a.clients)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.time()
    for t in threads:
        t.join()
    wall = time.time() - t0
    print(json.dumps({"requests": a.clients, "prompt_tokens": a.prompt_tokens,
                      "max_tokens": a.max_tokens, "completion_tokens": sum(tokens),
                      "wall_seconds": wall, "output_tokens_per_second": sum(tokens) / wall,
                      "failures": len(failures), "first_failure": failures[:1]}))


if __name__ == "__main__":
    main()
