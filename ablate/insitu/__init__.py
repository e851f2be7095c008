"""In situ: what each variant of a kernel is worth to a whole model step, not only to the kernel.

A job whose config names a workload (insitu.workload: a function by module path that builds a
model and returns its step: workload.py) measures, after the kernel's own check and timing
and on the same loaded libraries, the step with the base, with the variant, and with the base
launched twice per call (the calibrated 2x), the variant put where the model launches its
kernel (swap.py), alternated in rounds with an interval (step.py), beside the kernel's share
of the step and Amdahl's prediction from it. Shipped workloads: ablate/workloads/.
"""
