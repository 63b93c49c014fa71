#!/usr/bin/env bash
# The GPU tests, then `moe bench --backend cuda` at T = 1, 16, 1024, 8192 on the three reference shapes.
# Logs and JSON in $OUT; the bench rows in the summary. Exit 1 if a test or a bench fails.
set -uo pipefail
source scripts/device/lib/common.sh
status=0
bash scripts/device/recipes/tests.sh || status=1
note "shape	T	us	x floor	path"
for shape in qwen3-30b-a3b deepseek-v3 mixtral-8x7b; do
  "$bin/moe" bench --backend cuda --shape $shape --tokens 1,16,1024,8192 --json "$out/bench_$shape.json" \
    > "$out/bench_$shape.txt" 2>&1 || status=1
  cat "$out/bench_$shape.txt"
  python3 - "$out/bench_$shape.json" >> "$SUMMARY" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])):
    print("\t".join([r["shape"], str(r["tokens"]), f'{r["us_median"]:.1f}', f'{r["ratio_to_floor"]:.2f}', r.get("path", "")]))
PY
done
exit $status
