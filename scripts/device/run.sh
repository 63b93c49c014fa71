#!/usr/bin/env bash
# The one driver of the scripted GPU runs:  bash scripts/device/run.sh RECIPE [ARGS...]
# A recipe is scripts/device/recipes/RECIPE.sh. `prepare` and `prepare_nccl` run here (no GPU needed) and
# gather the build into a carry folder; every other recipe runs on the device machine from that carry, e.g.
#   here:        bash scripts/device/run.sh prepare
#   device call: carry [".device-carry"], command "bash scripts/device/run.sh side_by_side"
# The recipe's whole output goes to $OUT/RECIPE.log (OUT: the folder the device tool returns; /tmp/moe-device
# elsewhere); the rows it adds to the summary (lib/common.sh: `row`) are printed last, aligned, after its exit
# status. The device returns at most 8 files from $OUT: a recipe keeps at most 7 there (the log is the 8th)
# and packs the rest into a tarball. Without arguments: the recipes and what each does; --check: every recipe and library parses, says
# what it does on its line 2 and uses lib/common.sh (CTest runs this).
set -uo pipefail
cd "$(dirname "$0")/../.."
recipes=scripts/device/recipes
list() {
  for f in "$recipes"/*.sh; do printf '  %-13s %s\n' "$(basename "$f" .sh)" "$(sed -n '2s/^# //p' "$f")"; done
}
if [ "${1:-}" = --check ]; then
  bad=0
  for f in scripts/device/lib/*.sh "$recipes"/*.sh; do
    bash -n "$f" || { echo "$f: does not parse"; bad=1; }
  done
  for f in "$recipes"/*.sh; do
    sed -n 2p "$f" | grep -qE '^# [A-Z`]' || { echo "$f: line 2 must say what the recipe does"; bad=1; }
    grep -q 'source scripts/device/lib/common.sh' "$f" || { echo "$f: does not source lib/common.sh"; bad=1; }
  done
  [ "$(ls "$recipes"/*.sh | wc -l)" -gt 0 ] || { echo "no recipes"; bad=1; }
  [ $bad = 0 ] && echo "$(ls "$recipes"/*.sh | wc -l) recipes checked"
  exit $bad
fi
if [ $# -lt 1 ] || [ ! -f "$recipes/$1.sh" ]; then
  [ $# -ge 1 ] && echo "unknown recipe: $1"
  echo "usage: bash scripts/device/run.sh RECIPE [ARGS...]"
  list
  exit 2
fi
recipe=$1
shift
export OUT=${OUT:-/tmp/moe-device}
mkdir -p "$OUT"
SUMMARY=$(mktemp)
export SUMMARY
bash "$recipes/$recipe.sh" "$@" 2>&1 | tee "$OUT/$recipe.log"
rc=${PIPESTATUS[0]}
echo
echo "== $recipe: exit $rc (full log: $OUT/$recipe.log)"
# Tab-separated rows are aligned in columns; other lines (a markdown table, a note) print as they are.
awk -F'\t' '{ line[NR] = $0; n[NR] = NF; for (i = 1; i <= NF; i++) if (NF > 1 && length($i) > w[i]) w[i] = length($i) }
  END { for (r = 1; r <= NR; r++) { if (n[r] < 2) { print line[r]; continue }
          split(line[r], f, "\t"); s = ""; for (i = 1; i <= n[r]; i++) s = s sprintf("%-" w[i] + 2 "s", f[i]); print s } }' "$SUMMARY"
rm -f "$SUMMARY"
exit "$rc"
