#!/usr/bin/env bash
# On the device, one call (issue 5): builds of the CUDA backend measured against each other. The carry
# holds variants.tar.xz: one folder per build (its moe and cuda_tests, e.g. built here with a kernel
# constant changed; xz keeps several builds within the carry limit), and ENVS adds environment settings
# ("name:VAR=value;VAR=value name2:..."; values may hold commas; default one empty setting), every build run under each. Each build's wgmma tests under each setting, then
# `moe bench --backend cuda` at every point with the variants alternated over ROUNDS rounds (the spread
# between processes is 5-15%), a table last. BUILDS names a subset of the builds; STAMPS=1 adds the fused
# decode kernel's phase stamps at T=1 (CudaDecode.DISABLED_PhaseTimes*) for every build and setting; NAME
# names the packed logs (two calls in one device command keep both).
# Usage: CARRY=.device-carry-exp [ENVS=...] [ROUNDS=2] [BUILDS=...] [STAMPS=1] [NAME=...] \
#          bash scripts/device/variants_bench.sh "shape:tokens ..."
set -uo pipefail
carry=${CARRY:-.device-carry-exp}
out=${OUT:-/tmp}
work=/tmp/variants-bench && rm -rf "$work" && mkdir -p "$work"
export LD_LIBRARY_PATH="$PWD/$carry/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
tar xJf "$carry/variants.tar.xz" -C "$work"
builds=${BUILDS:-$(ls "$work/variants")}
envs=${ENVS:-"default:"}
points=${1:-"deepseek-v3:8192 qwen3-30b-a3b:1024,8192 mixtral-8x7b:8192"}
with_env() {  # settings command...: the command under the ;-separated VAR=value settings
  local settings=$1 && shift
  env ${settings//;/ } "$@"
}
for b in $builds; do
  for e in $envs; do
    name=$b/${e%%:*} settings=${e#*:}
    with_env "$settings" timeout 120 "$work/variants/$b/cuda_tests" --gtest_filter='CudaWgmma*' > "$work/tests.log" 2>&1
    echo "$name wgmma tests: rc $? $(grep -E '^\[  (PASSED|FAILED)' "$work/tests.log" | tr '\n' ' ')"
    cat "$work/tests.log" >> "$work/tests_all.log"
  done
done
if [ -n "${STAMPS:-}" ]; then
  for b in $builds; do
    for e in $envs; do
      with_env "${e#*:}" timeout 120 "$work/variants/$b/cuda_tests" --gtest_also_run_disabled_tests \
        --gtest_filter='CudaDecode.DISABLED_*' 2>&1 | grep -E " T 1:" | sed "s|^|$b/${e%%:*} |"
    done
  done
fi
for round in $(seq "${ROUNDS:-2}"); do
  for b in $builds; do
    for e in $envs; do
      name=$b/${e%%:*} settings=${e#*:}
      for point in $points; do
        shape=${point%%:*} tokens=${point#*:}
        with_env "$settings" timeout 150 "$work/variants/$b/moe" bench --backend cuda --shape "$shape" \
          --tokens "$tokens" --repeats 10 > "$work/bench.tmp" 2>&1 || { echo "$name $shape: rc $?"; tail -3 "$work/bench.tmp"; }
        cat "$work/bench.tmp" >> "$work/bench.log"
        grep -E "^$shape" "$work/bench.tmp" | awk -v v="$name" -v r="$round" '{print v, r, $1, $2, $5, $NF}' >> "$work/table.txt"
      done
    done
  done
done
echo "variant round shape tokens us_median xfloor"
sort -k3,3 -k4,4n -k1,1 "$work/table.txt"
tar czf "$out/${NAME:-variants_bench}.tgz" -C "$work" --exclude=variants .
