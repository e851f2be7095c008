"""The GPU half of a sweep, from the parent's side: what the rest of ablate calls.

    python -m ablate.gpu.worker --serve [MODULE:FUNCTION]

starts a GPU child (ablate/gpu/child.py). The work is split by responsibility:

- ablate/gpu/pool.py: one warm child per GPU of the host; each job's spec goes to whichever
  child has room, each job collects its answer (run_worker, send_ahead, plan_ahead, drain,
  prestart_worker, stop_worker, stop_kept);
- ablate/gpu/handle.py: the parent's handle on one child (Worker): its protocol, deadlines,
  and each job's slice of its log;
- ablate/gpu/child.py: the child's loop (serve);
- ablate/gpu/measure.py: the job the child runs (the correctness gate, then the timing);
- ablate/gpu/kept.py: a child kept between sweeps, both ends of its socket.

The spec is the job as `Job.wire` sends it (ablate/job/job.py): {"kernel_dir": the kernel's
plugin folder, "base_so": path, "variant_so": path, "shape": {the shape's fields, as the
kernel's spec validated them}, "peers": [names], "launches": how many launches of the variant
stand for one (1; a calibration's 2), "bench": {the bench config}}; the child reads it back
with `from_wire`. Answers are `Result`s (ablate/job/result.py) as JSON.
"""
import sys

from ablate.gpu.child import main, serve  # noqa: F401 (the child's entry point)
from ablate.gpu.handle import Worker, _describe_exit  # noqa: F401
from ablate.gpu.kept import child_key, kept_keys  # noqa: F401
from ablate.gpu.pool import (cuda_seen, drain, plan_ahead, prestart_worker, run_worker,  # noqa: F401
                             send_ahead, stop_kept, stop_worker)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
