#!/usr/bin/env bash
# A/B of `moe bench --backend cpu` builds on this (noisy, shared) machine: the binaries alternate point by
# point for ROUNDS rounds, and each round's row keeps the run's median, its best run and the ratio to the
# floor paired with the probes around each run. The table gives, per binary and point, the median over
# rounds of each: compare binaries only on the same rows, never against another call's. The memory of these
# VMs switches between a slow and a fast state (read ~30-37 against ~55-61 GB/s) from minute to minute, and
# a binary whose runs fell in the fast state more often shows a lower time and a higher ratio; so a second
# table splits every timed run by the read bandwidth measured around it (FAST_GBPS, default 45).
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
    runs = r["runs"]
    per_run = ",".join(f"{g:.1f}:{u:.0f}:{q:.3f}" for g, u, q in zip(runs["read_gbps"], runs["us"], runs["ratio_to_floor"]))
    print(sys.argv[2], sys.argv[3], r["shape"], r["tokens"], r["us_median"], r["us_min"], r["ratio_to_floor_paired"], per_run)
PY
    done
  done
done
python3 - "$rows" "${FAST_GBPS:-45}" <<'PY'
import collections, statistics, sys
cells = collections.defaultdict(list)
states = collections.defaultdict(list)  # (shape, T, binary, state) -> [(us, paired ratio)] of single runs
fast = float(sys.argv[2])
for line in open(sys.argv[1]):
    b, _, shape, t, med, best, paired, per_run = line.split()
    cells[(shape, int(t), b)].append((float(med), float(best), float(paired)))
    for run in per_run.split(","):
        g, u, q = run.split(":")
        states[(shape, int(t), b, "fast" if float(g) >= fast else "slow")].append((float(u), float(q)))
print(f"{'shape':<15}{'T':>5}  {'binary':<28}{'median us':>11}{'best us':>11}{'paired':>8}  paired by round")
for (shape, t, b), v in sorted(cells.items()):
    m = statistics.median
    print(f"{shape:<15}{t:>5}  {b[-28:]:<28}{m([x[0] for x in v]):>11.0f}{m([x[1] for x in v]):>11.0f}"
          f"{m([x[2] for x in v]):>8.2f}  " + " ".join(f"{x[2]:.2f}" for x in v))
print(f"\nsingle runs by memory state (read >= {fast:g} GB/s around the run: fast)")
print(f"{'shape':<15}{'T':>5}  {'binary':<28}{'state':>6}{'runs':>6}{'median us':>11}{'paired':>8}")
for (shape, t, b, state), v in sorted(states.items()):
    m = statistics.median
    print(f"{shape:<15}{t:>5}  {b[-28:]:<28}{state:>6}{len(v):>6}{m([x[0] for x in v]):>11.0f}{m([x[1] for x in v]):>8.2f}")
PY
rm -f "$rows" "$json"
