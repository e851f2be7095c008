"""The bench config of a job, checked before anything is built: how it checks and times
(conf/bench/default.yaml), which peers it times, and how ncu profiles it. Each problem is a
ValueError naming the setting at fault."""

CLOCK_CONTROLS = ("none", "base")  # ncu's --clock-control: the GPU's own clocks, or locked to base


def validate_bench(bench):
    """Raise ValueError naming the first bad bench setting (run before anything is built);
    the peers are checked against the kernel's by `peer_names`."""
    if bench["l2"] not in ("cold", "warm"):
        raise ValueError(f"bench.l2 must be cold or warm, got {bench['l2']!r}")
    for key, least, kinds in (("samples", 2, int), ("warmup", 0, int), ("replicates", 2, int),
                              ("max_replicates", 2, int), ("seed", 0, int),
                              ("min_sample_us", 1, (int, float)), ("timeout_s", 1, (int, float)),
                              ("budget_s", 0, (int, float))):
        value = bench[key]
        if isinstance(value, bool) or not isinstance(value, kinds) or value < least:
            raise ValueError(f"bench.{key} must be a number >= {least}, got {value!r}")
    if bench["max_replicates"] < bench["replicates"]:
        raise ValueError(f"bench.max_replicates ({bench['max_replicates']}) is below bench.replicates "
                         f"({bench['replicates']})")
    for key in ("tolerance", "min_effect", "precision"):
        value = bench[key]
        if key == "tolerance" and value is None:  # the kernel spec's own
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
            raise ValueError(f"bench.{key} must be a number in [0, 1), got {value!r}")


def peer_names(bench, spec, kernel_name):
    """The peers a job times: bench.peers, or the kernel's DEFAULT_PEERS when null; ValueError
    naming any the kernel does not have."""
    known = dict(getattr(spec, "PEERS", {}))
    names = bench.get("peers")
    if names is None:
        return list(getattr(spec, "DEFAULT_PEERS", known))
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"bench.peers: unknown {unknown}; the {kernel_name} kernel's peers are {list(known)}")
    return list(names)



def validate_profile(bench):
    """ValueError naming the bad profile setting of the bench config."""
    if not isinstance(bench.get("profile", False), bool):
        raise ValueError(f"bench.profile must be true or false, got {bench.get('profile')!r}")
    if bench.get("ncu_clock_control", "none") not in CLOCK_CONTROLS:
        raise ValueError(f"bench.ncu_clock_control must be one of {list(CLOCK_CONTROLS)}, "
                         f"got {bench.get('ncu_clock_control')!r}")
    t = bench.get("ncu_timeout_s", 120)
    if isinstance(t, bool) or not isinstance(t, (int, float)) or t <= 0:
        raise ValueError(f"bench.ncu_timeout_s must be a number > 0, got {t!r}")
