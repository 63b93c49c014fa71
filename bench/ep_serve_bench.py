#!/usr/bin/env python3
"""The elastic expert-parallel server under a skewed load: step time before and after a rebalance, the
migration's time from decision to switch against the bytes it moved and the transport's bandwidth, and the
serving throughput while migrations run against before.

Starts `mpirun -np R moe serve --enable-expert-parallel` on MODEL (contiguous placement, no periodic
rebalance), keeps CLIENTS streaming clients busy with prompts of repeated tokens (a few experts per layer
take most pairs), and measures phases of SECONDS each:
  before   the contiguous placement
  after    after one POST /admin/rebalance (its answer: epoch, moved experts, predicted max/mean, seconds)
  during   /scale_elastic_ep R -> R/2 -> R ... back to back: a migration is under way most of the phase
  idle     the same scalings without load: the copies and the agreement alone
Step time: the mean inter-token latency of the phase (moe:inter_token_latency_seconds from /metrics), every
stream decoding one token a step. Prints one table.

usage: ep_serve_bench.py MOE_BINARY MPIEXEC MODEL_DIR [RANKS=4] [CLIENTS=16] [SECONDS=6]
"""
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

MOE, MPIEXEC, MODEL = sys.argv[1], sys.argv[2], sys.argv[3]
RANKS = int(sys.argv[4]) if len(sys.argv) > 4 else 4
CLIENTS = int(sys.argv[5]) if len(sys.argv) > 5 else 16
SECONDS = float(sys.argv[6]) if len(sys.argv) > 6 else 6.0
PROMPTS = [[7] * 12, [7, 7, 7, 7, 3], [11] * 5, [7] * 20, [3, 7] * 4, [7] * 9]


def call(port, method, path, body=None):
    """The JSON answer of one request (an error status stops the benchmark)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    conn.request(method, path, body=b"" if body is None else json.dumps(body).encode())
    res = conn.getresponse()
    text = res.read().decode()
    conn.close()
    if res.status != 200:
        raise RuntimeError(f"{method} {path}: {res.status} {text}")
    return json.loads(text) if path != "/metrics" else text


def inter_token(port):
    """(sum, count) of the inter-token latency histogram."""
    text = call(port, "GET", "/metrics")
    value = lambda name: float(re.search(rf"^{name} (\S+)$", text, re.M).group(1))
    return value("moe:inter_token_latency_seconds_sum"), value("moe:inter_token_latency_seconds_count")


class Load:
    """CLIENTS threads streaming completions back to back; counts the tokens that arrive."""

    def __init__(self, port):
        self.port, self.tokens, self.stop, self.lock = port, 0, threading.Event(), threading.Lock()
        self.threads = [threading.Thread(target=self.client, args=(i,)) for i in range(CLIENTS)]
        for t in self.threads:
            t.start()

    def client(self, i):
        while not self.stop.is_set():
            body = {"prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": 64, "temperature": 0, "stream": True,
                    "ignore_eos": True}
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
            conn.request("POST", "/v1/completions", body=json.dumps(body).encode())
            res = conn.getresponse()
            for line in res:
                if line.startswith(b"data: {"):
                    with self.lock:
                        self.tokens += 1
            conn.close()

    def count(self):
        with self.lock:
            return self.tokens

    def end(self):
        self.stop.set()
        for t in self.threads:
            t.join()


def phase(port, load, action=None):
    """(tokens/s, mean step ms, action results) over SECONDS, running `action` in a loop meanwhile."""
    s0, c0 = inter_token(port)
    t0, n0 = time.time(), load.count()
    results = []
    while time.time() - t0 < SECONDS:
        if action:
            results.append(action())
        else:
            time.sleep(0.05)
    t1, n1 = time.time(), load.count()
    s1, c1 = inter_token(port)
    return (n1 - n0) / (t1 - t0), 1000 * (s1 - s0) / max(c1 - c0, 1), results


def main():
    config = json.load(open(os.path.join(MODEL, "config.json")))
    hidden, inter = config["hidden_size"], config["moe_intermediate_size"]
    expert_bytes = 3 * hidden * inter * 4  # gate, up, down in f32
    proc = subprocess.Popen([MPIEXEC, "--oversubscribe", "--allow-run-as-root", "-x", "MOE_NUM_THREADS=1", "-np",
                             str(RANKS), MOE, "serve", "--model", MODEL, "--port", "0", "--enable-expert-parallel",
                             "--num-redundant-experts", "2", "--eplb-min-gain", "0.01", "--eplb-window-steps", "8"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    port = int(re.search(r":(\d+)", proc.stdout.readline()).group(1))
    load = Load(port)
    time.sleep(1.0)
    placement = lambda: call(port, "GET", "/admin/placement")
    imbalance = lambda p: max(p["rank_load_max_over_mean"].values())
    before = phase(port, load)
    x_before = imbalance(placement())
    rebalance = call(port, "POST", "/admin/rebalance")
    after = phase(port, load)
    x_after = imbalance(placement())
    sizes = iter([RANKS // 2, RANKS] * 1000)
    during = phase(port, load, lambda: call(port, "POST", "/scale_elastic_ep",
                                            {"new_data_parallel_size": next(sizes)}))
    load.end()
    # The copies alone: scalings with no step between them (the loop copies a layer a round).
    idle = [call(port, "POST", "/scale_elastic_ep", {"new_data_parallel_size": n}) for n in [RANKS // 2, RANKS] * 5]
    leader = next(int(p) for p in subprocess.run(["ps", "--ppid", str(proc.pid), "-o", "pid="], capture_output=True,
                                                 text=True).stdout.split()
                  if b"OMPI_COMM_WORLD_RANK=0\0" in open(f"/proc/{p}/environ", "rb").read())
    os.kill(leader, signal.SIGTERM)
    proc.wait(timeout=60)

    scales = during[2]
    moved = sum(r["moved_experts"] for r in scales)
    secs = sum(r["seconds"] for r in scales)
    print(f"{RANKS} ranks, {CLIENTS} streaming clients, {SECONDS:.0f} s a phase, {MODEL}: expert {expert_bytes} B")
    print(f"{'phase':>8} {'tok/s':>8} {'step ms':>8} {'rank max/mean':>14}")
    print(f"{'before':>8} {before[0]:8.1f} {before[1]:8.2f} {x_before:14.3f}")
    print(f"{'after':>8} {after[0]:8.1f} {after[1]:8.2f} {x_after:14.3f}")
    print(f"{'during':>8} {during[0]:8.1f} {during[1]:8.2f} {'':>14}  ({during[0] / before[0]:.0%} of before)")
    print(f"rebalance: epoch {rebalance['epoch']}, {rebalance['moved_experts']} experts moved "
          f"({rebalance['moved_experts'] * expert_bytes / 1024:.0f} KiB), predicted max/mean "
          f"{rebalance['predicted_max_over_mean']:.3f}, {1000 * rebalance['seconds']:.2f} ms decision to switch")
    print(f"during: {len(scales)} scalings, {moved} experts ({moved * expert_bytes / 2**20:.1f} MiB) in "
          f"{1000 * secs:.1f} ms of migration ({1000 * secs / max(len(scales), 1):.2f} ms each, "
          f"{moved * expert_bytes / max(secs, 1e-9) / 1e9:.3f} GB/s decision to switch), "
          f"{secs / SECONDS:.0%} of the phase migrating")
    moved = sum(r["moved_experts"] for r in idle)
    secs = sum(r["seconds"] for r in idle)
    print(f"idle: {len(idle)} scalings, {moved / len(idle):.1f} experts ({moved * expert_bytes / len(idle) / 1024:.0f} KiB) "
          f"each in {1000 * secs / len(idle):.2f} ms decision to switch: {moved * expert_bytes / secs / 1e9:.3f} GB/s")


if __name__ == "__main__":
    main()
