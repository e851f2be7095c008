#!/bin/bash
# On the GPU machine, from the repository root, after the wheelhouse install: ncu counters of
# the RMSNorm base and every pathology, one launch each, at 16 x 4096 and 16384 x 8192 FP16.
python3 - <<'PY' > /tmp/rms_libs.txt
from ablate.job import plugins; from ablate.build.compile import build; from ablate.job.variant import variant_from_cfg
p = plugins.load("rmsnorm")
cfgs = {n: plugins.compose("rmsnorm", [f"pathology={n}"]) for n in p.options("pathology")}
vs = {n: variant_from_cfg(c.pathology, p.dir) for n, c in cfgs.items()}
res = build(list(vs.values()), cfgs["none"].build, p, ".")
for n, v in vs.items(): print(n, res[v.name].lib)
PY
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,lts__t_sector_hit_rate.pct,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,launch__registers_per_thread
for s in "16 4096" "16384 8192"; do
  while read name lib; do
    echo "=== $name $s"
    ncu --clock-control none -k regex:rmsnorm_fwd --launch-skip 3 --launch-count 1 --metrics $M --csv \
      python3 docs/experiments/rmsnorm_ncu.py $lib $s 2>&1 | grep -E '^"[0-9]' | awk -F'","' '{print $(NF-2), $NF}' | tr -d '"'
  done < /tmp/rms_libs.txt
done
