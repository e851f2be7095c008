"""MLflow tracking: a parent run per sweep, a child run per job.

Runs are only ever created and added to, never deleted or overwritten. A logging call that
fails is reported (a log line and a `log_errors` tag) and the rest of the job is still logged;
when anything failed, the whole result is also saved as JSON in `runs/unlogged/`, so a
broken store never loses a measurement.
"""
import contextlib
import datetime
import json
import logging
import math
import numbers
import os
import re
import subprocess
from pathlib import Path, PurePosixPath

from omegaconf import OmegaConf

from ablate.job.result import GOOD_STATUSES, STATUSES, Result
from ablate.job.variant import BASE
from ablate.paths import ROOT, RUNS

log = logging.getLogger(__name__)
# mlflow (~1 s to import: pandas among its imports) is imported where a run is logged, not with
# this module: a run that bad input stops before anything is recorded never needs it.
# MLflow's client prints a "View run ... at" line per run when the store is a server: one per
# job, between ablate's own lines (the UI: ablate ui).
os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")

DEFAULT_URI = "sqlite:///runs/mlflow.db"
UNLOGGED = RUNS / "unlogged"  # a result whose logging failed, where its store's folder cannot take it
# MLflow's limits on one value (mlflow.utils.validation).
MAX_PARAM_LEN = 6000
MAX_TAG_LEN = 8000
BATCH = 100


class StoreError(RuntimeError):
    """An MLflow store that cannot be written: a one-line message, before anything runs."""


def check_store(cfg=None):
    """The tracking URI, once its store is known writable; StoreError saying why not. A sqlite
    store's folder must exist or be made, and it and the file (where there is one) must be
    writable; a server is checked by creating the sweep's run (start_sweep)."""
    raw = os.environ.get("MLFLOW_TRACKING_URI")
    if not raw and cfg is not None:
        raw = OmegaConf.select(cfg, "mlflow.tracking_uri", default=None)
    try:
        uri = tracking_uri(cfg)
    except OSError as e:
        raise StoreError(f"the MLflow store {raw or DEFAULT_URI} cannot be written: "
                         f"{e.strerror or e}: {e.filename or ''}".rstrip(": ")) from None
    path = sqlite_path(uri)
    if path is not None:
        path = path.resolve()
        unwritable = [p for p in (path.parent, path) if p.exists() and not os.access(p, os.W_OK)]
        if unwritable:
            raise StoreError(f"the MLflow store {uri} cannot be written: {unwritable[0]} is not writable "
                             "(set MLFLOW_TRACKING_URI or mlflow.tracking_uri to one that is)")
    return uri


def open_store(cfg, experiment):
    """Import mlflow and open the store of `cfg` (its client, the id of `experiment`), so that
    a job's record afterwards only writes: a single timed job does this while the GPU times it
    (ablate/__main__.py, time_ahead). On this project's 2-core CPU machine a job's record after
    its answer took 3.5-3.6 s, most of it mlflow's import and the store's first use (the
    SQLAlchemy engine, the schema's check). A failure here is left to log_job, which meets it
    again and reports it."""
    with contextlib.suppress(Exception):
        from mlflow import MlflowClient  # MLflow keeps the store per URI: log_job's client finds it open
        from mlflow.entities import Metric, Param, RunStatus  # noqa: F401 (log_job's)

        uri = tracking_uri(cfg)
        experiment_id(MlflowClient(tracking_uri=uri), experiment, uri)


def tracking_uri(cfg=None):
    """MLFLOW_TRACKING_URI if set (as MLflow reads it), else cfg.mlflow.tracking_uri, where a
    relative sqlite path is relative to the project root, not the working directory. The
    sqlite file's folder is created, so the first run on a fresh checkout works."""
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        uri = OmegaConf.select(cfg, "mlflow.tracking_uri", default=None) if cfg is not None else None
        uri = uri or DEFAULT_URI
        path = sqlite_path(uri)
        if path is not None and not path.is_absolute():
            query = uri.partition("?")[2]  # e.g. ?timeout=30 stays
            uri = "sqlite:///" + str(ROOT / path) + (f"?{query}" if query else "")
    path = sqlite_path(uri)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    return uri


def sqlite_path(uri):
    """The database file of a `sqlite:///` URI (relative or absolute), None for other stores."""
    if not uri.startswith("sqlite:///"):
        return None
    return Path(uri[len("sqlite:///"):].split("?", 1)[0])


def experiment_name(cfg):
    """The MLflow experiment of a config's kernel: kernel.experiment, else the kernel's name."""
    return str(OmegaConf.select(cfg, "kernel.experiment", default=None)
               or OmegaConf.select(cfg, "kernel.name", default="ablate"))


def experiment_id(client, name, uri):
    """The id of experiment `name`, created on first use. With a sqlite store the artifacts
    go beside the database (MLflow's default would be ./mlruns of whatever the cwd is)."""
    exp = client.get_experiment_by_name(name)
    if exp is None:
        path = sqlite_path(uri)
        location = (path.resolve().parent / "mlartifacts").as_uri() if path is not None else None
        try:
            return client.create_experiment(name, artifact_location=location)
        except Exception:
            exp = client.get_experiment_by_name(name)  # another process created it meanwhile
            if exp is None:
                raise
    if exp.lifecycle_stage != "active":
        raise RuntimeError(
            f"MLflow experiment {name!r} is deleted in {uri}; restore it "
            f"(mlflow experiments restore --experiment-id {exp.experiment_id}) or set kernel.experiment"
        )
    return exp.experiment_id


def git_commit(root=ROOT, shipped=None, only=None, counts=lambda line: True):
    """HEAD's commit, with `-dirty` when the work tree has changes (under the folder `only`
    when given; those of `git status --porcelain` lines that `counts`). Outside a checkout (a
    copy of the tree shipped to a GPU machine), `shipped`: by default $ABLATE_GIT_COMMIT if
    set, else "unknown"."""
    shipped = os.environ.get("ABLATE_GIT_COMMIT", "unknown") if shipped is None else shipped
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"],
                              capture_output=True, text=True, timeout=30)
        if head.returncode != 0:
            return shipped
        changes = subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                                  *(["--untracked-files=all", "--", str(only)] if only else [])],
                                 capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return shipped
    dirty = any(counts(line) for line in changes.stdout.splitlines() if line.strip())
    return head.stdout.strip() + ("-dirty" if dirty else "")


def plugin_provenance(plugin):
    """What says which code of the kernel's plugin ran: `plugin_sources`, the hash of its
    sources (ablate.job.plugins.Plugin.sources: what it builds, its spec, its yamls), and
    `plugin_git_commit`, the commit of the repository its folder lies in, `-dirty` when a
    tracked file of the folder changed or one of its sources is untracked ("none" outside a
    repository; a cache or an editor's file left untracked there does not count)."""
    sources = {p.name for p in plugin.sources()}

    def counts(line):  # `?? path` is untracked: only a source file makes the folder dirty
        return not line.startswith("??") or Path(line[3:].strip().strip('"')).name in sources

    return {"plugin_sources": plugin.sources_digest(),
            "plugin_git_commit": git_commit(plugin.dir, shipped="none", only=plugin.dir, counts=counts),
            "plugin_dir": str(plugin.dir), **plugin.package()}  # a library's kernel: package, version, source hash


def sweep_id(sweep_dir):
    """The sweep's name: its folder under runs/hydra/multirun (e.g. `2025-01-31/14-05-09`,
    unique across days), or the folder's own name when it lies elsewhere."""
    path = Path(sweep_dir).resolve()
    try:
        return path.relative_to(ROOT / "runs" / "hydra" / "multirun").as_posix()
    except ValueError:
        return path.name


def start_sweep(cfg, sweep_dir):
    """Create the parent run of a multirun and return its id. Raises when the store cannot be
    written: a sweep that cannot record anything should stop before it uses the GPU."""
    from mlflow import MlflowClient

    uri = tracking_uri(cfg)
    client = MlflowClient(tracking_uri=uri)
    sid = sweep_id(sweep_dir)
    tags = {
        "kind": "sweep",
        "sweep_id": sid,
        "sweep_dir": str(Path(sweep_dir).resolve()),
        "git_commit": git_commit(),
        "mode": str(OmegaConf.select(cfg, "mode", default="gpu")),
    }
    overrides = OmegaConf.select(cfg, "hydra.overrides.task", default=None)
    if overrides:
        tags["overrides"] = " ".join(overrides)[:MAX_TAG_LEN]
    tags["kernel"] = str(OmegaConf.select(cfg, "kernel.name", default="unknown"))
    try:
        from ablate.job import plugins

        tags.update(plugin_provenance(plugins.of(cfg)))  # rank pairs sweeps of one plugin's sources only
    except Exception as e:  # the jobs log theirs; the sweep still starts
        log.warning("MLflow: the plugin's provenance could not be read for the sweep's run: %s", e)
    run = client.create_run(experiment_id(client, experiment_name(cfg), uri), tags=tags, run_name=sid)
    log.info("MLflow: sweep %s is run %s in %s", sid, run.info.run_id, uri)
    return run.info.run_id


def end_sweep(run_id, status="FINISHED", cfg=None):
    """Mark the parent run FINISHED, FAILED or KILLED (pass the sweep's cfg when its
    mlflow.tracking_uri is not the default). A failure here is logged, not raised: the jobs
    are already recorded."""
    status = str(status).upper()
    if status not in ("FINISHED", "FAILED", "KILLED"):
        raise ValueError(f"end_sweep: status must be FINISHED, FAILED or KILLED, got {status!r}")
    try:
        from mlflow import MlflowClient

        MlflowClient(tracking_uri=tracking_uri(cfg)).set_terminated(run_id, status)
    except Exception as e:
        log.error("MLflow: could not mark sweep run %s %s: %s", run_id, status, e)


def log_job(job, result, parent_run_id=None, key=None):
    """Log one job's Result as a run (a child of `parent_run_id` when given); return its id,
    or None when the store could not even create the run (the result is then saved as JSON).
    `key`: the job's resume tags (keys.job_tags), where worked out already (in the job's
    thread: Hydra's config there is this job's)."""
    if not isinstance(result, Result):
        raise TypeError(f"log_job: result must be a Result, got {type(result).__name__}")
    from mlflow import MlflowClient
    from mlflow.entities import RunStatus

    cfg = job.cfg
    problems = []
    if result.status not in STATUSES:
        problems.append(f"unknown status {result.status!r} (expected one of {', '.join(STATUSES)})")
    name = f"{job.variant.name}@{job.shape_name}"
    try:
        params = job_params(job, result)
        uri = tracking_uri(cfg)
        client = MlflowClient(tracking_uri=uri)
        tags = job_tags(job, result, params, client, parent_run_id, key)
        run_id = client.create_run(experiment_id(client, job.experiment, uri),
                                   tags=tags, run_name=name).info.run_id
    except Exception as e:
        problems.append(f"could not create the run: {e}")
        _report(cfg, result, name, problems)
        return None

    def attempt(what, call, *args):
        try:
            call(*args)
        except Exception as e:
            problems.append(f"{what}: {e}")

    # The whole result first: if later calls fail, it is still all there.
    attempt("result.json", client.log_text, run_id, json.dumps(result.to_dict(), indent=2, default=str), "result.json")
    attempt("config.yaml", client.log_text, run_id, _config_yaml(cfg), "config.yaml")
    attempt("params and metrics", _log_batches, client, run_id, params, result, problems)
    attempt("artifacts", _log_artifacts, client, run_id, result, problems)
    if result.error:
        attempt("error.txt", client.log_text, run_id, str(result.error), "error.txt")
    if problems:
        attempt("log_errors tag", client.set_tag, run_id, "log_errors", "; ".join(problems)[:MAX_TAG_LEN])
    attempt("run status", client.set_terminated, run_id,
            RunStatus.to_string(RunStatus.FINISHED if result.status in GOOD_STATUSES else RunStatus.FAILED))
    if problems:
        _report(cfg, result, name, problems, run_id)
    return run_id


# A sweep in this process records each job in one thread of its own, in job order, while
# the next jobs run: the record (~500 params and metrics into the store, ~0.1-0.2 s a job on
# the H100's host) held the launching process, and with it the GPUs of a sweep on two
# (docs/benchmarks.md, "Every GPU"). The sweep's callback turns it on (record_later) and
# waits for the last record (flush) before it closes the sweep's run; so does the process's
# exit. At most LATER_MAX records wait: a sweep killed outright loses no more than those,
# which its rerun times again (ablate/sweep/resume.py).
LATER_MAX = 4
_later = {"on": False, "pool": None, "waiting": []}


def record_later(on):
    """Record the jobs of this process's sweep in the writer thread (True), or as they end
    (False, after waiting for what is queued)."""
    if not on:
        flush()
        if _later["pool"] is not None:  # its thread ended: the process's exit need not wait for it
            _later["pool"].shutdown(wait=True)
            _later["pool"] = None
    _later["on"] = bool(on)


def log_job_soon(job, result, parent_run_id=None):
    """log_job now, or in the writer thread where the sweep turned it on (record_later)."""
    if not _later["on"]:
        return log_job(job, result, parent_run_id)
    if _later["pool"] is None:
        import atexit
        from concurrent.futures import ThreadPoolExecutor

        _later["pool"] = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ablate-record")
        atexit.unregister(flush)  # once, however many sweeps this process runs
        atexit.register(flush)
    waiting = _later["waiting"]
    while len(waiting) >= LATER_MAX:
        _settle(waiting.pop(0))
    from ablate.sweep.keys import job_tags as key_tags

    key = key_tags(job.cfg) if parent_run_id else None  # here: Hydra's config is this job's, not the next's
    waiting.append(_later["pool"].submit(log_job, job, result, parent_run_id, key))
    return None


def flush():
    """Wait for every record queued by log_job_soon."""
    while _later["waiting"]:
        _settle(_later["waiting"].pop(0))


def _settle(future):
    try:
        future.result()
    except Exception as e:  # log_job reports what the store refused; this is anything else
        log.error("MLflow: a job's record failed: %s: %s", type(e).__name__, e)


def job_params(job, result):
    """What identifies the job: variant, macros, shape, commit, plus the worker's own params
    (GPU, driver, CUDA, nvcc, torch, arch...), which win where both name one."""
    variant = job.variant
    names = list(variant.pathologies)
    specs = variant.specs if names else OmegaConf.to_container(job.cfg.pathology, resolve=True)
    texts = names or list(specs)  # the base's own yaml describes it
    params = {
        "kernel": job.kernel,
        "pathology": variant.name,
        "pathologies": ",".join(names) or BASE,
        "macros": " ".join(f"{k}={v}" for k, v in variant.macros.items()) or "none",
        "mechanism": _joined(specs, texts, "mechanism"),
        "expected": _joined(specs, texts, "expected"),
        "truth": _truth(specs, names),
        "tuned": _tuned(specs, names),  # a tunable's neighbour: {name, base, value} (ablate/job/tunables.py)
        "seams": ",".join(variant.seam_of(n) or "-" for n in names) or "-",  # as the patches replace them
        "min_effect": job.bench.get("min_effect"),
        "shape": job.shape_name,
        # What the job did: mode=gpu falls back to static on a machine with no GPU.
        "mode": "static" if result.status == "static" else job.mode,
        "arch": str(OmegaConf.select(job.cfg, "build.arch", default="unknown")),
        "git_commit": git_commit(),
        **plugin_provenance(job.plugin),
    }
    for k, v in OmegaConf.to_container(job.cfg.shape, resolve=True).items():
        params[f"shape.{k}"] = v
    params.update(_flat(result.params))
    return {k: _text(v) for k, v in params.items()}


def job_tags(job, result, params, client, parent_run_id, key=None):
    tags = {
        "kind": "job",
        "kernel": params["kernel"],
        "status": str(result.status),
        "variant": params["pathology"],
        "mode": params["mode"],
        "git_commit": params["git_commit"],
        "plugin_sources": params["plugin_sources"],
    }
    if result.error:
        tags["error"] = str(result.error)[:500]
    if parent_run_id:
        tags["mlflow.parentRunId"] = parent_run_id
        from ablate.sweep.keys import job_tags as key_tags

        tags.update(key_tags(job.cfg) if key is None else key)  # a rerun of an interrupted sweep finds it (sweep/resume.py)
        try:
            tags["sweep_id"] = _sweep_id(client, parent_run_id)
        except Exception as e:
            log.error("MLflow: parent run %s not readable (%s); job logged without sweep_id", parent_run_id, e)
    return tags


_sweep_ids = {}  # parent run id: its sweep_id tag, read once a sweep, not once a job


def _sweep_id(client, parent_run_id):
    if parent_run_id not in _sweep_ids:
        _sweep_ids[parent_run_id] = client.get_run(parent_run_id).data.tags.get("sweep_id", "unknown")
    return _sweep_ids[parent_run_id]


def _log_batches(client, run_id, params, result, problems):
    """Params and metrics in batches; a rejected batch is retried one entry at a time so
    that one bad value costs only itself."""
    from mlflow.entities import Param

    entries = [("param", Param(k, v)) for k, v in params.items()]
    entries += [("metric", m) for m in _metrics(result, problems)]
    for i in range(0, len(entries), BATCH):
        chunk = entries[i:i + BATCH]
        try:
            client.log_batch(run_id, params=[e for kind, e in chunk if kind == "param"],
                             metrics=[e for kind, e in chunk if kind == "metric"])
        except Exception:
            for kind, e in chunk:
                try:
                    if kind == "param":
                        client.log_param(run_id, e.key, e.value)
                    else:
                        client.log_metric(run_id, e.key, e.value, e.timestamp, e.step)
                except Exception as err:
                    problems.append(f"{kind} {e.key}: {err}")


def _log_artifacts(client, run_id, result, problems):
    for name, text in result.artifacts.items():
        try:
            client.log_text(run_id, str(text), _safe_name(name, problems))
        except Exception as e:
            problems.append(f"artifact {name}: {e}")


def _metrics(result, problems):
    from mlflow.entities import Metric

    now = int(datetime.datetime.now().timestamp() * 1000)
    out = []
    for k, v in result.metrics.items():
        if isinstance(v, numbers.Real):
            out.append(Metric(str(k), float(v), now, 0))
        else:
            problems.append(f"metric {k}: not a number ({v!r}); kept in result.json only")
    return out


def _tuned(specs, names):
    """The tunables the variant's generated neighbours set, as JSON ([{name, base, value}]), or none."""
    tuned = [specs[n]["tuned"] for n in names if isinstance(specs.get(n), dict) and specs[n].get("tuned")]
    return json.dumps(tuned) if tuned else "none"


def _truth(specs, names):
    """A calibration's known slowdown (the product over the job's pathologies), or "none"."""
    truths = [(specs.get(n) or {}).get("truth") for n in names]
    truths = [float(t) for t in truths if t is not None]
    return f"{math.prod(truths):g}" if truths else "none"


def _joined(specs, names, field):
    texts = [str((specs.get(n) or {}).get(field) or "").strip() for n in names]
    if len(names) <= 1:
        return texts[0] if texts else ""
    return " | ".join(f"{n}: {t}" for n, t in zip(names, texts))


def _flat(d, prefix=""):
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _text(v):
    s = v if isinstance(v, str) else json.dumps(v, default=str)
    if len(s) > MAX_PARAM_LEN:  # MLflow rejects longer values; the full text is in config.yaml
        s = s[:MAX_PARAM_LEN - 3] + "..."
    return s


def _config_yaml(cfg):
    try:
        return OmegaConf.to_yaml(cfg, resolve=True)
    except Exception:  # an interpolation that only resolves inside Hydra: keep it unresolved
        return OmegaConf.to_yaml(cfg)


def _safe_name(name, problems):
    """Artifact names are plain relative paths; anything else is renamed, not dropped."""
    p = PurePosixPath(str(name))
    if str(name) and not p.is_absolute() and ".." not in p.parts:
        return str(p)
    kept = "_".join(part for part in p.parts if part not in ("/", ".", ".."))
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", kept).lstrip(".") or "artifact.txt"
    problems.append(f"artifact name {name!r} is not a relative path; stored as {safe!r}")
    return safe


def _report(cfg, result, name, problems, run_id=None):
    """Say what failed and keep the whole result on disk in `unlogged/` beside the sqlite
    store, or in the project's runs/unlogged/ (UNLOGGED) for other stores and where the
    store's folder cannot be written either."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    text = json.dumps({"run_id": run_id, "problems": problems, "config": _config_yaml(cfg),
                       "result": result.to_dict()}, indent=2, default=str)
    filename = f"{stamp}-{re.sub(r'[^A-Za-z0-9._+@-]', '_', name)}.json"
    folders, errors = [], []
    try:
        db = sqlite_path(tracking_uri(cfg))
        if db is not None:
            folders.append(db.resolve().parent / "unlogged")
    except OSError as e:  # the store's folder cannot even be made
        errors.append(str(e))
    folders.append(UNLOGGED)
    kept = None
    for folder in dict.fromkeys(folders):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / filename).write_text(text)
            kept = f"; the result is saved in {folder / filename}"
            break
        except OSError as e:
            errors.append(str(e))
    if kept is None:
        kept = f"; could not save it either ({'; '.join(errors)}): {json.dumps(result.to_dict(), default=str)}"
    where = f"run {run_id}" if run_id else "no run created"
    log.error("MLflow: logging job %s had problems (%s): %s%s", name, where, "; ".join(problems), kept)


def log_findings(sweep_run_id, headroom, text, path):
    """A ranking's findings (ablate/report/findings.py) in the store: tag `headroom` on each job
    ({run_id: its finding}) whose variant beats the base, tag `findings` (the text) and the
    artifact findings.md on the sweep's parent run. A store that refuses a write costs only
    that write, said in one line on stderr: the report's files stand."""
    import sys

    from mlflow import MlflowClient

    try:
        client = MlflowClient()
        for run_id, line in headroom.items():
            client.set_tag(run_id, "headroom", line[:MAX_TAG_LEN])
        if sweep_run_id:
            client.set_tag(sweep_run_id, "findings", text[:MAX_TAG_LEN])
            client.log_artifact(sweep_run_id, str(path))
    except Exception as e:
        print(f"rank: findings not recorded in MLflow: {e}", file=sys.stderr)


def log_interactions(sweep_run_id, results, files, n_jobs, method):
    """A summary run in the sweep's experiment (tags kind=interactions, sweep_run), with each
    interaction, Shapley value and everything-off slowdown as metrics and the tables and
    figures as artifacts. Once per sweep and job count: a run is only ever added. Returns a
    line saying where, or None."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric

    client = MlflowClient()
    try:
        parent = client.get_run(sweep_run_id)
        exp = parent.info.experiment_id
        found = client.search_runs([exp], f"tags.kind = 'interactions' and tags.sweep_run = '{sweep_run_id}' "
                                          f"and tags.jobs = '{n_jobs}'")
        if found:
            return f"MLflow: this sweep's interactions are in run {found[0].info.run_id}"
        sid = parent.data.tags.get("sweep_id", sweep_run_id)
        run = client.create_run(exp, run_name=f"interactions {sid}",
                                tags={"kind": "interactions", "sweep_run": sweep_run_id, "sweep_id": sid,
                                      "jobs": str(n_jobs), "shapley_method": method})
        rid, now, metrics = run.info.run_id, 0, []
        for shape, res in results.items():
            key = lambda *parts: "/".join(re.sub(r"[^A-Za-z0-9_.-]", "_", str(p)) for p in parts)  # noqa: E731
            for r in res["pairs"]:
                for k, v in (("I", r["I"]), ("I_lo", r["lo"]), ("I_hi", r["hi"]), ("I_significant", r["significant"])):
                    metrics.append(Metric(key(k, shape, r["a"], r["b"]), float(v), now, 0))
            if res["inversion"]:
                t = res["inversion"]["total"]
                metrics += [Metric(key("all_off", shape), t["value"], now, 0),
                            Metric(key("all_off_lo", shape), t["lo"], now, 0),
                            Metric(key("all_off_hi", shape), t["hi"], now, 0)]
                for r in res["inversion"]["rows"]:
                    if "present" in r:
                        metrics.append(Metric(key("added_back_speedup", shape, r["optimization"]), r["present"], now, 0))
            if res["shapley"] and "phi" in res["shapley"]:
                for name, p in res["shapley"]["phi"].items():
                    metrics.append(Metric(key("shapley", shape, name), p["value"], now, 0))
                metrics.append(Metric(key("shapley_residual", shape), res["shapley"]["residual"]["value"], now, 0))
        for i in range(0, len(metrics), 500):
            client.log_batch(rid, metrics=metrics[i:i + 500])
        for f in files:
            client.log_artifact(rid, str(f))
        client.set_terminated(rid, "FINISHED")
        return f"MLflow: interactions logged as run {rid} (interactions {sid})"
    except Exception as e:  # the tables are written already; the store is the extra copy
        return f"MLflow: could not log the interactions summary: {e}"
