"""Hydra sweeper plugin: `hydra/sweeper=interactions` turns a sweep over single pathologies into
the interactions design of ablate/interactions.py.

    python -m ablate -m hydra/sweeper=interactions 'pathology=glob(*)' shape=s512,s4k

Hydra's basic sweeper expands the command line as usual (glob, choices, every other swept
key); then, for each combination of the other keys (each shape), the pathologies it lists
become: the base, each one alone, every pair on different seams (same-seam pairs cannot
be combined and are never built) and the inversion (one pathology per seam, then that set
with each one taken out). `hydra.sweeper.pairs=false` or `hydra.sweeper.inversion=false`
drops a part. The callback (ablate/callbacks.py) builds the same list of variants before
the first job, through `InteractionsSweeper.jobs_of`.
"""
import itertools
from dataclasses import dataclass
from typing import Dict, Optional

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.config_store import ConfigStore


@dataclass
class InteractionsSweeperConf:
    _target_: str = "hydra_plugins.ablate_interactions.InteractionsSweeper"
    max_batch_size: Optional[int] = None
    params: Optional[Dict[str, str]] = None
    pairs: bool = True        # every pair of pathologies on different seams
    inversion: bool = True    # one pathology per seam, and that set with each one taken out


ConfigStore.instance().store(group="hydra/sweeper", name="interactions", node=InteractionsSweeperConf,
                             provider="ablate")


class InteractionsSweeper(BasicSweeper):
    jobs_of = staticmethod(lambda config, loader, jobs: _jobs_of(config, loader, jobs))
    def __init__(self, max_batch_size: Optional[int] = None, params: Optional[Dict[str, str]] = None,
                 pairs: bool = True, inversion: bool = True):
        super().__init__(max_batch_size=max_batch_size, params=params)
        self.pairs, self.inversion = pairs, inversion

    def split_arguments(self, overrides, max_batch_size):
        jobs = self.jobs_of(self.config, self.hydra_context.config_loader,
                       list(itertools.chain.from_iterable(BasicSweeper.split_arguments(overrides, None))))
        n = len(jobs) if max_batch_size in (None, -1) else max_batch_size
        return [jobs[i:i + n] for i in range(0, len(jobs), n)]


def _jobs_of(config, loader, jobs):
    """The interactions design's jobs (lists of overrides) from the basic sweeper's `jobs`.

    `config` is the sweep's config (its hydra.sweeper says which parts; its kernel.inversion
    which pathology stands for a seam that has several), `loader` Hydra's config loader, used
    to read each pathology's seam as a job would see it."""
    from ablate.report.interactions import design, seam_choice

    def key(override):
        return override.split("=", 1)[0].lstrip("+~")

    options = config.hydra.sweeper
    groups: dict[tuple, list[str]] = {}
    for job in jobs:
        rest = tuple(o for o in job if key(o) != "pathology")
        names = [o.split("=", 1)[1] for o in job if key(o) == "pathology"]
        if len(names) != 1 or names[0].startswith("["):
            raise SystemExit("ablate: hydra/sweeper=interactions takes single pathologies to combine "
                             f"(pathology=glob(*), or pathology=a,b,c), got {' '.join(job)!r}")
        groups.setdefault(rest, [])
        if names[0] not in groups[rest]:
            groups[rest].append(names[0])
    seams: dict[str, str] = {}
    for rest, names in groups.items():
        for name in names:
            if name in seams or name == "none":
                continue
            cfg = loader.load_sweep_config(master_config=config, sweep_overrides=[*rest, f"pathology={name}"])
            seam = (cfg.pathology.get(name) or {}).get("seam")
            if not seam:
                raise SystemExit(f"ablate: pathology {name!r} names no seam: the interactions sweep needs "
                                 "each pathology's `seam:` to know which pairs can be combined")
            seams[name] = str(seam)
    out = []
    for rest, names in groups.items():
        chosen = seam_choice({n: seams[n] for n in names if n != "none"}, config.get("kernel", {}).get("inversion"))
        for variant in design({n: seams[n] for n in names if n != "none"}, chosen,
                              pairs=bool(options.get("pairs", True)), inversion=bool(options.get("inversion", True))):
            value = "none" if not variant else variant[0] if len(variant) == 1 else "[" + ",".join(variant) + "]"
            out.append([*rest, f"pathology={value}"])
    return out
