#!/usr/bin/env bash
# `moe serve --backend cuda` under scripts/bench_serve.py at concurrency 1, 16 and 64 (random Qwen3-30B-A3B shape).
# The checkpoint: scripts/device/random_model.py (torch and transformers on the device) with LAYERS layers
# (default 4), random bf16 weights, made once; or, with RANDOM_MODEL=NAME (e.g. qwen3-30b-a3b), the full-depth
# shape on random weights made in GPU memory (moe serve --random-model: no checkpoint). The server on 127.0.0.1; each concurrency runs 4x its requests (at least
# 16) of 128 prompt and 64 output tokens (range ratio 0, ignore_eos). SERVE_FLAGS adds flags to moe serve (e.g.
# "--max-num-batched-tokens 8192"). Logs and JSON in $OUT; exit 1 if a run fails.
set -uo pipefail
source scripts/device/lib/common.sh
gpu
status=0
if [ -n "${RANDOM_MODEL:-}" ]; then
  source_flags=(--random-model "$RANDOM_MODEL")
else
  model=/tmp/moe-qwen3-${LAYERS:-4}l  # the decoder recipe's checkpoint when it ran first
  [ -f "$model/config.json" ] || python3 scripts/device/random_model.py qwen3-30b-a3b "${LAYERS:-4}" "$model" \
    > "$out/serve_model.log" 2>&1 || { row "random model" "failed (see serve_model.log)"; exit 1; }
  source_flags=(--model "$model")
fi
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$bin/moe" serve "${source_flags[@]}" --backend cuda --port "$port" --max-num-seqs 64 --max-model-len 512 \
  ${SERVE_FLAGS:-} > "$out/serve.log" 2>&1 &
server=$!
for _ in $(seq 240); do grep -q '^serving ' "$out/serve.log" && break; sleep 0.5; done
grep -q '^serving ' "$out/serve.log" || { row "moe serve" "did not start"; tail -5 "$out/serve.log"; kill $server; exit 1; }
note "$(grep -m1 "^KV cache" "$out/serve.log")${SERVE_FLAGS:+; ${SERVE_FLAGS}}"
note "| concurrency | requests | output tok/s | TTFT p50 / p99 ms | ITL p50 / p99 ms |"
note "|---:|---:|---:|---:|---:|"
for c in 1 16 64; do
  n=$((c * 4 > 16 ? c * 4 : 16))
  python3 scripts/bench_serve.py --base-url "http://127.0.0.1:$port" --num-prompts "$n" --input-len 128 \
    --output-len 64 --range-ratio 0 --max-concurrency "$c" --vocab-size 150000 --json "$out/serve_c$c.json" \
    > "$out/serve_c$c.log" 2>&1 || status=1
  python3 - "$out/serve_c$c.json" "$c" "$n" >> "${SUMMARY:-/dev/null}" <<'PY' || status=1
import json, sys
d = json.load(open(sys.argv[1]))["figures"]
print(f"| {sys.argv[2]} | {d['completed']} of {sys.argv[3]} | {d['output_tokens_per_s']:.0f} | "
      f"{d['ttft_ms']['p50']:.1f} / {d['ttft_ms']['p99']:.1f} | {d['itl_ms']['p50']:.2f} / {d['itl_ms']['p99']:.2f} |")
PY
done
kill -INT $server
wait $server
rc=$?
row "moe serve exit after SIGINT" "$rc"
[ $rc = 0 ] || status=1
exit $status
