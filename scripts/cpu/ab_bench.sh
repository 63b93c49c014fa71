#!/usr/bin/env bash
# A/B of `moe bench --backend cpu` builds on this (noisy, shared) machine: the binaries alternate point by
# point for ROUNDS rounds, and each round's row keeps the run's median, its best run and the ratio to the
# floor paired with the probes around each run. The table gives, per binary and point, the median over
# rounds of each: compare binaries only on the same rows, never against another call's.
# Usage: ROUNDS=5 REPEATS=5 bash scripts/cpu/ab_bench.sh "shape:T,T shape:T" bin/a bin/b [...]
set -euo pipefail
points=$1
shift
rounds=${ROUNDS:-5}
repeats=${REPEATS:-5}
rows=$(mktemp)
json=$(mktemp)
for round in $(seq "$rounds"); do
  for point in $points; do
    for bin in "$@"; do
      "$bin" bench --backend cpu --shape "${point%%:*}" --tokens "${point#*:}" --repeats "$repeats" \
        --json "$json" > /dev/null 2>&1
      python3 - "$json" "$bin" "$round" >> "$rows" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])):
    print(sys.argv[2], sys.argv[3], r["shape"], r["tokens"], r["us_median"], r["us_min"], r["ratio_to_floor_paired"])
PY
    done
  done
done
python3 - "$rows" <<'PY'
import collections, statistics, sys
cells = collections.defaultdict(list)
for line in open(sys.argv[1]):
    b, _, shape, t, med, best, paired = line.split()
    cells[(shape, int(t), b)].append((float(med), float(best), float(paired)))
print(f"{'shape':<15}{'T':>5}  {'binary':<28}{'median us':>11}{'best us':>11}{'paired':>8}  paired by round")
for (shape, t, b), v in sorted(cells.items()):
    m = statistics.median
    print(f"{shape:<15}{t:>5}  {b[-28:]:<28}{m([x[0] for x in v]):>11.0f}{m([x[1] for x in v]):>11.0f}"
          f"{m([x[2] for x in v]):>8.2f}  " + " ".join(f"{x[2]:.2f}" for x in v))
PY
rm -f "$rows" "$json"
