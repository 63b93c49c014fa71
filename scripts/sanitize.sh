#!/usr/bin/env bash
# CI's sanitizer jobs, after the normal build and test run:
#   build-asan/  AddressSanitizer + UndefinedBehaviorSanitizer (-DMOE_SANITIZE=address): every test of the
#                CTest labels unit and model (the slow end-to-end cli/mpi tests run once, in the normal build);
#   build-tsan/  ThreadSanitizer (-DMOE_SANITIZE=thread): the multi-threaded CPU paths (the thread pool, the
#                fast experts and router, the layer's and the model's fast-expert tests) on 4 threads.
# Both build without CUDA (the GPU code runs under compute-sanitizer: scripts/device/run.sh sanitizer),
# and the first error halts the test that hit it.
#   scripts/sanitize.sh [asan|tsan]   (both when no argument)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

# The test binaries of the labels unit and model (a new one must be added here: ctest reports it NOT_BUILT).
asan_targets=(moe_reference_tests core_tests cpu_tests cpu_fast_tests routing_tests layer_tests ep_unit_tests
              cpu_dense_tests model_tests generation_tests causal_lm_tests decoder_tests fuzz_replay_tests
              layering_tests)
tsan_targets=(core_tests cpu_fast_tests layer_tests causal_lm_tests)
tsan_tests='ThreadPool|FastExperts|FastRouter|MoeLayerFast|layer_fast_tests_avx2|FastCpuExpertsStayClose'

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}

configure() {  # DIR SANITIZER
  cmake -S . -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_CUDA=OFF -DMOE_SANITIZE="$2" >/dev/null
}

run_asan() {
  configure build-asan address
  cmake --build build-asan --parallel "$jobs" --target "${asan_targets[@]}"
  ctest --test-dir build-asan --output-on-failure --parallel "$jobs" --timeout 600 -L 'unit|model'
}

run_tsan() {
  configure build-tsan thread
  cmake --build build-tsan --parallel "$jobs" --target "${tsan_targets[@]}"
  # NOTE: 4 threads on CI's 2 cores, so that the pool's workers interleave with the caller.
  MOE_NUM_THREADS=4 ctest --test-dir build-tsan --output-on-failure --parallel "$jobs" --timeout 600 -R "$tsan_tests"
}

case "${1:-all}" in
  asan) run_asan ;;
  tsan) run_tsan ;;
  all) run_asan; run_tsan ;;
  *) echo "usage: scripts/sanitize.sh [asan|tsan]" >&2; exit 2 ;;
esac
