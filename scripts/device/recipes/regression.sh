#!/usr/bin/env bash
# The GPU tests, then `moe bench --backend cuda` at T = 1, 16, 1024, 8192 on the three reference shapes.
# Test logs in $OUT, the bench's JSON and text in $OUT/regression_bench.tgz; the bench rows in the summary.
# Exit 1 if a test or a bench fails.
set -uo pipefail
source scripts/device/lib/common.sh
work=/tmp/moe-regression && rm -rf "$work" && mkdir -p "$work"
status=0
bash scripts/device/recipes/tests.sh || status=1
note "shape	T	us	x floor	path"
for shape in qwen3-30b-a3b deepseek-v3 mixtral-8x7b; do
  "$bin/moe" bench --backend cuda --shape $shape --tokens 1,16,1024,8192 --json "$work/bench_$shape.json" \
    > "$work/bench_$shape.txt" 2>&1 || status=1
  cat "$work/bench_$shape.txt"
  [ -s "$work/bench_$shape.json" ] && python3 - "$work/bench_$shape.json" >> "$SUMMARY" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])):
    print("\t".join([r["shape"], str(r["tokens"]), f'{r["us_median"]:.1f}', f'{r["ratio_to_floor"]:.2f}', r.get("path", "")]))
PY
done
tar czf "$out/regression_bench.tgz" -C "$work" .
exit $status
