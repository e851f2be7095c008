#!/usr/bin/env bash
# Scale-out check on a host with several GPUs: the same sweep (every pathology of a kernel on
# two shapes) timed on one GPU (Hydra's basic launcher), then on every GPU at once
# (hydra/launcher=gpus); both wall times, then the two rankings compared job by job
# (`ablate rank --compare`: DISAGREE where two intervals do not overlap).
#
#   tools/scale-out.sh                 # all phases: build, one, all, compare
#   tools/scale-out.sh one             # one phase (each fits in 10 minutes on two H200s)
#   KERNEL=rmsnorm SHAPES=r16_h4k,r16_h8k tools/scale-out.sh
#
# The variants are built first (a static sweep), so that neither timed sweep pays for the
# builds. Each phase writes runs/scale-out/<phase>.log; the wall times go to runs/scale-out/wall.
set -euo pipefail
KERNEL=${KERNEL:-attention}
SHAPES=${SHAPES:-s512,s4k}
OUT_DIR=runs/scale-out
mkdir -p "$OUT_DIR"
ablate() { python3 -m ablate "$@"; }
sweep=(-m "kernel=$KERNEL" 'pathology=glob(*)' "shape=$SHAPES")

timed() {  # timed NAME ARGS...: run, log, record the wall time
  local name=$1; shift
  local t0 t1
  t0=$(date +%s.%N)
  "$@" 2>&1 | tee "$OUT_DIR/$name.log"
  t1=$(date +%s.%N)
  echo "$name $(python3 -c "print(f'{$t1 - $t0:.1f}')")" | tee -a "$OUT_DIR/wall"
}

phase_build() { timed build ablate "${sweep[@]}" mode=static hydra.sweep.dir=runs/hydra/multirun/scale-out-static; }
phase_one() { CUDA_VISIBLE_DEVICES=0 timed one ablate "${sweep[@]}" hydra.sweep.dir=runs/hydra/multirun/scale-out-one; }
phase_all() {
  echo "GPUs: $(nvidia-smi -L | wc -l)"
  timed all ablate "${sweep[@]}" hydra/launcher=gpus hydra.sweep.dir=runs/hydra/multirun/scale-out-all
}
phase_compare() {
  python3 -m ablate.report.rank --sweep scale-out-all | tee "$OUT_DIR/rank-all.txt"
  python3 -m ablate.report.rank --compare scale-out-one scale-out-all | tee "$OUT_DIR/compare.txt"
  python3 - "$OUT_DIR/wall" <<'PY'
import sys
wall = {}
for line in open(sys.argv[1]):
    name, seconds = line.split()
    wall[name] = float(seconds)  # the latest run of each phase
if "one" in wall and "all" in wall:
    print(f"wall time: 1 GPU {wall['one']:.1f} s, all GPUs {wall['all']:.1f} s: {wall['one'] / wall['all']:.2f}x faster")
PY
}

phases=("$@")
[ ${#phases[@]} -eq 0 ] && phases=(build one all compare)
for p in "${phases[@]}"; do "phase_$p"; done
