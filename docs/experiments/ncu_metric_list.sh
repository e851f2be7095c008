#!/bin/bash
# On a machine with ncu (no GPU needed): ncu's metric names for a chip, in the form of
# ablate/data/ncu_metrics_gh100.txt (base names with their type, the suffixes each type takes).
# Usage: docs/experiments/ncu_metric_list.sh gh100 > ablate/data/ncu_metrics_gh100.txt
# (the launch__* names, which ncu reports in every raw page, are kept from the current file).
CHIP=${1:-gh100}
ncu --query-metrics --chip "$CHIP" --csv > /tmp/q.csv
ncu --query-metrics-mode all --chip "$CHIP" --csv > /tmp/all.csv
python3 - "$CHIP" <<'PY'
import csv, sys
types = {r[0]: r[1] for r in list(csv.reader(open('/tmp/q.csv')))[1:] if r}
suf = {}
for r in csv.reader(open('/tmp/all.csv')):
    base = r[0].split('.', 1)[0] if r else ''
    if base in types and r[0] != base:
        suf.setdefault(types[base], set()).add(r[0][len(base):])
print(f"# Nsight Compute's metric names for {sys.argv[1]} (docs/experiments/ncu_metric_list.sh)")
for t in sorted(suf):
    for s in sorted(suf[t]):
        print(f"suffix {t} {s}")
for n, t in sorted(types.items()):
    if ' ' not in n:
        print(f"{t} {n}")
for line in open('ablate/data/ncu_metrics_gh100.txt'):
    if line.startswith('Plain '):
        print(line, end='')
PY
