"""Workloads ablate ships for in-situ sweeps (ablate/insitu/): functions by module path that
build a model once and return its step (ablate/insitu/workload.py says the protocol)."""
