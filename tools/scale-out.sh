#!/usr/bin/env bash
# Scale-out check on a host with several GPUs: the same sweep (every pathology of a kernel on
# four shapes, ~84 jobs for attention) timed on one GPU (CUDA_VISIBLE_DEVICES=0), then on
# every GPU of the host (a sweep's default: one warm GPU child per GPU, ablate/gpu/pool.py),
# each cold (no kept GPU child: `ablate stop-workers` first) and warm (run again at once:
# the kept children serve it); the wall times, then the two warm rankings compared job by job
# (`ablate rank --compare`: DISAGREE where two intervals do not overlap, even widened by the
# spread between the GPUs that the sweep on all of them measured with its control).
#
#   tools/scale-out.sh                 # all phases: build, one, all, compare
#   tools/scale-out.sh one             # one phase (one and all: cold then warm)
#   KERNEL=rmsnorm SHAPES=r16_h4k,r16_h8k tools/scale-out.sh
#
# The variants are built first (a static sweep), so that neither timed sweep pays for the
# builds. Each run writes runs/scale-out/<run>.log; the wall times go to runs/scale-out/wall.
set -euo pipefail
KERNEL=${KERNEL:-attention}
SHAPES=${SHAPES:-s512,s1k,s2k,s4k}
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

cold_and_warm() {  # cold_and_warm NAME: the sweep with no kept GPU child, then again warm
  local name=$1
  ablate stop-workers
  timed "$name-cold" ablate "${sweep[@]}" "hydra.sweep.dir=runs/hydra/multirun/scale-out-$name-cold"
  timed "$name-warm" ablate "${sweep[@]}" "hydra.sweep.dir=runs/hydra/multirun/scale-out-$name-warm"
}

phase_build() { timed build ablate "${sweep[@]}" mode=static hydra.sweep.dir=runs/hydra/multirun/scale-out-static; }
phase_one() { CUDA_VISIBLE_DEVICES=0 cold_and_warm one; }
phase_all() {
  echo "GPUs: $(nvidia-smi -L | wc -l)"
  cold_and_warm all
}
phase_compare() {
  python3 -m ablate.report.rank --sweep scale-out-all-warm | tee "$OUT_DIR/rank-all.txt"
  python3 -m ablate.report.rank --compare scale-out-one-warm scale-out-all-warm | tee "$OUT_DIR/compare.txt"
  python3 - "$OUT_DIR/wall" <<'PY'
import sys
wall = {}
for line in open(sys.argv[1]):
    name, seconds = line.split()
    wall[name] = float(seconds)  # the latest run of each phase
for kind in ("cold", "warm"):
    one, every = wall.get(f"one-{kind}"), wall.get(f"all-{kind}")
    if one is not None and every is not None:
        print(f"{kind}: 1 GPU {one:.1f} s, all GPUs {every:.1f} s: {one / max(every, 0.1):.2f}x faster")
PY
}

phases=("$@")
[ ${#phases[@]} -eq 0 ] && phases=(build one all compare)
for p in "${phases[@]}"; do "phase_$p"; done
