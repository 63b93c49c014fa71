#!/usr/bin/env python3
"""A request generator for `moe serve`, like `vllm bench serve`: random prompts (token ids) and output lengths,
sent at a fixed concurrency or a request rate (Poisson arrivals), streamed; reports output tokens/s, request
throughput, time to first token (TTFT), inter-token latency (ITL) and time per output token (TPOT), mean, p50
and p99. Python's standard library only.

  moe serve --model DIR --port 8000 &
  scripts/bench_serve.py --base-url http://127.0.0.1:8000 --num-prompts 64 --input-len 128 --output-len 64 \\
      --max-concurrency 16

Lengths are drawn uniformly from [len * (1 - range_ratio), len * (1 + range_ratio)]; requests set ignore_eos
so that each generates its drawn length (as vllm bench serve does). --json FILE also writes every figure.
"""
import argparse
import http.client
import json
import random
import statistics
import sys
import threading
import time
import urllib.parse


def percentile(values, p):
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = (len(ordered) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def one_request(url, headers, body):
    """Streams one completion: {"ok", "ttft", "itl": [...], "latency", "output_tokens", "error"}."""
    conn = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=600)
    start = time.perf_counter()
    out = {"ok": False, "ttft": None, "itl": [], "latency": None, "output_tokens": 0, "error": ""}
    try:
        conn.request("POST", "/v1/completions", json.dumps(body), headers)
        res = conn.getresponse()
        if res.status != 200:
            out["error"] = f"HTTP {res.status}: {res.read().decode()[:200]}"
            return out
        last = None
        for raw in res:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                break
            chunk = json.loads(data)
            if "error" in chunk:
                out["error"] = chunk["error"]["message"]
                return out
            if chunk.get("usage"):
                out["output_tokens"] = chunk["usage"]["completion_tokens"]
            if not chunk["choices"] or chunk["choices"][0].get("finish_reason"):
                continue
            # NOTE: the server sends one chunk per generated token.
            now = time.perf_counter()
            if last is None:
                out["ttft"] = now - start
            else:
                out["itl"].append(now - last)
            last = now
        out["latency"] = time.perf_counter() - start
        out["ok"] = out["ttft"] is not None
    except (OSError, http.client.HTTPException, json.JSONDecodeError) as e:
        out["error"] = repr(e)
    finally:
        conn.close()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base-url", default="http://127.0.0.1:8000")
    ap.add_argument("--model", help="served model name (default: the one /v1/models lists)")
    ap.add_argument("--api-key")
    ap.add_argument("--num-prompts", type=int, default=64)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--range-ratio", type=float, default=0.5)
    ap.add_argument("--max-concurrency", type=int, help="the most requests in flight (default: no bound)")
    ap.add_argument("--request-rate", type=float, default=float("inf"),
                    help="requests per second, Poisson arrivals (default inf: all at once, up to the concurrency)")
    ap.add_argument("--vocab-size", type=int, default=1000, help="prompt token ids are drawn from [0, this)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the figures and per-request rows here")
    a = ap.parse_args()
    if a.num_prompts < 1 or a.input_len < 1 or a.output_len < 1 or not 0 <= a.range_ratio < 1:
        sys.exit("error: --num-prompts, --input-len and --output-len must be >= 1 and --range-ratio in [0, 1)")
    if a.max_concurrency is not None and a.max_concurrency < 1:
        sys.exit("error: --max-concurrency must be >= 1")

    url = urllib.parse.urlparse(a.base_url)
    headers = {"Content-Type": "application/json"}
    if a.api_key:
        headers["Authorization"] = f"Bearer {a.api_key}"
    model = a.model
    if not model:
        conn = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=30)
        try:
            conn.request("GET", "/v1/models", headers=headers)
            model = json.loads(conn.getresponse().read())["data"][0]["id"]
        except (OSError, http.client.HTTPException, KeyError, json.JSONDecodeError) as e:
            sys.exit(f"error: cannot list the models at {a.base_url}/v1/models ({e!r}): is moe serve running there?")

    rng = random.Random(a.seed)
    length = lambda mean: max(1, rng.randint(int(mean * (1 - a.range_ratio)), int(mean * (1 + a.range_ratio))))
    bodies = []
    for _ in range(a.num_prompts):
        bodies.append({"model": model, "prompt": [rng.randrange(a.vocab_size) for _ in range(length(a.input_len))],
                       "max_tokens": length(a.output_len), "temperature": 0, "ignore_eos": True, "stream": True,
                       "stream_options": {"include_usage": True}})

    results = [None] * len(bodies)
    slots = threading.Semaphore(a.max_concurrency or len(bodies))

    def run(i):
        try:
            results[i] = one_request(url, headers, bodies[i])
        finally:
            slots.release()

    threads = []
    start = time.perf_counter()
    for i in range(len(bodies)):
        slots.acquire()
        t = threading.Thread(target=run, args=(i,))
        t.start()
        threads.append(t)
        if a.request_rate != float("inf"):
            time.sleep(rng.expovariate(a.request_rate))
    for t in threads:
        t.join()
    duration = time.perf_counter() - start

    ok = [r for r in results if r["ok"]]
    failed = [r for r in results if not r["ok"]]
    output_tokens = sum(r["output_tokens"] for r in ok)
    input_tokens = sum(len(b["prompt"]) for b, r in zip(bodies, results) if r["ok"])
    ttft = [r["ttft"] * 1e3 for r in ok]
    itl = [x * 1e3 for r in ok for x in r["itl"]]
    tpot = [(r["latency"] - r["ttft"]) * 1e3 / (r["output_tokens"] - 1) for r in ok if r["output_tokens"] > 1]
    figures = {
        "model": model, "num_prompts": a.num_prompts, "max_concurrency": a.max_concurrency,
        "request_rate": a.request_rate, "completed": len(ok), "failed": len(failed), "duration_s": duration,
        "input_tokens": input_tokens, "output_tokens": output_tokens,
        "request_throughput": len(ok) / duration, "output_tokens_per_s": output_tokens / duration,
        "total_tokens_per_s": (input_tokens + output_tokens) / duration,
    }
    for name, values in (("ttft_ms", ttft), ("tpot_ms", tpot), ("itl_ms", itl)):
        figures[name] = {"mean": statistics.fmean(values) if values else float("nan"),
                         "p50": percentile(values, 50), "p99": percentile(values, 99)}

    print(f"model {model}: {len(ok)} of {a.num_prompts} requests completed in {duration:.2f} s"
          f" (concurrency {a.max_concurrency or 'unbounded'}, rate {a.request_rate} req/s)")
    print(f"  output tokens/s  {figures['output_tokens_per_s']:10.1f}   ({output_tokens} tokens)")
    print(f"  total tokens/s   {figures['total_tokens_per_s']:10.1f}   ({input_tokens} prompt tokens)")
    print(f"  requests/s       {figures['request_throughput']:10.2f}")
    for name, label in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("itl_ms", "ITL")):
        f = figures[name]
        print(f"  {label:4} ms  mean {f['mean']:9.2f}  p50 {f['p50']:9.2f}  p99 {f['p99']:9.2f}")
    for r in failed[:5]:
        print(f"  failed: {r['error']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"figures": figures, "requests": results}, f, indent=1)
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
