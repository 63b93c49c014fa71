#!/usr/bin/env python3
"""`mpirun -np R moe serve --enable-expert-parallel` end to end on a fixture model, with the openai client.

Checks, at R ranks: a skewed request's on-demand rebalance (POST /admin/rebalance) lowers the rank max/mean
load that GET /admin/placement reports, under the same window; 16 streaming clients of skewed prompts while
the placement rebalances every few steps (the admin endpoints behind --api-key), a burst of rebalance requests among them (one runs at a time: the
others get 409), and, at 4 ranks, /scale_elastic_ep from 4 to 2 and back while they stream, with a watcher
checking that every expert is held by an active rank whenever it looks; every request completes and every
greedy output (text and log-probabilities) equals the same request on one process, bit for bit. Then the
refusals: a size outside 1..R (400), a placement file that leaves an expert unheld (exit 2, `error:`), and a
rank killed by a signal (every rank exits, mpirun reports it, non-zero, no hang). Ends with
"ep server tests: N passed" (exit 0) or the failures (exit 1).

With BACKEND cuda (one GPU per rank, rows over NCCL, run on a GPU machine) the wires are bf16 dispatch and
f32 combine, the reference is the same server at one rank, and outputs must agree in text with
log-probabilities within 1e-4 (the ranks add a token's fp32 partial sums in another order); at one rank the
checks that need a second rank (a rebalance that moves, replicas, a killed peer) are left out. Where the
openai package is missing (the GPU image) a standard-library SSE reader streams instead.

usage: ep_server_test.py MOE_BINARY MPIEXEC MODEL_DIR RANKS [cpu|cuda]
"""
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

try:
    import openai
except ImportError:
    openai = None

MOE, MPIEXEC, MODEL, RANKS = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
BACKEND = sys.argv[5] if len(sys.argv) > 5 else "cpu"
BACKEND_FLAGS = ["--backend", "cuda", "--ep-combine", "f32"] if BACKEND == "cuda" else []
NAME = "fixture"
KEY = "ep-secret"
CONFIG = json.load(open(os.path.join(MODEL, "config.json")))
N_EXPERTS = CONFIG.get("num_experts", CONFIG.get("num_local_experts"))
# One rank has no room for replicas (a rank holds an expert once).
EP_FLAGS = ["--enable-expert-parallel", "--num-redundant-experts", "2" if RANKS > 1 else "0", "--eplb-min-gain",
            "0.01", "--eplb-window-steps", "4", *BACKEND_FLAGS]


class Server:
    """A `moe serve` process (under mpirun with `ranks`); its port read from the line it prints."""

    def __init__(self, *flags, ranks=0):
        prefix = [MPIEXEC, "--oversubscribe", "--allow-run-as-root", "-x", "MOE_NUM_THREADS=1", "-np",
                  str(ranks)] if ranks else []
        self.proc = subprocess.Popen(prefix + [MOE, "serve", "--model", MODEL, "--port", "0", "--served-model-name",
                                               NAME, *flags], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        line = self.proc.stdout.readline()
        match = re.match(r"serving (\S+) on http://127\.0\.0\.1:(\d+)", line)
        if not match:
            self.proc.kill()
            raise AssertionError(f"moe serve printed {line!r}; stderr: {self.proc.stderr.read()}")
        self.port = int(match.group(2))

    def client(self):
        if openai is None:
            return SseClient(self.port)
        return openai.OpenAI(base_url=f"http://127.0.0.1:{self.port}/v1", api_key=KEY, max_retries=0,
                             timeout=120)

    def request(self, method, path, body=None, key=KEY):
        """(status, parsed JSON body) of one raw HTTP request."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        conn.request(method, path, body=b"" if body is None else json.dumps(body).encode(),
                     headers={"Authorization": f"Bearer {key}"})
        res = conn.getresponse()
        text = res.read().decode()
        conn.close()
        return res.status, json.loads(text) if text else None

    def placement(self):
        status, body = self.request("GET", "/admin/placement")
        assert status == 200, (status, body)
        return body

    def leader(self):
        """Rank 0's process (mpirun's child with OMPI_COMM_WORLD_RANK=0), or the server itself."""
        for pid in self.ranks():
            if b"OMPI_COMM_WORLD_RANK=0\0" in open(f"/proc/{pid}/environ", "rb").read():
                return pid
        return self.proc.pid

    def ranks(self):
        return [int(pid) for pid in subprocess.run(["ps", "--ppid", str(self.proc.pid), "-o", "pid="],
                                                   capture_output=True, text=True).stdout.split()]

    def stop(self):
        # NOTE: rank 0 stops the others (mpirun, signalled itself, would abort the job with exit 1).
        os.kill(self.leader(), signal.SIGTERM)
        code = self.proc.wait(timeout=60)
        assert code == 0, f"moe serve exited with {code}: {self.proc.stderr.read()}"


class SseClient:
    """The part of openai.OpenAI this test uses, over http.client: streamed completions as objects whose
    choices have text, logprobs.token_logprobs and finish_reason."""

    def __init__(self, port):
        self.port = port
        self.completions = self

    def create(self, model, stream=False, extra_body=None, **req):
        body = dict(model=model, stream=stream, **req, **(extra_body or {}))
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        conn.request("POST", "/v1/completions", body=json.dumps(body).encode(),
                     headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
        res = conn.getresponse()
        if res.status != 200:
            raise RuntimeError(f"HTTP {res.status}: {res.read().decode()}")
        if not stream:
            return as_object(json.loads(res.read()))
        return self._events(conn, res)

    @staticmethod
    def _events(conn, res):
        for line in res:
            line = line.decode().strip()
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                break
            yield as_object(json.loads(line[len("data: "):]))
        conn.close()


def as_object(value):
    """JSON as attribute access (missing keys read None), the shape of the openai client's objects."""
    class Obj(dict):
        __getattr__ = dict.get
    if isinstance(value, dict):
        return Obj({k: as_object(v) for k, v in value.items()})
    if isinstance(value, list):
        return [as_object(v) for v in value]
    return value


def same_outputs(outputs, reference):
    """Every output equals its reference: bit for bit on the CPU; on GPUs the same text and finish with
    log-probabilities within 1e-4."""
    if BACKEND == "cpu":
        return outputs == reference
    return all(o[0] == e[0] and o[2] == e[2] and len(o[1]) == len(e[1]) and
               all(abs(a - b) <= 1e-4 for a, b in zip(o[1], e[1])) for o, e in zip(outputs, reference))


# Prompts of repeated tokens: a few experts per layer take most pairs.
PROMPTS = [[7] * 12, [7, 7, 7, 7, 3], [11] * 5, [7] * 20, [3, 7] * 4, [7] * 3, [11, 7] * 5, [7] * 9]
REQUESTS = [dict(prompt=PROMPTS[i % len(PROMPTS)], max_tokens=6 + i % 7, logprobs=1 if i % 2 else None)
            for i in range(16)]


def run_one(client, req):
    """(text, token log-probabilities, finish) of a streamed greedy completion."""
    text, logprobs, finish = "", [], None
    for chunk in client.completions.create(model=NAME, temperature=0, stream=True, **req):
        for choice in chunk.choices:
            text += choice.text
            if choice.logprobs:
                logprobs += choice.logprobs.token_logprobs
            finish = choice.finish_reason or finish
    return text, logprobs, finish


def expected():
    """Every request's output on one process (on GPUs: the same server at one rank), one at a time."""
    s = Server("--api-key", KEY) if BACKEND == "cpu" else Server(*EP_FLAGS, "--api-key", KEY, ranks=1)
    try:
        return [run_one(s.client(), req) for req in REQUESTS]
    finally:
        s.stop()


def all_held(placement):
    """Whether every expert of every layer is on an active rank (and the others hold nothing)."""
    active = placement["active_ranks"]
    for layer in placement["layers"].values():
        ranks = layer["ranks"]
        if any(ranks[r] for r in range(active, len(ranks))):
            return False
        if {e for r in range(active) for e in ranks[r]} != set(range(N_EXPERTS)):
            return False
    return True


def stream_all(s):
    with ThreadPoolExecutor(16) as pool:
        futures = [pool.submit(run_one, s.client(), req) for req in REQUESTS]
        return [f.result() for f in futures]


def test_rebalance_lowers_rank_load(s):
    s.client().completions.create(model=NAME, prompt=[7] * 12, max_tokens=8, temperature=0)
    before = s.placement()
    status, r = s.request("POST", "/admin/rebalance")
    assert status == 200, (status, r)
    assert set(r) == {"epoch", "moved_experts", "predicted_max_over_mean", "seconds"}, r
    after = s.placement()
    if RANKS == 1:  # nothing to balance: the answer says so and the epoch stays
        assert r["moved_experts"] == 0 and r["epoch"] == before["epoch"] == after["epoch"], (before, r, after)
        assert after["n_ranks"] == 1 and after["active_ranks"] == 1, after
        return
    assert r["moved_experts"] > 0 and r["epoch"] == before["epoch"] + 1 == after["epoch"], (before, r, after)
    worst_before = max(before["rank_load_max_over_mean"].values())
    worst_after = max(after["rank_load_max_over_mean"].values())
    assert abs(worst_after - r["predicted_max_over_mean"]) < 1e-9, (r, after)
    assert worst_after < worst_before - 0.01, (before, after)
    assert after["n_ranks"] == RANKS and after["active_ranks"] == RANKS, after


def test_streams_while_rebalancing(s, reference):
    epoch = s.placement()["epoch"]
    statuses = []

    def burst():
        time.sleep(0.3)
        start = threading.Barrier(6)

        def one():
            start.wait()
            statuses.append(s.request("POST", "/admin/rebalance"))
        threads = [threading.Thread(target=one) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    burster = threading.Thread(target=burst)
    burster.start()
    outputs = stream_all(s)
    burster.join()
    assert same_outputs(outputs, reference), [(i, o, e) for i, (o, e) in enumerate(zip(outputs, reference)) if o != e]
    assert all(finish in ("length", "stop") for _, _, finish in outputs)
    codes = sorted(code for code, _ in statuses)
    if RANKS == 1:  # nothing moves and the epoch stays; one runs at a time still
        assert set(codes) <= {200, 409} and 200 in codes, statuses
        return
    assert set(codes) <= {200, 409} and 409 in codes, statuses
    for code, body in statuses:
        if code == 409:
            assert body["error"]["code"] == 409 and body["error"]["type"] == "ConflictError", body
    assert s.placement()["epoch"] > epoch, "the placement never switched while the clients streamed"


def test_scale_down_and_up_under_load(s, reference):
    if RANKS != 4:
        return
    seen, stop = [], threading.Event()

    def watch():
        while not stop.is_set():
            seen.append(s.placement())

    def scale():
        time.sleep(0.3)
        for size in (2, 4):
            status, body = s.request("POST", "/scale_elastic_ep", {"new_data_parallel_size": size})
            assert status == 200 and body["new_data_parallel_size"] == size, (status, body)
            placement = s.placement()
            assert placement["active_ranks"] == size, placement
            if size == 2:
                assert not any(l["ranks"][2] or l["ranks"][3] for l in placement["layers"].values()), placement
            time.sleep(0.3)
    watcher, scaler = threading.Thread(target=watch), threading.Thread(target=scale)
    watcher.start()
    scaler.start()
    outputs = stream_all(s)
    scaler.join()
    stop.set()
    watcher.join()
    assert same_outputs(outputs, reference), [(i, o, e) for i, (o, e) in enumerate(zip(outputs, reference)) if o != e]
    assert {p["active_ranks"] for p in seen} >= {2, 4}, {p["active_ranks"] for p in seen}
    assert all(all_held(p) for p in seen), [p for p in seen if not all_held(p)][:1]


def test_admin_needs_the_key(s):
    for method, path in (("POST", "/admin/rebalance"), ("GET", "/admin/placement"), ("POST", "/scale_elastic_ep")):
        status, r = s.request(method, path, {"new_data_parallel_size": 1}, key="wrong")
        assert status == 401 and r["error"]["code"] == 401, (path, status, r)
    assert s.placement()["active_ranks"] == RANKS


def test_bad_sizes(s):
    for body in ({"new_data_parallel_size": 0}, {"new_data_parallel_size": RANKS + 1}, {"size": 2}):
        status, r = s.request("POST", "/scale_elastic_ep", body)
        assert status == 400 and r["error"]["param"] == "new_data_parallel_size", (body, status, r)


def test_unheld_placement_refused():
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "placement.json")
        ranks = [list(range(r * 5, r * 5 + 5)) for r in range(RANKS)]
        ranks[-1] = [e for e in ranks[-1] if e < 15]
        missing = min(set(range(16)) - {e for r in ranks for e in r})  # 15 at 3 ranks, 5 at one
        json.dump({"n_experts": 16, "n_ranks": RANKS, "ranks": ranks}, open(path, "w"))
        p = subprocess.run([MPIEXEC, "--oversubscribe", "--allow-run-as-root", "-np", str(RANKS), MOE, "serve",
                            "--model", MODEL, "--port", "0", *EP_FLAGS, "--placement", path],
                           capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and re.search(rf"^error: placement: expert {missing} is on no rank", p.stderr, re.M), (
        p.returncode, p.stderr)


def test_dead_rank_stops_every_rank():
    if RANKS == 1:  # no peer to kill
        return
    s = Server(*EP_FLAGS, ranks=RANKS)
    children = s.ranks()
    victim = next(pid for pid in children if pid != s.leader())
    client = s.client()
    failed, streaming = [], threading.Event()

    def one():
        try:
            for _ in client.completions.create(model=NAME, prompt=[7] * 12, max_tokens=480, temperature=0,
                                               stream=True, extra_body={"ignore_eos": True}):
                streaming.set()
        except Exception as e:  # the server goes away mid-request
            failed.append(e)
        streaming.set()
    t = threading.Thread(target=one)
    t.start()
    assert streaming.wait(timeout=60)
    os.kill(victim, signal.SIGKILL)
    code = s.proc.wait(timeout=60)
    t.join(timeout=60)
    err = s.proc.stderr.read()
    assert code != 0, err
    assert re.search(r"exited on signal 9|signal 9 \(Killed\)", err), err

    def alive():
        states = {}
        for pid in children:
            try:
                states[pid] = open(f"/proc/{pid}/stat").read().split()[2]
            except OSError:
                pass
        return {pid: state for pid, state in states.items() if state != "Z"}
    deadline = time.time() + 20
    while alive() and time.time() < deadline:
        time.sleep(0.1)
    assert not alive(), f"ranks outlived mpirun: {alive()}"
    assert failed, "the request in flight did not fail"


def main():
    passed, failures = 0, []
    reference = expected()

    def run(test, *args):
        nonlocal passed
        try:
            test(*args)
            passed += 1
        except Exception:
            failures.append(f"{test.__name__}:\n{traceback.format_exc()}")

    s = Server(*EP_FLAGS, "--eplb-interval-steps", "3", "--api-key", KEY, ranks=RANKS)
    try:
        for test in (test_rebalance_lowers_rank_load, test_admin_needs_the_key, test_bad_sizes):
            run(test, s)
        for test in (test_streams_while_rebalancing, test_scale_down_and_up_under_load):
            run(test, s, reference)
    finally:
        run(Server.stop, s)
    run(test_unheld_placement_refused)
    run(test_dead_rank_stops_every_rank)
    for f in failures:
        print(f"FAIL {f}")
    print(f"ep server tests ({RANKS} ranks{', cuda' if BACKEND == 'cuda' else ''}): {passed} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
