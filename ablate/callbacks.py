"""Hydra callback of a multirun: build every variant of the sweep in parallel before the first
job runs, open (then close) the sweep's parent MLflow run, and end the GPU child its jobs
shared (ablate/worker.py).

Registered in conf/config.yaml under `hydra.callbacks`. The jobs find the parent run's id in
the environment variable SWEEP_RUN_ENV (the basic launcher runs them in this process; a
launcher that starts processes passes the environment on).
"""
import logging
import os
import time
from pathlib import Path

from hydra.experimental.callback import Callback

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[1]
SWEEP_RUN_ENV = "ABLATE_SWEEP_RUN_ID"


class SweepSetup(Callback):
    def __init__(self):
        self.run_id = None

    def on_multirun_start(self, config, **kwargs):
        from ablate import tracking
        from ablate.config import checked
        from ablate.build import build
        from ablate.variant import variant_from_cfg, variants_of_sweep

        # Bad input stops the sweep here, before anything is built or recorded.
        try:
            plugin = checked(config)[0]
            variants = variants_of_sweep(config, plugin.dir)
        except ValueError as e:
            raise SystemExit(f"ablate: {e}") from None
        if "none" not in [v.name for v in variants]:  # every job is timed against the base
            variants.insert(0, variant_from_cfg({"none": None}, plugin.dir))
        # The parent run first: a store that cannot be written stops the sweep right here.
        self.run_id = tracking.start_sweep(config, config.hydra.sweep.dir)
        os.environ[SWEEP_RUN_ENV] = self.run_id
        tic = time.perf_counter()
        try:
            results = build(variants, config.build, plugin, ROOT)
        except BaseException:
            tracking.end_sweep(self.run_id, "FAILED", config)
            raise
        failed = [name for name, r in results.items() if r.status != "built"]
        log.info("built %d variants in %.1f s%s", len(results), time.perf_counter() - tic,
                 f"; failed: {', '.join(failed)} (their jobs record build_failed)" if failed else "")

    def on_multirun_end(self, config, **kwargs):
        from ablate import tracking
        from ablate.worker import stop_worker

        stop_worker()  # the sweep's GPU child, kept across its jobs; atexit would do it later
        if self.run_id is not None:
            tracking.end_sweep(self.run_id, "FINISHED", config)
        os.environ.pop(SWEEP_RUN_ENV, None)
        self.run_id = None
