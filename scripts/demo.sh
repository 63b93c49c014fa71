#!/usr/bin/env bash
# Quick start, step 1: install what is missing, build, and run the demo (a DeepSeek-V3-shaped MoE layer).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
build/bin/moe demo "$@"
