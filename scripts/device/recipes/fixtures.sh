#!/usr/bin/env bash
# The model fixtures of tests/data/models, made by transformers (make_fixtures.py), packed into $OUT.
# Needs transformers 5.x, torch and tokenizers on the device (no carry: no build is used). Unpack
# $OUT/fixtures.tgz over tests/data/models/ here, then run the CPU tests (ctest -R causal_lm) against them.
set -uo pipefail
source scripts/device/lib/common.sh
work=/tmp/moe-fixtures && rm -rf "$work" && mkdir -p "$work"
python3 -c "import transformers, torch, tokenizers; print('transformers', transformers.__version__, 'torch', torch.__version__)"
PYTHONUNBUFFERED=1 python3 scripts/device/make_fixtures.py "$work"
rc=$?
tar czf "$out/fixtures.tgz" -C "$work" .
for d in "$work"/*/; do row "$(basename "$d")" "$(ls "$d" | wc -l) files" "$(du -sh "$d" | cut -f1)"; done
exit $rc
