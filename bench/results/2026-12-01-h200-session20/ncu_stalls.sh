#!/usr/bin/env bash
# On the device: where the wgmma GEMM's warps stall (ncu WarpStateStats + SourceCounters, per SASS instruction), for
# DeepSeek-V3 T=8192 (gate/up, down); and the same sections for cuBLAS's bmm at that shape (bmm_peer.py --once).
set -uo pipefail
source scripts/device/carry_env.sh
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
work=/tmp/ncu_stalls && rm -rf $work && mkdir -p $work
POINT=${POINT:-deepseek-v3:8192}
timeout 250 $ncu --clock-control none -k regex:grouped_gemm -c 2 --section WarpStateStats --section SourceCounters \
  --section SpeedOfLight -o $work/ours $bin/moe bench --backend cuda --shape ${POINT%%:*} --tokens ${POINT#*:} --repeats 3 > $work/ours.log 2>&1
timeout 200 $ncu --clock-control none -k "regex:nvjet|gemm|cutlass|xmma" -c 2 --section WarpStateStats --section SourceCounters \
  --section SpeedOfLight -o $work/cublas python3 scripts/device/bmm_peer.py $POINT --once > $work/cublas.log 2>&1
for r in ours cublas; do
  $ncu --import $work/$r.ncu-rep --print-details all --section WarpStateStats > $work/${r}_warpstate.txt 2>&1
  $ncu --import $work/$r.ncu-rep --page source --csv --print-source sass > $work/${r}_sass.csv 2>&1
  echo "=== $r warp state"; grep -E "^  [a-zA-Z_].*\(|Stall|Warp Cycles|Issued|Active Warps|Eligible" $work/${r}_warpstate.txt | sed -E 's/\(.*\)//; s/ +/ /g' | head -70
done
python3 - $work <<'PY'
import csv, sys, collections
work = sys.argv[1]
for r in ["ours", "cublas"]:
    rows = list(csv.reader(open(f"{work}/{r}_sass.csv", errors="replace")))
    # The page lists kernels one after another, each with its own header row.
    blocks, cur = [], None
    for row in rows:
        if row and row[0] == "Address" or (len(row) > 1 and row[1] == "Source" and "Address" in row[0]):
            cur = {"header": row, "rows": []}; blocks.append(cur)
        elif cur is not None and len(row) == len(cur["header"]):
            cur["rows"].append(row)
    for i, b in enumerate(blocks):
        h = b["header"]
        col = next((j for j, x in enumerate(h) if x.startswith("Warp Stall Sampling (All")), None)
        if col is None: print(r, i, "no stall column; header:", h[:12]); continue
        tot = sum(float(x[col] or 0) for x in b["rows"])
        print(f"=== {r} kernel {i}: {len(b['rows'])} instructions, {tot:.0f} samples; top 30:")
        reason_cols = [j for j, x in enumerate(h) if x.startswith("stall_") or "Stall" in x and j != col]
        for x in sorted(b["rows"], key=lambda x: -float(x[col] or 0))[:30]:
            v = float(x[col] or 0)
            print(f"{100*v/max(tot,1):5.1f}% {x[0]:>6} {x[1][:70]:70s}")
PY
tar czf $OUT/ncu_stalls.tgz -C $work .
