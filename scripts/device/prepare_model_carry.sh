#!/usr/bin/env bash
# Here (no GPU): builds the model runner's GPU test for sm_90a in build-model-cuda/ and gathers it with the
# shared libraries the device image lacks into build-model-cuda/carry/ (git-ignored). Then: device run with
# carry ["build-model-cuda/carry"] and command "bash scripts/device/model_cuda_tests.sh".
set -euo pipefail
cd "$(dirname "$0")/../.."
cmake -S . -B build-model-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_CUDA=ON >/dev/null
cmake --build build-model-cuda --target causal_lm_cuda_tests
carry=build-model-cuda/carry
rm -rf $carry && mkdir -p $carry/bin $carry/lib
cp build-model-cuda/bin/causal_lm_cuda_tests $carry/bin/
for lib in libfmt.so.9 libpcre2-8.so.0 libutf8proc.so.2; do
  [ -e /usr/lib/x86_64-linux-gnu/$lib ] && cp -L /usr/lib/x86_64-linux-gnu/$lib $carry/lib/
done
ldd $carry/bin/causal_lm_cuda_tests | grep -E "not found" || true
du -sh $carry
