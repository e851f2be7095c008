"""Hydra sweeper plugin: ablate's default sweeper (`hydra/sweeper=ablate`, conf/config.yaml),
Hydra's basic sweeper less its check that every job's config composes.

The basic sweeper composes every job's config once before launching them, only to catch a
job that cannot be composed; the sweep's callback (ablate/sweep/callbacks.py) has already
composed each one, with the same loader and overrides, to work out its Job, and stopped the
sweep on the first that fails, naming it. A third composition of every job (the launcher
makes the one each job runs) cost ~0.1 s a job on the H100's host (docs/benchmarks.md,
"Sweep speed"): Hydra's basic launcher is handed the callback's configs instead (ComposedOnce:
the same loader, master config and overrides, so the same config). Everything else, the expansion of the command line included, is Hydra's,
less the jobs an interrupted sweep of the same command recorded already, which a rerun
resumes (ablate/sweep/resume.py; the callback finds them before the sweep starts).
"""
from dataclasses import dataclass
from typing import Dict, Optional

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.config_store import ConfigStore
from hydra.types import HydraContext

from ablate.sweep import design, resume


@dataclass
class AblateSweeperConf:
    _target_: str = "hydra_plugins.ablate_sweeper.AblateSweeper"
    max_batch_size: Optional[int] = None
    params: Optional[Dict[str, str]] = None


ConfigStore.instance().store(group="hydra/sweeper", name="ablate", node=AblateSweeperConf, provider="ablate")


BASIC = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"


class ComposedOnce:
    """A config loader that gives each job the config the sweep's callback composed for it
    (design.keep_composed), and composes only what it was not given."""

    def __init__(self, loader):
        self.loader = loader

    def load_sweep_config(self, master_config, sweep_overrides):
        cfg = design.take_composed(sweep_overrides)
        return cfg if cfg is not None else self.loader.load_sweep_config(master_config, sweep_overrides)

    def __getattr__(self, name):
        return getattr(self.loader, name)


class AblateSweeper(BasicSweeper):
    def setup(self, *, hydra_context, task_function, config):
        super().setup(hydra_context=hydra_context, task_function=task_function, config=config)
        # Hydra's own launcher of this process (its plugin scan loads the class again: the name
        # says it); a launcher of other processes composes there.
        if f"{type(self.launcher).__module__}.{type(self.launcher).__qualname__}" == BASIC:
            self.launcher.hydra_context = HydraContext(config_loader=ComposedOnce(hydra_context.config_loader),
                                                       callbacks=hydra_context.callbacks)

    def validate_batch_is_legal(self, batch):
        """Done by the sweep's callback: each job's config composed into its Job before
        anything was built (ablate/sweep/design.py, jobs_of_sweep)."""

    def split_arguments(self, overrides, max_batch_size):
        return resume.pending_batches(BasicSweeper.split_arguments(overrides, max_batch_size))
