#!/usr/bin/env bash
# The FP8 model fixture deepseek_v3_fp8 (transformers' fine-grained FP8 on the GPU, make_fixtures.py), packed.
# Needs transformers 5.x with FineGrainedFP8Config, torch with CUDA, tokenizers and safetensors on the device
# (no carry: no build is used). The fixture is made in a scratch folder and packed into the one file
# $OUT/deepseek_v3_fp8.tar.xz (the device returns 8 files; the log is run.sh's). Unpack it into
# tests/data/models/ here, then run the CPU tests: ctest --test-dir build -R CausalLmFp8 --output-on-failure.
set -uo pipefail
source scripts/device/lib/common.sh
name=deepseek_v3_fp8
work=/tmp/moe-fp8-fixture && rm -rf "$work" && mkdir -p "$work"
gpu
python3 -c "import transformers, torch, tokenizers; print('transformers', transformers.__version__, 'torch', \
torch.__version__, 'cuda', torch.cuda.is_available()); transformers.FineGrainedFP8Config"
PYTHONUNBUFFERED=1 python3 scripts/device/make_fixtures.py "$work/fixtures" --only "$name"
rc=$?
dir=$work/fixtures/$name
if [ -d "$dir" ]; then
  tar cJf "$out/$name.tar.xz" -C "$work/fixtures" "$name"
  row "$name" "rc $rc" "$(ls "$dir" | wc -l) files" "$(du -sh "$dir" | cut -f1)" \
    "packed $(du -h "$out/$name.tar.xz" | cut -f1)"
else
  row "$name" "rc $rc" "no fixture folder"
fi
if [ -f "$dir/reference.json" ]; then
  python3 - "$dir/reference.json" >> "${SUMMARY:-/dev/null}" <<'PY'
import json, sys
ref = json.load(open(sys.argv[1]))
f = ref["fp8"]
print(f"kernel: {f['kernel']}")
print(f"fp8 vs dequantized: logits max |diff| {f['logit_deviation']:.3e} (tolerance {f['logit_tolerance']:.3e}, "
      f"normwise {f['logits_rel_error']:.2e}); router scores {f['router_score_deviation']:.3e}; "
      f"{f['fp8_tensors']} fp8 tensors, {f['scales']} scales; versions {ref['versions']}")
for c in ref["cases"]:
    low = [i for i, m in enumerate(c["generated_margins"]) if m <= f["logit_tolerance"]]
    same = sum(a == b for a, b in zip(c["generated_ids"], c["dequantized"]["generated_ids"]))
    print(f"prompt of {len(c['ids'])} tokens: fp8 = dequantized greedy on {same} of {len(c['generated_ids'])}; "
          f"first margin <= tolerance at step {low[0] if low else 'none'}")
PY
fi
exit $rc
