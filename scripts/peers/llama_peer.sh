#!/usr/bin/env bash
# The CPU experts beside llama.cpp on this machine: `moe bench --backend cpu` and llama.cpp's MoE expert path (ggml
# MUL_MAT_ID, scripts/peers/llama_moe_peer.cpp) alternated in the same minutes, 2 threads each, cold weights.
# Installs the llama-cpp-python package (PyPI; it builds llama.cpp's libraries for this CPU) into .peers/
# once, builds the peer against its ggml headers and libraries, then prints a table.
# Usage: bash scripts/peers/llama_peer.sh ["shape:T,T,.. ..."] [bf16|int8]   (BUILD: the moe build folder)
set -euo pipefail
cd "$(dirname "$0")/../.."
points=${1:-"qwen3-30b-a3b:1,8,32,128 mixtral-8x7b:1,8,32"}
weights=${2:-bf16}
rounds=${ROUNDS:-2}
repeats=${REPEATS:-5}
build=${BUILD:-build}
site=.peers/site
if [ ! -f "$site/include/ggml.h" ]; then
  mkdir -p .peers
  CMAKE_ARGS="-DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF -DGGML_NATIVE=ON" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
    python3 -m pip install --quiet --no-deps --target "$site" llama-cpp-python
fi
lib=$site/lib
g++ -O2 -std=c++17 -I"$site/include" scripts/peers/llama_moe_peer.cpp -o .peers/llama_moe_peer \
  -L"$lib" -lggml -lggml-base -lggml-cpu -Wl,-rpath,"$PWD/$lib"
peer_type=$([ "$weights" = int8 ] && echo q8_0 || echo bf16)
[ -x "$build/bin/moe" ] || cmake --build "$build" --target moe

table=$(mktemp)
for round in $(seq "$rounds"); do
  for point in $points; do
    shape=${point%%:*} tokens=${point#*:}
    "$build/bin/moe" bench --backend cpu --shape "$shape" --tokens "$tokens" --cpu-weights "$weights" \
      --repeats "$repeats" 2>&1 | awk -v r="$round" -v s="$shape" '$1 == s {print "ours", r, $1, $2, $5, $NF}' >> "$table"
    .peers/llama_moe_peer "$shape" "$tokens" "$peer_type" 2 "$repeats" 2>/dev/null |
      awk -v r="$round" '{print "llama", r, $1, $2, $4, "-"}' >> "$table"
  done
done
echo "side by side, $weights (llama.cpp: $peer_type), 2 threads, median us of $repeats runs per round"
echo "shape           T    ours us (x floor) by round        llama.cpp us by round       llama / ours"
sort -k3,3 -k4,4n -k1,1 -k2,2n "$table" | awk '
  { key = $3 " " $4; if (!(key in seen)) { seen[key] = 1; order[++n] = key }
    if ($1 == "ours") { o[key] = o[key] sprintf(" %9.0f (%s)", $5, $6); os[key] += $5; on[key]++ }
    else { l[key] = l[key] sprintf(" %9.0f", $5); ls[key] += $5; ln[key]++ } }
  END { for (i = 1; i <= n; ++i) { k = order[i]; split(k, p, " ");
          printf "%-14s %4s %-32s %-26s %6.2f\n", p[1], p[2], o[k], l[k], (ls[k] / ln[k]) / (os[k] / on[k]) } }'
rm -f "$table"
