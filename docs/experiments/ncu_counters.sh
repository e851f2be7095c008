#!/bin/bash
# Run on the GPU machine from the repository root (the wheelhouse .whl carried along).
# ncu counters for the base and the pathologies whose measured slowdown missed the prediction.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
python3 - <<'PY' > /tmp/libs.txt
from pathlib import Path
from ablate.build.compile import compile as build
from ablate.job import plugins, variant
root = Path('.').resolve(); attention = plugins.load('attention')
names = ['none', 'extra_syncthreads', 'uncoalesced', 'tiny_blocks', 'no_swizzle', 'fp32_accum']
cfgs = [plugins.compose('attention', [f'pathology={n}']) for n in names]
vs = [variant.variant_from_cfg(c.pathology, attention.dir) for c in cfgs]
res = build.build(vs, cfgs[0].build, attention, root)
for v in vs: print(v.name, res[v.name].lib)
PY
M=gpu__time_duration.sum,sm__warps_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,l1tex__t_sectors_pipe_lsu_mem_global_op_ldgsts.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ldgsts.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,lts__t_bytes.sum,dram__bytes.sum,smsp__inst_executed.sum
while read name lib; do
  echo "=== $name"
  ncu --clock-control none --kernel-name regex:attention_fwd --launch-skip 1 --launch-count 1 --metrics $M --csv python3 docs/experiments/ncu_drive.py $lib 2>&1 | grep -E '^"[0-9]' | awk -F'","' '{print $(NF-2), $(NF-1), $NF}' | tr -d '"'
done < /tmp/libs.txt
