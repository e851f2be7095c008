#!/usr/bin/env bash
# For the lead, on nvidia-h200-x2, from the repo root after the wheel install line:
#   bash .gpu-two.sh            (or one phase at a time: bash .gpu-two.sh build | one | all | compare)
# Logs and wall times land in runs/scale-out/ and, when $OUT is set, are copied there.
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD
bash tools/scale-out.sh "$@"; rc=$?
[ -n "${OUT:-}" ] && cp runs/scale-out/*.log runs/scale-out/wall runs/scale-out/*.txt "$OUT"/ 2>/dev/null
exit $rc
