"""Hydra sweeper plugin: `hydra/sweeper=interactions` turns a sweep over single pathologies into
the interactions design of ablate/sweep/design.py.

    python -m ablate -m hydra/sweeper=interactions 'pathology=glob(*)' shape=s512,s4k

Hydra's basic sweeper expands the command line as usual (glob, choices, every other swept
key); then, for each combination of the other keys (each shape), the pathologies it lists
become: the base, each one alone, every pair on different seams (same-seam pairs cannot
be combined and are never built; generic with generic only with `interactions.pairs=all`;
none with a side not applicable to the kernel) and the inversion (one pathology per seam,
then that set with each one taken out). `hydra.sweeper.pairs=false` or
`hydra.sweeper.inversion=false` drops a part; `interactions.only=significant` or
`interactions.only=[a,b,c]` narrows the pathologies. A design that pairs nothing (generic
pathologies only, without interactions.pairs=all) stops in one line saying why, never runs as
an ordinary sweep. Before the first job it says how many jobs it runs and about how long they
take, and how many pair generic pathologies with one another. The callback (ablate/sweep/callbacks.py) builds the same list of variants before
the first job, through `InteractionsSweeper.jobs_of`.
"""
import itertools
import logging
from dataclasses import dataclass
from typing import Dict, Optional

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.config_store import ConfigStore

from ablate.sweep import resume
from ablate.sweep.design import interactions_design, interactions_jobs
from hydra_plugins.ablate_sweeper import AblateSweeper

log = logging.getLogger("ablate")


@dataclass
class InteractionsSweeperConf:
    _target_: str = "hydra_plugins.ablate_interactions.InteractionsSweeper"
    max_batch_size: Optional[int] = None
    params: Optional[Dict[str, str]] = None
    pairs: bool = True        # every pair of pathologies on different seams
    inversion: bool = True    # one pathology per seam, and that set with each one taken out


ConfigStore.instance().store(group="hydra/sweeper", name="interactions", node=InteractionsSweeperConf,
                             provider="ablate")


class InteractionsSweeper(AblateSweeper):
    # The design itself is ablate's (ablate/sweep/design.py); this class only hands it to Hydra.
    jobs_of = staticmethod(lambda config, loader, jobs: interactions_jobs(config, loader, jobs))

    def __init__(self, max_batch_size: Optional[int] = None, params: Optional[Dict[str, str]] = None,
                 pairs: bool = True, inversion: bool = True):
        super().__init__(max_batch_size=max_batch_size, params=params)
        self.pairs, self.inversion = pairs, inversion

    def split_arguments(self, overrides, max_batch_size):
        jobs, lines = interactions_design(self.config, self.hydra_context.config_loader,
                                          list(itertools.chain.from_iterable(BasicSweeper.split_arguments(overrides, None))))
        for line in lines:  # what it left out, how many jobs and about how long: before the first job
            log.info(line)
        n = len(jobs) if max_batch_size in (None, -1) else max_batch_size
        return resume.pending_batches([jobs[i:i + n] for i in range(0, len(jobs), n)])  # a resumed sweep's
