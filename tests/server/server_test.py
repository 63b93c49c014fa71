#!/usr/bin/env python3
"""`moe serve` end to end on a fixture model, with the official openai client and raw HTTP.

Starts the server on 127.0.0.1 at a free port (--port 0; the port is read from its "serving ... on" line)
and checks: completions and streaming (the streamed text equals the whole one), stop, max_tokens, seed
reproducibility, logprobs, greedy text equal to `moe generate`; chat completions rendered with the model's
template or --chat-template equal to the completion of the text transformers renders; 32 concurrent
clients each equal to the same request alone, with /metrics adding up; a client that disconnects
mid-stream frees its KV blocks; bad requests, an oversized body, a slow client and a bounded flood each
answered; the API key; bad command lines; SIGINT and SIGTERM stop the server cleanly; --trace-routing
writes the routing. Ends with "server tests: N passed" (exit 0) or the failures (exit 1).

usage: server_test.py MOE_BINARY MODEL_DIR
"""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

import openai

MOE, MODEL = sys.argv[1], sys.argv[2]
NAME = "fixture"


class Server:
    """A `moe serve` process; its port read from the line it prints once it accepts requests."""

    def __init__(self, *flags, model=MODEL):
        self.proc = subprocess.Popen([MOE, "serve", "--model", model, "--port", "0", "--served-model-name", NAME,
                                      *flags], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        match = re.fullmatch(r"serving (\S+) on http://127\.0\.0\.1:(\d+)\n", line)
        if not match:
            self.proc.kill()
            raise AssertionError(f"moe serve printed {line!r}; stderr: {self.proc.stderr.read()}")
        assert match.group(1) == NAME
        self.port = int(match.group(2))
        self.base = f"http://127.0.0.1:{self.port}"

    def client(self, api_key="unused"):
        return openai.OpenAI(base_url=self.base + "/v1", api_key=api_key, max_retries=0, timeout=60)

    def request(self, method, path, body=None, headers=None):
        """(status, body text) of one raw HTTP request."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        conn.request(method, path, body=data, headers=headers or {})
        res = conn.getresponse()
        text = res.read().decode()
        conn.close()
        return res.status, text

    def metrics(self):
        status, text = self.request("GET", "/metrics")
        assert status == 200, status
        values = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                key, value = line.rsplit(" ", 1)
                values[key] = float(value)
        return values

    def stop(self, sig=signal.SIGTERM):
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout=20)
        assert code == 0, f"moe serve exited with {code}: {self.proc.stderr.read()}"


def completion(client, **kw):
    return client.completions.create(model=NAME, **kw)


def streamed(client, **kw):
    """(text, finish_reason, usage) of a streamed completion."""
    text, finish, usage = "", None, None
    for chunk in client.completions.create(model=NAME, stream=True, stream_options={"include_usage": True}, **kw):
        if chunk.usage:
            usage = chunk.usage
        for choice in chunk.choices:
            text += choice.text
            finish = choice.finish_reason or finish
    return text, finish, usage


PROMPTS = ["Hello world", "The quick brown fox", "Once upon a time there was", "1 2 3 4 5 6 7 8",
           "MoE layers route each token to", "a", "Paris is the capital of", "def f(x):\n    return"]


def test_models_and_health(s):
    assert s.request("GET", "/health")[0] == 200
    assert [m.id for m in s.client().models.list().data] == [NAME]


def test_greedy_equals_moe_generate(s):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "generate.json")
        subprocess.run([MOE, "generate", "--model", MODEL, "--prompt", "Hello world", "--max-new-tokens", "12",
                        "--json", out], check=True, capture_output=True)
        expected = json.load(open(out))
    r = completion(s.client(), prompt="Hello world", max_tokens=12, temperature=0)
    assert r.usage.completion_tokens == len(expected["generated_ids"])
    assert r.usage.prompt_tokens == len(expected["prompt_ids"])
    assert r.choices[0].text == expected["text"].replace("<|endoftext|>", ""), (r.choices[0].text, expected["text"])
    # The prompt as token ids gives the same.
    ids = completion(s.client(), prompt=expected["prompt_ids"], max_tokens=12, temperature=0)
    assert ids.choices[0].text == r.choices[0].text


def test_streaming_equals_whole(s):
    c = s.client()
    for kw in ({"temperature": 0}, {"temperature": 1.0, "seed": 11, "top_p": 0.9, "extra_body": {"top_k": 50}}):
        whole = completion(c, prompt="Once upon a time", max_tokens=20, **kw)
        text, finish, usage = streamed(c, prompt="Once upon a time", max_tokens=20, **kw)
        assert text == whole.choices[0].text, (text, whole.choices[0].text)
        assert finish == whole.choices[0].finish_reason
        assert usage.completion_tokens == whole.usage.completion_tokens
        assert usage.prompt_tokens == whole.usage.prompt_tokens


CHAT_TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "chat_templates")


def chat_equals_completion_of_rendered(s, family, bos=None):
    """A chat completion equals the completion of its messages as transformers renders them with `family`'s
    template (the chat template fixtures; `bos` the family's BOS, which the served model replaces with its
    own: none); returns them."""
    conversation = json.load(open(os.path.join(CHAT_TEMPLATES, "conversations.json")))[0]
    rendered = open(os.path.join(CHAT_TEMPLATES, "expected", f"{family}.{conversation['name']}.txt")).read()
    if bos:
        rendered = rendered.replace(bos, "")
    c = s.client()
    chat = c.chat.completions.create(model=NAME, messages=conversation["messages"], max_tokens=12, temperature=0)
    plain = completion(c, prompt=rendered, max_tokens=12, temperature=0)
    assert chat.choices[0].message.role == "assistant"
    assert chat.choices[0].message.content == plain.choices[0].text, (chat, plain)
    assert chat.usage.prompt_tokens == plain.usage.prompt_tokens
    assert chat.choices[0].finish_reason == plain.choices[0].finish_reason
    return conversation, chat


def test_chat(s):
    # The model's own template (tokenizer_config.json); streamed, the same.
    conversation, chat = chat_equals_completion_of_rendered(s, "qwen3_moe")
    c = s.client()
    text, finish, usage, roles = "", None, None, []
    for chunk in c.chat.completions.create(model=NAME, messages=conversation["messages"], max_tokens=12,
                                           temperature=0, stream=True, stream_options={"include_usage": True}):
        usage = chunk.usage or usage
        for choice in chunk.choices:
            text += choice.delta.content or ""
            roles += [choice.delta.role] if choice.delta.role else []
            finish = choice.finish_reason or finish
    assert (text, finish, roles) == (chat.choices[0].message.content, chat.choices[0].finish_reason, ["assistant"])
    assert usage.completion_tokens == chat.usage.completion_tokens
    scored = c.chat.completions.create(model=NAME, messages=conversation["messages"], max_tokens=4, temperature=0,
                                       logprobs=True, top_logprobs=2)
    content = scored.choices[0].logprobs.content
    assert len(content) == scored.usage.completion_tokens and all(len(t.top_logprobs) == 2 for t in content)
    assert content[0].top_logprobs[0].token == content[0].token
    # chat_template_kwargs reach the template (Qwen3's enable_thinking: the empty think block).
    no_thinking = c.chat.completions.create(model=NAME, messages=conversation["messages"], max_tokens=1,
                                            extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    assert no_thinking.usage.prompt_tokens > chat.usage.prompt_tokens
    expect_error(s, {"messages": []}, 400, "'messages' is required", path="/v1/chat/completions")
    expect_error(s, {"messages": [{"content": "x"}]}, 400, "'role'", path="/v1/chat/completions")


def test_stop(s):
    c = s.client()
    full = completion(c, prompt="The quick brown fox", max_tokens=24, temperature=0).choices[0].text
    assert len(full) >= 8, full
    stop = full[len(full) // 2:len(full) // 2 + 3]
    r = completion(c, prompt="The quick brown fox", max_tokens=24, temperature=0, stop=[stop])
    assert r.choices[0].text == full[:full.index(stop)], (r.choices[0].text, full, stop)
    assert r.choices[0].finish_reason == "stop"
    text, finish, _ = streamed(c, prompt="The quick brown fox", max_tokens=24, temperature=0, stop=stop)
    assert (text, finish) == (r.choices[0].text, "stop")


def test_max_tokens(s):
    r = completion(s.client(), prompt="1 2 3 4 5 6 7 8", max_tokens=3, temperature=0)
    assert r.usage.completion_tokens == 3 and r.choices[0].finish_reason == "length", r
    zero = completion(s.client(), prompt="1 2 3", max_tokens=0)
    assert zero.usage.completion_tokens == 0 and zero.choices[0].text == ""


def test_seed(s):
    c = s.client()
    a = completion(c, prompt="Paris is", max_tokens=24, temperature=1.0, seed=7).choices[0].text
    b = completion(c, prompt="Paris is", max_tokens=24, temperature=1.0, seed=7).choices[0].text
    d = completion(c, prompt="Paris is", max_tokens=24, temperature=1.0, seed=8).choices[0].text
    assert a == b and a != d, (a, b, d)


def test_logprobs(s):
    r = completion(s.client(), prompt="Hello world", max_tokens=6, temperature=0, logprobs=3)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == r.usage.completion_tokens
    for token, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert len(top) >= 3 and logprob <= 0
        assert abs(max(top.values()) - logprob) < 1e-6  # greedy: the most likely
    assert "".join(lp.tokens) == r.choices[0].text


def test_concurrent_clients_equal_alone(s):
    c = s.client()
    requests = [{"prompt": PROMPTS[i % len(PROMPTS)] + " " * (i // len(PROMPTS)), "max_tokens": 4 + (i * 5) % 29,
                 "temperature": 0, "stream": i % 3 == 0} for i in range(32)]

    def run(req):
        kw = dict(req)
        if kw.pop("stream"):
            text, finish, usage = streamed(c, **kw)
            return text, finish, usage.prompt_tokens, usage.completion_tokens
        r = completion(c, **kw)
        return r.choices[0].text, r.choices[0].finish_reason, r.usage.prompt_tokens, r.usage.completion_tokens

    alone = [run(req) for req in requests]
    before = s.metrics()
    with ThreadPoolExecutor(32) as pool:
        together = list(pool.map(run, requests))
    after = s.metrics()
    for i, (a, t) in enumerate(zip(alone, together)):
        assert a == t, (i, a, t)
    delta = lambda key: after.get(key, 0) - before.get(key, 0)
    assert delta('moe:requests_total{status="200"}') == 32
    assert sum(delta(f'moe:request_success_total{{finished_reason="{r}"}}') for r in ("stop", "length", "abort")) == 32
    prompt = sum(t[2] for t in together)
    generated = sum(t[3] for t in together)
    assert delta("moe:prompt_tokens_total") == prompt and delta("moe:generation_tokens_total") == generated
    assert delta("moe:num_preemptions_total") == 0
    # Every token but each request's last went through every MoE layer, top_k = 4 pairs each.
    config = json.load(open(os.path.join(MODEL, "config.json")))
    layers = {re.search(r'layer="(\d+)"', k).group(1) for k in after if k.startswith("moe:expert_routed_pairs")}
    assert len(layers) == config["num_hidden_layers"]
    for layer in layers:
        pairs = sum(delta(k) for k in after if k.startswith(f'moe:expert_routed_pairs_total{{layer="{layer}"'))
        assert pairs == config["num_experts_per_tok"] * (prompt + generated - 32), (layer, pairs)
        assert after[f'moe:expert_imbalance{{layer="{layer}"}}'] >= 1.0
    assert after["moe:kv_cache_used_blocks"] == 0 and after["moe:num_requests_running"] == 0
    assert after["moe:time_to_first_token_seconds_count"] - before["moe:time_to_first_token_seconds_count"] == 32


def close_and_wait_freed(s, sock, before):
    """Closes the client's socket; the server must give the sequence's KV blocks back and count one abort."""
    sock.close()
    for _ in range(100):
        after = s.metrics()
        if after["moe:kv_cache_used_blocks"] == 0:
            break
        time.sleep(0.05)
    assert after["moe:kv_cache_used_blocks"] == 0 and after["moe:num_requests_running"] == 0, after
    key = 'moe:request_success_total{finished_reason="abort"}'
    assert after[key] == before[key] + 1, (before[key], after[key])
    return after


def test_disconnect_frees_blocks(s):
    before = s.metrics()
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=30)
    body = json.dumps({"model": NAME, "prompt": "Once upon a time there was", "max_tokens": 480,
                       "temperature": 0, "stream": True}).encode()
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n" % len(body) + body)
    received = b""
    while received.count(b"data: ") < 3:
        received += sock.recv(4096)
    during = s.metrics()
    assert during["moe:kv_cache_used_blocks"] > 0 and during["moe:num_requests_running"] == 1, during
    after = close_and_wait_freed(s, sock, before)
    assert after["moe:generation_tokens_total"] - before["moe:generation_tokens_total"] < 480


def test_disconnect_frees_blocks_not_streamed(s):
    """A client that gives up on a whole (non-streamed) response frees its sequence too."""
    before = s.metrics()
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=30)
    body = json.dumps({"model": NAME, "prompt": "Once upon a time there was", "max_tokens": 480,
                       "temperature": 0}).encode()
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n" % len(body) + body)
    for _ in range(400):
        during = s.metrics()
        if during["moe:num_requests_running"] == 1 and during["moe:kv_cache_used_blocks"] > 0:
            break
        time.sleep(0.005)
    assert during["moe:kv_cache_used_blocks"] > 0 and during["moe:num_requests_running"] == 1, during
    after = close_and_wait_freed(s, sock, before)
    assert after["moe:generation_tokens_total"] - before["moe:generation_tokens_total"] < 480
    status = 'moe:requests_total{status="499"}'
    assert after.get(status, 0) == before.get(status, 0) + 1, after
    # The server goes on serving.
    assert s.client().completions.create(model=NAME, prompt="Hi", max_tokens=2).choices[0].text is not None


def expect_error(s, body, status, phrase, path="/v1/completions", raw=None):
    got, text = s.request("POST", path, raw if raw is not None else body, {"Content-Type": "application/json"})
    assert got == status, (body, got, text)
    error = json.loads(text)["error"]
    assert error["code"] == status and phrase in error["message"], (phrase, error)


def test_bad_requests(s):
    expect_error(s, None, 400, "not valid JSON", raw=b"{bad")
    expect_error(s, None, 400, "JSON object", raw=b"[1, 2]")
    expect_error(s, {"prompt": "x", "temperature": -1}, 400, "temperature")
    expect_error(s, {"prompt": "x", "max_tokens": "many"}, 400, "max_tokens")
    expect_error(s, {"prompt": "x", "top_p": 0}, 400, "top_p")
    expect_error(s, {"prompt": "x", "n": 2}, 400, "'n' is not supported")
    expect_error(s, {"prompt": [1, 99999]}, 400, "outside the vocabulary")
    expect_error(s, {}, 400, "'prompt' is required")
    expect_error(s, {"prompt": list(range(600))}, 400, "maximum context length is 512 tokens, but the prompt has 600")
    expect_error(s, {"prompt": "x", "max_tokens": 600}, 400, "maximum context length is 512")
    expect_error(s, {"prompt": "x", "model": "nope"}, 404, "`nope` does not exist")
    expect_error(s, None, 413, "larger than", raw=b"x" * (5 << 20))
    assert s.request("GET", "/v1/nothing")[0] == 404
    try:
        completion(s.client(), prompt="x", logprobs=21)
        raise AssertionError("logprobs 21 was accepted")
    except openai.BadRequestError as e:
        assert "logprobs" in str(e)
    try:
        s.client().completions.create(model="other", prompt="x")
        raise AssertionError("an unknown model was accepted")
    except openai.NotFoundError:
        pass
    assert completion(s.client(), prompt="still serving", max_tokens=2, temperature=0).usage.completion_tokens == 2


def test_slow_client(s):
    # Half a request, a pause while others are served, then the rest: it is answered too.
    body = json.dumps({"model": NAME, "prompt": "slow", "max_tokens": 3}).encode()
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=30)
    sock.sendall(head + body[:10])
    for prompt in PROMPTS[:4]:
        assert completion(s.client(), prompt=prompt, max_tokens=4, temperature=0).usage.completion_tokens == 4
    time.sleep(1.0)
    sock.sendall(body[10:])
    response = b""
    while b"usage" not in response:
        data = sock.recv(4096)
        assert data, response
        response += data
    assert response.startswith(b"HTTP/1.1 200"), response
    sock.close()


def test_api_key():
    # On a copy of the fixture without a chat template: chat is refused, naming the flag.
    tmp = tempfile.TemporaryDirectory()
    for name in os.listdir(MODEL):
        if name != "tokenizer_config.json":
            os.symlink(os.path.join(os.path.abspath(MODEL), name), os.path.join(tmp.name, name))
    config = json.load(open(os.path.join(MODEL, "tokenizer_config.json")))
    del config["chat_template"]
    json.dump(config, open(os.path.join(tmp.name, "tokenizer_config.json"), "w"))
    trace = os.path.join(tmp.name, "trace.jsonl")
    s = Server("--api-key", "sesame", "--trace-routing", trace, model=tmp.name)
    try:
        # No chat template here (the fixture has none): chat is refused, naming the flag.
        status, text = s.request("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]},
                                 {"Authorization": "Bearer sesame"})
        assert status == 400 and "--chat-template" in text, (status, text)
        assert s.request("GET", "/health")[0] == 200
        for path in ("/v1/models", "/metrics"):
            assert s.request("GET", path)[0] == 401
            assert s.request("GET", path, headers={"Authorization": "Bearer wrong"})[0] == 401
        status, text = s.request("POST", "/v1/completions", {"prompt": "x"})
        assert status == 401 and json.loads(text)["error"]["code"] == 401
        try:
            s.client("wrong").models.list()
            raise AssertionError("a wrong key was accepted")
        except openai.AuthenticationError:
            pass
        r = completion(s.client("sesame"), prompt="x", max_tokens=2, temperature=0)
        assert r.usage.completion_tokens == 2
    finally:
        s.stop()
    # --trace-routing: every token but the last through every MoE layer, the request's id as seq.
    lines = [json.loads(line) for line in open(trace)]
    config = json.load(open(os.path.join(MODEL, "config.json")))
    assert len(lines) == config["num_hidden_layers"] * (r.usage.prompt_tokens + 1), len(lines)
    assert {line["seq"] for line in lines} == {0} and all(len(line["experts"]) == 4 for line in lines)
    tmp.cleanup()


def test_flood_is_bounded():
    # Two sequences and two waiting: a flood of 48 gets results or 503s, every one within the time. (Its
    # server also takes --chat-template.)
    s = Server("--max-num-seqs", "2", "--chat-template", os.path.join(CHAT_TEMPLATES, "mixtral.jinja"))
    try:
        chat_equals_completion_of_rendered(s, "mixtral", bos="<s>")
        body = {"model": NAME, "prompt": "flood", "max_tokens": 24, "temperature": 0}
        start = time.time()
        with ThreadPoolExecutor(48) as pool:
            answers = list(pool.map(lambda _: s.request("POST", "/v1/completions", body), range(48)))
        assert time.time() - start < 60
        statuses = [status for status, _ in answers]
        assert set(statuses) <= {200, 503} and statuses.count(200) >= 4, statuses
        texts = {json.loads(text)["choices"][0]["text"] for status, text in answers if status == 200}
        assert len(texts) == 1, texts
        for status, text in answers:
            if status == 503:
                assert "busy" in json.loads(text)["error"]["message"]
        m = s.metrics()
        assert m['moe:requests_total{status="200"}'] == statuses.count(200) + 2  # and the chat check's
        assert m['moe:requests_total{status="503"}'] == statuses.count(503)
        assert s.request("GET", "/health")[0] == 200
    finally:
        s.stop(signal.SIGINT)


def test_bad_command_lines(s):
    # One line "error: ..." naming the flag, exit 2; a port in use (the shared server's) too.
    for flags, phrase in ((["--model", "/nonexistent"], "--model"),
                          (["--model", MODEL, "--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization"),
                          (["--model", MODEL, "--max-num-seqs", "0"], "--max-num-seqs"),
                          (["--model", MODEL, "--max-num-batched-tokens", "0"], "--max-num-batched-tokens"),
                          (["--model", MODEL, "--chat-template", "/nonexistent.jinja"], "--chat-template"),
                          (["--model", MODEL, "--max-model-len", "100000"], "max_model_len"),
                          (["--model", MODEL, "--ep-transfer", "bf16"], "need --enable-expert-parallel"),
                          (["--model", MODEL, "--enable-expert-parallel", "--ep-combine", "bf16"], "--ep-combine"),
                          (["--model", MODEL, "--port", str(s.port)], f"127.0.0.1:{s.port}")):
        r = subprocess.run([MOE, "serve", *flags], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and r.stderr.startswith("error: ") and phrase in r.stderr, (flags, r)
        assert r.stderr.count("\n") == 1, r.stderr


def test_step_budget():
    # The step budget the server reports: the CPU's default (vLLM's off a large GPU), or the one given.
    for flags, budget in (((), 2048), (("--max-num-batched-tokens", "300"), 300)):
        s = Server(*flags)
        s.stop()
        err = s.proc.stderr.read()
        assert f"steps of up to {budget} tokens" in err, err


def test_sigterm_ends_streams(s):
    # A stream in flight when SIGTERM comes ends (with an error event or its finish), and the server exits 0.
    conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
    conn.request("POST", "/v1/completions", json.dumps({"model": NAME, "prompt": "long", "max_tokens": 500,
                                                         "stream": True, "temperature": 0}))
    res = conn.getresponse()
    assert res.status == 200
    assert b"data: " in res.read1(4096)
    s.proc.send_signal(signal.SIGTERM)
    rest = res.read().decode()
    assert rest.rstrip().endswith("data: [DONE]"), rest[-200:]
    assert s.proc.wait(timeout=20) == 0


def main():
    shared = Server()
    tests = [test_models_and_health, test_greedy_equals_moe_generate, test_streaming_equals_whole, test_chat, test_stop,
             test_max_tokens, test_seed, test_logprobs, test_concurrent_clients_equal_alone,
             test_disconnect_frees_blocks, test_disconnect_frees_blocks_not_streamed,
             test_bad_requests, test_slow_client, test_bad_command_lines]
    failures = []
    passed = 0
    try:
        for test in tests:
            try:
                test(shared)
                passed += 1
            except Exception:
                failures.append((test.__name__, traceback.format_exc()))
        for test in (test_api_key, test_flood_is_bounded, test_step_budget):
            try:
                test()
                passed += 1
            except Exception:
                failures.append((test.__name__, traceback.format_exc()))
        try:
            test_sigterm_ends_streams(shared)
            passed += 1
        except Exception:
            failures.append(("test_sigterm_ends_streams", traceback.format_exc()))
    finally:
        if shared.proc.poll() is None:
            shared.proc.kill()
    for name, trace in failures:
        print(f"FAILED {name}\n{trace}")
    print(f"server tests: {passed} passed" + (f", {len(failures)} failed" if failures else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
