#!/usr/bin/env bash
# Quick start, step 1: install what is missing, build, then generate text with a small bundled MoE model
# (tests/data/models/qwen3_moe: the real qwen3_moe architecture and tokenizer, random weights, so the text
# is gibberish) to show generation, speed and routing; then `moe demo` (a DeepSeek-V3-shaped MoE layer).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
build/bin/moe generate --model tests/data/models/qwen3_moe --prompt "Mixture of experts: every token picks its experts." \
    --max-new-tokens 24 --print-ids --trace-routing build/demo_trace.jsonl --stats build/demo_stats.json
echo
echo "routing trace (build/demo_trace.jsonl, one line per token and MoE layer), first lines:"
head -n 3 build/demo_trace.jsonl
echo "per-layer load statistics: build/demo_stats.json"
echo
build/bin/moe demo "$@"
