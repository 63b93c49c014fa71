#!/usr/bin/env bash
# The tuned tile table: autotune_tiles.py screens and confirms grouped-GEMM choices per shape and token bucket.
# Writes $OUT/tuned_tiles.inc (rows to merge into src/cuda/tuned_tiles.inc), autotune_table.md and raw.jsonl.
# Usage: autotune [autotune_tiles.py options], e.g. autotune --shapes qwen3-30b-a3b,mixtral-8x7b --rounds 2
set -uo pipefail
source scripts/device/lib/common.sh
gpu
PYTHONUNBUFFERED=1 python3 scripts/device/autotune_tiles.py --moe "$bin/moe" --out "$out" "$@"
rc=$?
[ -f "$out/tuned_tiles.inc" ] && cat "$out/tuned_tiles.inc" >> "$SUMMARY"
exit $rc
