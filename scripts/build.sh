#!/usr/bin/env bash
# Configures and builds into build/ (Release; CUDA backend where nvcc is found). Extra arguments go to
# CMake's configure step, e.g. scripts/build.sh -DMOE_CUDA=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build --parallel "$(nproc)"
