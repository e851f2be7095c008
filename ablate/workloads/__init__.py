"""Workloads ablate ships for in-situ sweeps (ablate/gpu/insitu.py): functions by module path that
build a model once and return its step (ablate/job/workload.py says the protocol)."""
