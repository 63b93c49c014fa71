#!/usr/bin/env bash
# Installs what the build and the tests need on Debian 12, only what is missing (idempotent). Run as root
# (or with sudo available). The CUDA toolkit is optional and never installed here: where nvcc exists under
# /usr/local/cuda, the build adds the CUDA backend.
set -euo pipefail

packages=(
  build-essential cmake ninja-build git pkg-config
  nlohmann-json3-dev libcli11-dev libfmt-dev libgtest-dev
  libpcre2-dev  # Unicode regexes of the tokenizer's pre-tokenizers (src/text)
  libutf8proc-dev  # NFC normalisation of the tokenizer (src/text)
  libopenmpi-dev openmpi-bin  # expert parallelism (src/ep) and its mpirun tests
  ccache  # rebuilds of the tree, clean clones included (CMakeLists.txt uses it where installed)
  clang libclang-rt-14-dev  # the libFuzzer fuzzers (scripts/fuzz.sh; libFuzzer's runtime is only recommended by clang)
  libcpp-httplib-dev  # moe serve's HTTP server (src/server)
  python3-pip  # the server tests' client (below)
  bsdutils  # script(1): a CLI test runs moe under a terminal (Essential in Debian; listed for the record)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The server tests (tests/server) talk to `moe serve` with the official openai client, from PyPI.
if ! python3 -c "import openai" 2>/dev/null; then
  echo "setup: installing the openai Python package"
  python3 -m pip install --quiet --user --break-system-packages openai
fi
