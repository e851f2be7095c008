"""What an interactions study (hydra/sweeper=interactions: ablate/sweep/design.py) learns from
the store before it runs: the kernel's latest single-pathology sweep that timed something, which
of its pathologies were significant (`interactions.only=significant`) and the pace of its jobs
(the estimate printed before the study starts). Read with MLflow's client; nothing is written.

A job's run is created when the job ends (tracking.log_job), so the gap between two
consecutive runs of a sweep is the time the later job took, building and launching included,
at that sweep's pace (several GPUs at once shorten it as they shorten the sweep).
"""
import statistics

from ablate.sweep import tracking

LOOK_BACK = 20  # the latest sweeps of the kernel looked at for a single-pathology one


def latest_single_sweep(cfg, kernel):
    """(sweep id, its job runs oldest first) of `kernel`'s latest sweep whose jobs are each one
    pathology (or the base) and of which at least one was timed; None where there is none
    (or no store yet). `cfg`: the sweep's config (its mlflow.tracking_uri)."""
    from mlflow import MlflowClient

    uri = tracking.tracking_uri(cfg)
    db = tracking.sqlite_path(uri)
    if db is not None and not db.exists():
        return None
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(tracking.experiment_name(cfg))
    if experiment is None:
        return None
    sweeps = client.search_runs([experiment.experiment_id], f"tags.kind = 'sweep' and tags.kernel = '{kernel}'",
                                order_by=["attributes.start_time DESC"], max_results=LOOK_BACK)
    for sweep in sweeps:
        runs = client.search_runs([experiment.experiment_id], f"tags.mlflow.parentRunId = '{sweep.info.run_id}'",
                                  order_by=["attributes.start_time ASC"], max_results=5000)
        runs = [r for r in runs if r.data.tags.get("kind") == "job"]
        single = all("," not in r.data.params.get("pathologies", "") for r in runs)
        if runs and single and any(r.data.tags.get("status") == "ok" for r in runs):
            return sweep.data.tags.get("sweep_id", sweep.info.run_id), runs
    return None


def significant(found, shapes):
    """The pathologies whose job in `found` (latest_single_sweep's) was significant at one of
    `shapes`; ValueError where that sweep timed none of them."""
    sweep, runs = found
    timed = [r for r in runs if r.data.tags.get("status") == "ok"]
    at = [r for r in timed if r.data.params.get("shape") in shapes]
    if not at:
        ran = sorted({r.data.params.get("shape") for r in timed})
        raise ValueError(f"the latest timed sweep of this kernel ({sweep}) ran shapes {ran}, none of "
                         f"{sorted(shapes)}: time them first, or name the pathologies (interactions.only=[a,b])")
    return sorted({r.data.params["pathology"] for r in at if r.data.metrics.get("significant") == 1})


def pace(found):
    """Seconds a timed job took in `found`'s sweep: the mean gap before each timed run (its
    first run's, which follows the build, is not known), or None with fewer than two runs."""
    _, runs = found
    gaps = [(b.info.start_time - a.info.start_time) / 1000 for a, b in zip(runs, runs[1:])
            if b.data.tags.get("status") == "ok"]
    return statistics.fmean(gaps) if gaps else None


def estimate_line(n_jobs, n_timed, mode, found):
    """The line printed before an interactions study: how many jobs, how many of them timed,
    and about how long they take at the pace of the kernel's last single-pathology sweep."""
    head = f"interactions: {n_jobs} jobs"
    if mode == "static":
        return head + " (static: none timed)"
    head += f", {n_timed} of them timed"
    seconds = pace(found) if found else None
    if seconds is None:
        return head + ("; no estimate of how long: no single-pathology sweep of this kernel timed in the store"
                       " (make sweep first gives one)")
    total = n_timed * seconds
    when = f"{total / 60:.0f} min" if total >= 60 else f"{total:.0f} s"
    return head + f"; about {when} at the pace of sweep {found[0]} ({seconds:.1f} s a timed job)"
