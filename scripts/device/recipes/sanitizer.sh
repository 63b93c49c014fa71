#!/usr/bin/env bash
# The GPU test binaries under compute-sanitizer's memcheck, racecheck, initcheck and synccheck.
# The 2 x 4 runs go side by side (the GPU and the 16 cores have room; each run serialises its own kernels),
# each cut at LIMIT seconds (default 170) so that the call fits its budget; a run cut short is reported with
# how many tests it finished. GTEST_FILTER in the environment narrows every binary's tests (gtest reads it),
# e.g. GTEST_FILTER='CudaGroupedGemm*:CudaMoeLayer.EveryFamily*'; TOOLS narrows the tools (default: all four),
# e.g. TOOLS=synccheck. Logs in $OUT/sanitizer_logs.tgz; exit 1 on a sanitizer finding or a failing test.
set -uo pipefail
source scripts/device/lib/common.sh
work=/tmp/moe-sanitizer && rm -rf "$work" && mkdir -p "$work"
limit=${LIMIT:-170}
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
"$sanitizer" --version | tail -1

binaries=()
for b in cuda_tests causal_lm_cuda_tests; do [ -x "$carry/bin/$b" ] && binaries+=("$b"); done
pids=()
for tool in ${TOOLS:-memcheck racecheck initcheck synccheck}; do
  for b in "${binaries[@]}"; do
    # NOTE: --error-exitcode separates a sanitizer finding (99) from a failing test (1) and a cut (124).
    timeout "$limit" "$sanitizer" --tool "$tool" --error-exitcode 99 --print-limit 50 "$carry/bin/$b" \
      >"$work/${tool}_$b.log" 2>&1 &
    pids+=("$!:$tool:$b")
  done
done

status=0
for entry in "${pids[@]}"; do
  IFS=: read -r pid tool b <<<"$entry"
  wait "$pid"
  rc=$?
  log="$work/${tool}_$b.log"
  done_tests=$(grep -c '^\[       OK \]' "$log")
  failed_tests=$(grep -c '^\[  FAILED  \]' "$log")
  summary=$(grep -m1 -E '(ERROR|RACECHECK) SUMMARY' "$log" || echo 'no summary (cut short)')
  case $rc in
    0) verdict=clean ;;
    99) verdict="SANITIZER ERRORS"; status=1 ;;
    124) verdict="cut at ${limit} s" ;;
    *) verdict="exit $rc"; status=1 ;;
  esac
  printf '%-10s %-22s %-18s tests ok %4s failed %3s  %s\n' "$tool" "$b" "$verdict" "$done_tests" "$failed_tests" "$summary"
  row "$tool" "$b" "$verdict" "tests ok $done_tests, failed $failed_tests" "$summary"
  # The distinct reports (kind and source line), most frequent first.
  [ "$rc" = 0 ] || grep -E '^========= +(Error|Warning|Invalid|Uninitialized|Barrier|Program hit)' "$log" |
    sed -E 's/\+0x[0-9a-f]+//; s/ \[[0-9]+ hazards\]//' | sort | uniq -c | sort -rn | head -8
done
tar czf "$out/sanitizer_logs.tgz" -C "$work" .
exit $status
