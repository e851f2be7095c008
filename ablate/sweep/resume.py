"""Resuming a sweep: the same command again continues an interrupted sweep, timing only the
jobs it has no record of.

**The same sweep** is the one whose *resume key* matches: a hash of the kernel, its MLflow
experiment, the multirun's task overrides (the command line less `hydra.*` and `resume=`:
`hydra/launcher=...` and `hydra.launcher.jobs_per_task=...` may change), the sweeper's
settings (the interactions design's `pairs`, `inversion`), the code (`tracking.git_commit`,
and where the work tree has changes a hash of `git diff HEAD` and of the untracked files, so
that two different edits of one commit are two codes) and the plugin's sources
(`plugin_sources`). The parent run of every sweep carries it as the tag `resume_key`; each
job's run carries `job_key`, a hash of that job's own overrides (what Hydra composed it from).

**Interrupted** means the latest sweep of that key is not FINISHED: it was killed (the
launching process never marked it), or some of its jobs were not run (their SLURM task was
cancelled, preempted or failed: the callback then marks the sweep KILLED and records each
such job with status `not_run`). A FINISHED sweep is never resumed: the same command then
measures again, in a sweep of its own, as before. `resume=false` starts a new sweep anyway.

**Resuming** reopens that parent run (the jobs log under it, with its `sweep_id`, so that
`ablate rank` shows the sweep whole) and drops from the sweep every job that has a record
there other than `not_run` or one marked `interrupted` (a job its task was signalled during,
whose crash or timeout was the signal's, not the variant's). Such a record stays in the
store, beside the job's later one; `current_records` leaves it out of a ranking.

State: the launching process's callback decides, the sweeper (hydra_plugins/ablate_sweeper)
reads what to skip from this module (SKIP): both run in that process.
"""
import hashlib
import json
import logging
import subprocess

from omegaconf import OmegaConf

from ablate.paths import ROOT
from ablate.sweep.keys import job_key, job_key_of  # noqa: F401 (job_key: the sweeper's and the launcher's)

log = logging.getLogger(__name__)

NOT_RUN = "not_run"
SKIP = set()  # job keys the sweeper drops: recorded already in the sweep being resumed


def code_id(root=ROOT):
    """The code of this checkout: HEAD's commit; where the work tree has changes, `-dirty:`
    and a hash of `git diff HEAD` and of the untracked files' names and contents (ignored
    files, runs/ among them, do not count)."""
    from ablate.sweep.tracking import git_commit

    commit = git_commit(root)
    if not commit.endswith("-dirty"):
        return commit
    h = hashlib.sha256()
    try:
        h.update(subprocess.run(["git", "-C", str(root), "diff", "HEAD", "--binary"], capture_output=True,
                                timeout=60).stdout)
        untracked = subprocess.run(["git", "-C", str(root), "ls-files", "--others", "--exclude-standard", "-z"],
                                   capture_output=True, text=True, timeout=60).stdout.split("\0")
    except (OSError, subprocess.SubprocessError):
        return commit
    for name in sorted(n for n in untracked if n):
        h.update(name.encode())
        try:
            h.update((root / name).read_bytes())
        except OSError:
            pass
    return f"{commit}:{h.hexdigest()[:16]}"


def sweep_key(config, plugin) -> str:
    """The resume key of a multirun's config (what on_multirun_start receives)."""
    from ablate.sweep.tracking import experiment_name

    sweeper = OmegaConf.to_container(config.hydra.sweeper, resolve=True)
    sweeper.pop("max_batch_size", None)
    parts = {
        "kernel": plugin.name,
        "experiment": experiment_name(config),
        "overrides": sorted(o for o in config.hydra.overrides.task if not o.startswith("resume=")),
        "sweeper": sweeper,
        "code": code_id(),
        "plugin_sources": plugin.sources_digest(),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def children(client, parent):
    """Every run whose parent is `parent` (an mlflow Run), page by page."""
    out, token = [], None
    while True:
        page = client.search_runs([parent.info.experiment_id], f"tags.mlflow.parentRunId = '{parent.info.run_id}'",
                                  max_results=1000, page_token=token)
        out += list(page)
        token = page.token
        if not token:
            return out


def whole(run):
    """Whether a job's record was logged to its end: log_job marks its run FINISHED or FAILED
    last, so one left RUNNING was cut short (its task killed while it logged: its params and
    metrics may be missing)."""
    return run.info.status != "RUNNING"


def recorded(client, parent):
    """The job keys of `parent`'s jobs that are done: a whole record other than not_run and
    not marked interrupted."""
    return {r.data.tags["job_key"] for r in children(client, parent)
            if "job_key" in r.data.tags and whole(r) and r.data.tags.get("status") != NOT_RUN
            and "interrupted" not in r.data.tags}


def find(config, jobs):
    """(the parent run to resume or None, the resume key, the jobs to run): `jobs` are the
    sweep's jobs as lists of overrides (design.sweep_jobs); those done in the interrupted
    sweep of the same key are left out, and SKIP is set to their keys for the sweeper."""
    from mlflow import MlflowClient

    from ablate.job import plugins
    from ablate.sweep import tracking

    SKIP.clear()
    key = sweep_key(config, plugins.of(config))
    if not OmegaConf.select(config, "resume", default=True):
        return None, key, jobs
    try:
        uri = tracking.tracking_uri(config)
    except OSError:  # a store whose folder cannot be made: check_store says so next
        return None, key, jobs
    db = tracking.sqlite_path(uri)
    if db is not None and not db.exists():  # a fresh store: nothing to resume, and nothing made here
        return None, key, jobs
    try:
        client = MlflowClient(tracking_uri=uri)
        exp = client.get_experiment_by_name(tracking.experiment_name(config))
        if exp is None:
            return None, key, jobs
        found = client.search_runs([exp.experiment_id], f"tags.kind = 'sweep' and tags.resume_key = '{key}'",
                                   order_by=["attributes.start_time DESC"], max_results=1)
        if not found or found[0].info.status == "FINISHED":
            return None, key, jobs
        parent = found[0]
        done = recorded(client, parent) & {job_key(j) for j in jobs}
    except Exception as e:  # the sweep's own run then meets the store's problem and says it
        log.warning("MLflow: could not look for an interrupted sweep to resume in %s: %s", uri,
                    str(e).splitlines()[0] if str(e) else type(e).__name__)
        return None, key, jobs
    SKIP.update(done)
    todo = [j for j in jobs if job_key(j) not in done]
    log.info("MLflow: resuming sweep %s (run %s, %s): %d of %d jobs recorded already, %d to run",
             parent.data.tags.get("sweep_id", "?"), parent.info.run_id, parent.info.status, len(done), len(jobs),
             len(todo))
    return parent, key, todo


def reopen(parent, cfg):
    """Mark the interrupted sweep's parent run RUNNING again; its id."""
    from mlflow import MlflowClient

    from ablate.sweep.tracking import tracking_uri

    MlflowClient(tracking_uri=tracking_uri(cfg)).update_run(parent.info.run_id, status="RUNNING")
    return parent.info.run_id


def tag_key(run_id, key, cfg):
    """Tag a new sweep's parent run with its resume key."""
    from mlflow import MlflowClient

    from ablate.sweep.tracking import tracking_uri

    MlflowClient(tracking_uri=tracking_uri(cfg)).set_tag(run_id, "resume_key", key)


def clear_marks(sweep_dir):
    """Remove the progress marks (sweep/progress.py) that the interrupted sweep's jobs left in
    `sweep_dir`, where the rerun uses the same folder (a `hydra.sweep.dir` given): the rerun's
    jobs are numbered from 0 again, and its line and its failure marks count its own only."""
    from pathlib import Path

    from ablate.sweep.progress import MARK

    for old in Path(sweep_dir).glob(f"**/{MARK}"):
        old.unlink(missing_ok=True)


def pending_batches(batches):
    """The sweeper's batches of jobs less those SKIP names; empty batches dropped."""
    if not SKIP:
        return batches
    kept = [[job for job in batch if job_key(job) not in SKIP] for batch in batches]
    return [batch for batch in kept if batch]


def mark_not_run(run_id, jobs, cfg, why):
    """Record each of `jobs` (ablate Jobs of this run of the sweep) that has no record under
    the parent run `run_id` as `not_run`, with `why`; the number recorded so."""
    from mlflow import MlflowClient

    from ablate.job.result import Result
    from ablate.sweep.tracking import log_job, tracking_uri

    client = MlflowClient(tracking_uri=tracking_uri(cfg))
    have = {r.data.tags.get("job_key") for r in children(client, client.get_run(run_id)) if whole(r)}
    missing = [job for job in jobs if job_key_of(job.cfg) not in have]
    for job in missing:
        log_job(job, Result(NOT_RUN, error=why), run_id)
    return len(missing)


def mark_interrupted(run_id, cfg, overrides, why):
    """Tag the record of the job of `overrides` under `run_id` `interrupted` (a rerun times it
    again): a signal to its task came while it ran."""
    from mlflow import MlflowClient

    from ablate.sweep.tracking import tracking_uri

    client = MlflowClient(tracking_uri=tracking_uri(cfg))
    key = job_key(overrides)
    for r in children(client, client.get_run(run_id)):
        if r.data.tags.get("job_key") == key:
            client.set_tag(r.info.run_id, "interrupted", why)


def current_records(runs):
    """A sweep's job runs (mlflow.search_runs' frame) less the records a later one of the same
    job replaced (a `not_run` or `interrupted` record whose job was run again) and less those
    cut short while they were logged (left RUNNING, without their params: `whole`)."""
    if runs.empty or "tags.job_key" not in runs:
        return runs
    if "params.pathology" in runs:
        runs = runs[~(runs["status"].eq("RUNNING") & runs["params.pathology"].isna())]
    stale = runs["tags.status"].eq(NOT_RUN)
    if "tags.interrupted" in runs:
        stale |= runs["tags.interrupted"].notna()
    again = set(runs.loc[~stale, "tags.job_key"].dropna())
    return runs[~(stale & runs["tags.job_key"].isin(again))].reset_index(drop=True)
