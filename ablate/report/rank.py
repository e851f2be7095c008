"""`make rank`: the pathologies of a sweep ranked by measured slowdown, and what each one
changed in the binary.

    python -m ablate.report.rank                 # the latest sweep, of whichever kernel
    python -m ablate.report.rank --kernel rmsnorm  # the latest sweep of one kernel
    python -m ablate.report.rank --sweep ID      # another one (or SWEEP=ID make rank)
    python -m ablate.report.rank --compare A B   # two sweeps side by side: which results disagree

A timed sweep gives the ranking: per shape, worst slowdown first, with its 95% interval;
jobs that were not timed (build_failed, crashed, incorrect, timeout) are listed below it,
never ranked; calibrations (whose true effect is known: `make calibrate`) get a table of
their own, which says whether each interval covers the truth. A static sweep gives the
static table: each pathology's registers, shared
memory, spills, occupancy and SASS instruction classes against the base's. When the sweep
has only one kind, the latest sweep of the other kind at the same git commit and of the same
plugin sources (the hash of the kernel plugin's files, tag plugin_sources) is shown beside it;
one line says so when the latest of that kind at the commit ran other plugin sources. Writes rank.csv (one row per job), rank.md and plots/ beside the sqlite store
(runs/ by default).
"""
import argparse
import os
import sys
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
from mlflow import MlflowClient
from omegaconf import OmegaConf

from ablate.job import counters
from ablate.report import findings, gpu_spread, insitu, interactions, plots, roofline
from ablate.gpu.stats import interval_text, overlap
from ablate.report.plots import markdown
from ablate.sweep import resume, tracking
from ablate.sweep.tracking import ROOT, sqlite_path, tracking_uri

STATIC = ["regs", "smem_bytes", "spill_bytes", "threads_per_block", "occupancy_blocks", "occupancy_warps"]
TIMED = ["base_us", "variant_us", "slowdown", "slowdown_lo", "slowdown_hi", "significant"]
NOT_TIMED = ("Nothing to rank by slowdown: no timed job at this commit, only the static analysis above "
             "(the binaries: registers, shared memory, occupancy, SASS, fingerprints). Slowdowns need a timed "
             "sweep on a GPU: `make sweep` (ablate -m 'pathology=glob(*)') there, then `make rank`.")
RANKING_TITLE = ("Ranking (slowdown = variant time / base time; 95% interval over the job's replicates, "
                 "significant = beyond 1 +- bench.min_effect):")


class RankError(Exception):
    """Something the user can fix (no store, no sweep, unknown id): a message, not a traceback."""


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m ablate.report.rank", description=__doc__.split("\n\n")[0])
    p.add_argument("--sweep", default=os.environ.get("SWEEP") or None,
                   help="sweep id (e.g. 2025-01-31/14-05-09) or its parent run id; default: the latest")
    p.add_argument("--kernel", default=os.environ.get("KERNEL") or None,
                   help="the kernel whose latest sweep to rank (or KERNEL=name make rank); default: any")
    p.add_argument("--experiment", help="MLflow experiment to look in; default: every experiment")
    p.add_argument("--compare", nargs=2, metavar=("A", "B"),
                   help="two sweep ids (or parent run ids): their results side by side")
    p.add_argument("--out", type=Path, help="output folder; default: beside the sqlite store (runs/)")
    args = p.parse_args(argv)
    try:
        if args.compare:
            print(compare(*args.compare, args.experiment, args.out, args.kernel))
        else:
            print(rank(args.sweep, args.experiment, args.out, args.kernel))
    except RankError as e:
        print(f"rank: {e}", file=sys.stderr)
        return 1
    return 0


def rank(sweep=None, experiment=None, out=None, kernel=None):
    """Read the store, write rank.csv, rank.md and plots/, and return the report's text."""
    uri, titles, jobs = read_store(sweep, experiment, kernel)
    if jobs.empty:  # an empty selection: nothing to rank is an error, as the sweep's exit says
        raise RankError(f"{titles[0].splitlines()[0]}: no jobs logged, nothing to rank")
    ranked, unranked = ranking(jobs)
    known = ranked["truth"].notna() & (ranked["truth"] != "none")
    calibrations, ranked = ranked[known], ranked[~known]
    static = static_table(jobs, order=list(dict.fromkeys(ranked["pathology"])))
    sections, md = list(titles), []
    found_first = findings.of(ranked, unranked)  # the conclusions first (ablate/report/findings.py)
    if not ranked.empty:
        sections.append(findings.text(found_first))
        md.append("## Findings\n\n" + findings.markdown(found_first))
        if worth := insitu.lines(ranked):
            sections.append("\n".join(worth))
            md.append("## Worth to the step\n\n" + "\n".join(line.strip() for line in worth[1:]))
        sections += [RANKING_TITLE, ranking_view(ranked).to_string(index=False), mechanisms(ranked)]
        md += ["## Ranking", markdown(ranking_view(ranked, details=True))]
        if (tuned := findings.tunables_view(found_first)) is not None:
            sections += ["Tunables: the slowdown on each side of the base's value (ablate/job/tunables.py):",
                         tuned.to_string(index=False)]
            md += ["## Tunables", markdown(tuned)]
        for title, view in counter_views(ranked):
            sections += [title, counters.as_lines(view) if "mechanism" in view else view.to_string(index=False)]
            md += [f"## {title.rstrip(':')}", markdown(view)]
    if not calibrations.empty:
        view = calibration_view(calibrations)
        covered = int((view["covers the truth"] == "yes").sum())
        sections += [f"Calibration (true effect known by construction): {covered} of {len(view)} "
                     "intervals cover the truth:", view.to_string(index=False)]
        md += ["## Calibration", markdown(view)]
    if not unranked.empty:
        view = unranked[["pathology", "shape", "status"]].assign(
            error=unranked["error"].fillna("").map(lambda e: e.strip().split("\n")[0][:240]))
        sections += ["Not ranked (these jobs produced no valid measurement; not_applicable: a generic "
                     "pathology that changes nothing in this kernel, and why):", view.to_string(index=False)]
        md += ["## Not ranked", markdown(view)]
    if static is not None:
        sections += [f"Static analysis (variant against the base, same build; occupancy for {static_arch(jobs)}):",
                     static.drop(columns="sass changes").to_string(index=False), sass_lines(static, jobs)]
        md += [f"## Static analysis (occupancy for {static_arch(jobs)})", markdown(static)]
    if ranked.empty and calibrations.empty and static is not None:
        sections.append(NOT_TIMED)

    db = sqlite_path(uri)
    out = Path(out) if out else (db.resolve().parent if db is not None else ROOT / "runs")
    # A sweep of pairs (hydra/sweeper=interactions): interactions, inversion, Shapley.
    found, pairs = None, []
    if not ranked.empty and interactions.interaction_jobs(ranked):
        run_ids = list(ranked["run_id"])
        found = interactions.report(ranked, out, read_params(run_ids), read_logs(run_ids))
    if found:
        sections += found[0]
        md += found[1]
        if pairs := findings.interactions_lines(found[3]):  # their findings beside the ranking's
            sections.insert(len(titles) + 1, "\n".join(pairs))
            md.insert(1, "\n".join(line.strip() for line in pairs))
        if parent := sweep_run_id(jobs):  # the sweep's summary run, once per sweep
            note = tracking.log_interactions(parent, found[3], found[2], len(ranked), interactions.SHAPLEY_METHOD)
            if note:
                sections.append(note)
    written = write(out, jobs, ranked, titles, md) + (found[2] if found else [])
    if not ranked.empty:
        written += findings.publish(out, found_first, pairs, sweep_run_id(jobs))
    sections.append("Wrote " + ", ".join(str(p) for p in written))
    return "\n\n".join(sections)


def read_logs(run_ids):
    """{run_id: replicate log ratios} from each job's samples.json artifact; a job without one
    (logged before replicates, or its artifact lost) is left out."""
    from mlflow import MlflowClient
    from mlflow.artifacts import load_text

    client = MlflowClient()
    out = {}
    for run_id in run_ids:
        try:
            out[run_id] = interactions.replicate_logs(load_text(f"{client.get_run(run_id).info.artifact_uri}/samples.json"))
        except Exception:
            continue
    return out


def read_params(run_ids, names=("pathologies", "seams", "min_effect")):
    """{run_id: {param: value}} of the jobs (what load_jobs does not carry)."""
    from mlflow import MlflowClient

    client = MlflowClient()
    return {r: {k: client.get_run(r).data.params.get(k) for k in names} for r in run_ids}



def sweep_run_id(jobs):
    """The parent run of the chosen sweep's jobs (the first job's), or None."""
    ids = jobs["run_id"].dropna()
    return MlflowClient().get_run(ids.iloc[0]).data.tags.get("mlflow.parentRunId") if not ids.empty else None


def compare(a, b, experiment=None, out=None, kernel=None):
    """Two sweeps' results side by side, per pathology and shape: each slowdown with its
    interval, and whether the intervals overlap (they can be the same effect) or not (the
    two runs disagree beyond their intervals). Writes compare.csv and compare.md."""
    uri, sweeps = sweeps_in_store(experiment, kernel)
    chosen = [pick_sweep(sweeps, wanted) for wanted in (a, b)]
    jobs = [load_jobs(s["experiment_id"], s) for s in chosen]
    ranked = [ranking(j)[0] for j in jobs]
    key = ["pathology", "shape"]
    cols = key + ["slowdown", "slowdown_lo", "slowdown_hi", "gpu_uuid"]
    both = ranked[0][cols].merge(ranked[1][cols], on=key, how="outer", suffixes=(" A", " B"))
    spread = gpu_spread.of_both(*jobs)  # results of different GPUs: held to the GPUs' spread too
    rows = []
    for _, r in both.iterrows():
        present = [not pd.isna(r[f"slowdown {x}"]) for x in "AB"]
        verdict = (gpu_spread.verdict(r, spread, overlap) if all(present)
                   else f"only in {'A' if present[0] else 'B'}")
        rows.append({"pathology": r["pathology"], "shape": r["shape"],
                     "A [95% CI]": _interval(r, " A"), "B [95% CI]": _interval(r, " B"),
                     "B / A": f"{r['slowdown B'] / r['slowdown A']:.4f}" if all(present) else "-",
                     "verdict": verdict})
    view = pd.DataFrame(rows)
    paired = view[~view["verdict"].str.startswith("only in")] if len(view) else view
    agree = int((paired["verdict"] != "DISAGREE").sum())
    titles = [header(s, j, uri if label == "A" else None, f"{label}: sweep")
              for label, s, j in zip("AB", chosen, jobs)]
    lines = titles + [f"{agree} of {len(paired)} jobs in both agree (their intervals overlap"
                      + (f", widened by the GPUs' spread {spread:.2%} where two GPUs timed them" if spread else "")
                      + "); "
                      f"{len(paired) - agree} disagree beyond their intervals:", view.to_string(index=False)]
    db = sqlite_path(uri)
    out = Path(out) if out else (db.resolve().parent if db is not None else ROOT / "runs")
    out.mkdir(parents=True, exist_ok=True)
    view.to_csv(out / "compare.csv", index=False)
    (out / "compare.md").write_text("# ablate: two sweeps compared\n\n" + "  \n".join(titles) + "\n\n"
                                    + lines[-2] + "\n\n" + markdown(view) + "\n")
    lines.append(f"Wrote {out / 'compare.csv'}, {out / 'compare.md'}")
    return "\n\n".join(lines)


def _interval(row, suffix):
    if pd.isna(row[f"slowdown{suffix}"]):
        return "-"
    return interval_text(row[f"slowdown{suffix}"], row[f"slowdown_lo{suffix}"], row[f"slowdown_hi{suffix}"], "x")


def sweeps_in_store(experiment=None, kernel=None):
    """(tracking URI, the sweeps of the store, latest first), in `experiment` or every
    experiment, of `kernel` or every kernel; RankError when there are none."""
    cfg = OmegaConf.load(ROOT / "conf" / "config.yaml")
    uri = tracking_uri(cfg)
    db = sqlite_path(uri)
    if db is not None and not db.exists():
        raise RankError(f"no MLflow store at {db}: run a sweep first (make sweep, or make static without a GPU)")
    client = MlflowClient(tracking_uri=uri)
    if experiment:
        exp = client.get_experiment_by_name(experiment)
        if exp is None:
            raise RankError(f"no experiment {experiment!r} in {uri}: run a sweep first (make sweep)")
        experiments = [exp]
    else:
        experiments = client.search_experiments()
    mlflow.set_tracking_uri(uri)
    where = "tags.kind = 'sweep'" + (f" and tags.kernel = '{kernel}'" if kernel else "")
    sweeps = mlflow.search_runs([e.experiment_id for e in experiments], filter_string=where,
                                order_by=["attributes.start_time DESC"])
    if sweeps.empty:
        whose = f" of kernel {kernel!r}" if kernel else ""
        raise RankError(f"no sweep{whose} in {uri} (runs of `python -m ablate -m ...`; make sweep)")
    return uri, sweeps


def read_store(sweep, experiment=None, kernel=None):
    """(tracking URI, a title line per sweep shown, their jobs): the chosen sweep (the latest
    of any kernel's experiment, unless `experiment`, `kernel` or `sweep` say which), and when
    it has only timed or only static jobs, the latest sweep of the other kind at the same
    commit."""
    uri, sweeps = sweeps_in_store(experiment, kernel)
    chosen = pick_sweep(sweeps, sweep)
    experiment_id = chosen["experiment_id"]
    sweeps = sweeps[sweeps["experiment_id"] == experiment_id]
    jobs = load_jobs(experiment_id, chosen)
    titles = [header(chosen, jobs, uri)]
    other, note = None, None
    if not (jobs["status"] == "static").any():
        other, note = companion(experiment_id, sweeps, chosen, "static")
    elif not (jobs["status"] == "ok").any():
        other, note = companion(experiment_id, sweeps, chosen, "ok")
    if other is not None:
        titles.append(header(*other, lead="Beside it, sweep"))
        jobs = pd.concat([jobs, other[1]], ignore_index=True)
    if note:
        titles.append(note)
    return uri, titles, jobs


def pick_sweep(sweeps, wanted):
    """The latest sweep, or the one named by sweep id or parent run id."""
    if not wanted:
        return sweeps.iloc[0]
    match = sweeps[(sweeps.get("tags.sweep_id") == wanted) | (sweeps["run_id"] == wanted)]
    if match.empty:
        known = ", ".join(sweeps.get("tags.sweep_id", pd.Series(dtype=str)).dropna().head(10))
        raise RankError(f"unknown sweep {wanted!r}; the latest sweeps are: {known}")
    return match.iloc[0]  # the same id twice (a reused sweep dir): the latest


def load_jobs(experiment_id, sweep):
    """One row per job of the sweep: pathology, shape, status, mechanism, expected, error and
    every metric (metric names without MLflow's `metrics.` prefix)."""
    runs = mlflow.search_runs([experiment_id], filter_string=f"tags.mlflow.parentRunId = '{sweep['run_id']}'",
                              order_by=["attributes.start_time ASC"])
    runs = resume.current_records(runs)  # a resumed sweep: a not_run job's record replaced by its run
    col = lambda name: runs[name] if name in runs else pd.Series([None] * len(runs), dtype=object)  # noqa: E731
    jobs = pd.DataFrame({
        "sweep": sweep.get("tags.sweep_id"),
        "run_id": runs.get("run_id"),
        "pathology": col("params.pathology"),
        "shape": col("params.shape"),
        "status": col("tags.status"),
        "mechanism": col("params.mechanism"),
        "expected": col("params.expected"),
        "truth": col("params.truth"),
        "stop": col("params.stop_reason"),
        "counters": col("params.counters"),           # the counter rules that applied (profile.py)
        "counters_verdict": col("params.counters_verdict"),
        "gpu": col("params.gpu"),
        "gpu_uuid": col("params.gpu_uuid"),           # which GPU timed it (ablate/gpu/pool.py)
        "roof": col("params.roof"),                   # the kind of compute under the roofline (peaks.py)
        "bound": col("params.bound"),                 # memory: a bandwidth chart, not a roofline
        "arch": col("params.arch"),  # what the binaries were built for (static: the occupancy's)
        "error": col("tags.error"),
        "fingerprint_notes": col("params.fingerprint_notes"),  # a combination's overlaps (fingerprint.py)
        "tuned": col("params.tuned"),          # a tunable's neighbour: [{name, base, value}] (job/tunables.py)
        "overrides": col("params.overrides"),  # what the variant sets that the base does not (pipeline.py)
        "workload": col("params.workload"),              # in situ: the model step it was timed in (ablate/gpu/insitu.py)
        "step_vs_amdahl": col("params.step_vs_amdahl"),
        "step_not_measured": col("params.step_not_measured"),  # in situ skipped, and why (half_sms)
        "start_time": runs.get("start_time"),
    })
    metrics = runs[sorted(c for c in runs.columns if c.startswith("metrics."))]
    metrics = metrics.rename(columns=lambda c: c[len("metrics."):])
    return pd.concat([jobs, metrics], axis=1)


def companion(experiment_id, sweeps, chosen, status):
    """((sweep, jobs) of the latest other sweep at the same commit and of the same plugin
    sources that has jobs of `status`, or None; a line saying why none is shown when the
    latest such sweep at the commit ran other plugin sources, else None)."""
    commit, sources = chosen.get("tags.git_commit"), _sources(chosen)
    note = None
    for _, s in sweeps.iterrows():
        if s["run_id"] == chosen["run_id"] or s.get("tags.git_commit") != commit:
            continue
        jobs = load_jobs(experiment_id, s)
        if not (jobs["status"] == status).any():
            continue
        if _sources(s) == sources:
            return (s, jobs), None
        note = note or (f"The {'static' if status == 'static' else 'timed'} sweep {s.get('tags.sweep_id')} at this "
                        f"commit ran other sources of the kernel's plugin (plugin_sources {_sources(s) or 'unknown'}, "
                        f"this one's {sources or 'unknown'}): not shown beside it.")
    return None, note


def _sources(sweep):
    """A sweep's plugin_sources tag (None for a sweep logged before ablate recorded it)."""
    value = sweep.get("tags.plugin_sources")
    return value if isinstance(value, str) else None


def header(sweep, jobs, uri=None, lead="Sweep"):
    """A sweep's title line (and the store's, when `uri` is given)."""
    counts = ", ".join(f"{n} {s}" for s, n in jobs["status"].value_counts().items()) or "no jobs"
    kernel = sweep.get("tags.kernel")
    kernel = f"kernel {kernel}, " if isinstance(kernel, str) else ""
    return (f"{lead} {sweep.get('tags.sweep_id')} "
            f"({kernel}mode {sweep.get('tags.mode')}, commit {sweep.get('tags.git_commit')}, "
            + (f"plugin sources {_sources(sweep)}, " if _sources(sweep) else "")
            + f"{sweep['status'].lower()}; jobs: {counts})" + (f"\nstore: {uri}" if uri else "")
            + mixed_gpus(jobs) + gpu_spread.line(jobs))


def mixed_gpus(jobs):
    """A warning line when the sweep's jobs ran on more than one GPU model (a launcher spread
    them over unlike GPUs): their slowdowns are not one GPU's ranking."""
    models = jobs["gpu"].dropna().value_counts() if "gpu" in jobs else pd.Series(dtype=int)
    if len(models) < 2:
        return ""
    return ("\nWARNING: this sweep mixes GPU models (" + ", ".join(f"{n} jobs on {m}" for m, n in models.items())
            + "): rank each model's jobs apart before comparing their slowdowns")


def ranking(jobs):
    """Timed jobs ranked per shape, worst first (shapes in sweep order), and the jobs that
    cannot be ranked. A job logged twice for one pathology and shape counts once (the latest)."""
    for m in TIMED:
        if m not in jobs:
            jobs[m] = np.nan
    timed = jobs[jobs["status"] == "ok"].drop_duplicates(["pathology", "shape"], keep="last")
    complete = timed[TIMED[:-1]].notna().all(axis=1)
    unranked = jobs[~jobs["status"].isin(["ok", "static"])].copy()
    missing = timed[~complete].assign(status="ok", error="logged without its timing metrics")
    unranked = pd.concat([unranked, missing], ignore_index=True)
    ranked = timed[complete].copy()
    # The worker decides significance (with bench.min_effect); a run without the flag says so.
    flag = ranked["significant"]
    ranked["significant"] = np.select([flag.isna(), flag > 0], ["n/a", "yes"], "no")
    shapes = list(dict.fromkeys(ranked["shape"]))
    ranked["shape_order"] = ranked["shape"].map(shapes.index)
    ranked = ranked.sort_values(["shape_order", "slowdown"], ascending=[True, False])
    ranked["rank"] = ranked.groupby("shape").cumcount() + 1
    return ranked.drop(columns="shape_order").reset_index(drop=True), unranked.reset_index(drop=True)


def ranking_view(ranked, details=False):
    view = pd.DataFrame({
        "rank": ranked["rank"],
        "pathology": ranked["pathology"],
        "shape": ranked["shape"],
        "base us": ranked["base_us"].map("{:.2f}".format),
        "variant us": ranked["variant_us"].map("{:.2f}".format),
        "slowdown [95% CI]": [interval_text(s, lo, hi, "x") for s, lo, hi in
                              zip(ranked["slowdown"], ranked["slowdown_lo"], ranked["slowdown_hi"])],
        "significant": ranked["significant"],
    })
    if "replicates" in ranked and ranked["replicates"].notna().any():
        # How many replicates the interval stands on, and what ended them (precision reached,
        # or the budget or the replicate cap first: a noisy job).
        view["reps"] = ranked["replicates"].map(lambda n: "-" if pd.isna(n) else f"{n:.0f}")
        view["stop"] = ranked["stop"].fillna("-")
    if insitu.has_steps(ranked):  # what each costs a model step (ablate/report/insitu.py)
        view = pd.concat([view, insitu.columns(ranked)], axis=1)
    if details:
        view["mechanism"] = ranked["mechanism"].fillna("")
        view["expected"] = ranked["expected"].fillna("")
    return view


def counter_views(ranked):
    """[(title, table)] of the profiled jobs (bench.profile=true): each mechanism confirmed or
    refuted by its counters (ablate/job/counters.py), and the speed of light (ablate/report/roofline.py)."""
    out = []
    rows = counters.mechanism_rows(ranked)
    if rows:
        view = pd.DataFrame(rows)
        confirmed = int((view["mechanism"] == "confirmed").sum())
        judged = int(view["mechanism"].isin(["confirmed", "refuted"]).sum())
        idle = int((view["mechanism"] == counters.NO_EFFECT).sum())
        idle = f"; {idle} no effect (a rule failed where the time did not move either)" if idle else ""
        out.append((f"Mechanism by hardware counters (ncu, one launch each, caches flushed): {confirmed} of "
                    f"{judged} confirmed{idle}:", view))
    sol = roofline.sol_table(ranked)
    if sol is not None:
        out.append(("Speed of light (% of ncu's peak per unit):", sol))
    return out


def calibration_view(calibrations):
    """Each calibration's recovered ratio, its interval, the truth and whether it is covered."""
    truth = calibrations["truth"].astype(float)
    return pd.DataFrame({
        "calibration": calibrations["pathology"],
        "shape": calibrations["shape"],
        "slowdown [95% CI]": [f"{s:.4f}x [{lo:.4f}, {hi:.4f}]" for s, lo, hi in
                              zip(calibrations["slowdown"], calibrations["slowdown_lo"], calibrations["slowdown_hi"])],
        "truth": truth.map("{:g}".format),
        "covers the truth": np.where((calibrations["slowdown_lo"] <= truth) & (truth <= calibrations["slowdown_hi"]),
                                     "yes", "NO"),
    })


def mechanisms(ranked):
    """Each ranked pathology's mechanism and prediction, once, to hold the numbers against."""
    lines = ["What each pathology defeats, and what was predicted:"]
    # A combined variant's texts are its parts' joined: shown once, under the parts, when they ran alone.
    alone = set(ranked["pathology"])
    ranked = ranked[[not ("+" in v and set(v.split("+")) <= alone) for v in ranked["pathology"]]]
    for _, r in ranked.drop_duplicates("pathology").fillna({"mechanism": "", "expected": ""}).iterrows():
        lines.append(f"- {r['pathology']}: {r['mechanism'] or '(no mechanism logged)'}\n"
                     f"  expected: {r['expected'] or '(no prediction logged)'}")
    return "\n".join(lines)


def static_table(jobs, order):
    """Per pathology, its static metrics as `base -> variant` where they differ, the SASS
    classes that changed, and its fingerprint verdict; None when there are no static jobs."""
    static = jobs[jobs["status"] == "static"].drop_duplicates("pathology", keep="last").set_index("pathology")
    if static.empty:
        return None
    base = static.loc["none"] if "none" in static.index else None
    names = ["none"] + [n for n in order if n != "none"] + sorted(static.index.difference(order))
    names = [n for n in dict.fromkeys(names) if n in static.index]
    sass = sorted(c for c in static.columns if c.startswith("sass."))
    rows = []
    for name in names:
        job = static.loc[name]
        row = {"pathology": name}
        for m in STATIC:
            row[m] = _change(base[m] if base is not None and m in static else None, job.get(m))
        if base is None:
            row["sass changes"] = "(no base job to compare with)"
        elif name == "none":
            row["sass changes"] = "(the base)"
        else:
            row["sass changes"] = ", ".join(f"{c[5:]} {_num(base[c])} -> {_num(job[c])}"
                                            for c in sass if not _same(base[c], job[c])) or "none"
        row["fingerprint"] = _fingerprint(job)
        rows.append(row)
    return pd.DataFrame(rows)


def static_arch(jobs):
    """The arch(es) the static jobs were built for, which their occupancy is computed for."""
    archs = jobs.loc[jobs["status"] == "static", "arch"].dropna().unique() if "arch" in jobs else []
    return ", ".join(sorted(map(str, archs))) or "an arch not logged"


def sass_lines(static, jobs):
    """The SASS changes per pathology, and why each failing fingerprint failed."""
    lines = ["SASS instruction classes that changed:"]
    lines += [f"- {r['pathology']}: {r['sass changes']}" for _, r in static.iterrows()]
    failed = static.loc[static["fingerprint"] == "FAIL", "pathology"]
    errors = (jobs[jobs["status"] == "static"].drop_duplicates("pathology", keep="last")
              .set_index("pathology")["error"].fillna(""))
    lines += [f"Fingerprint FAIL, {n}: {errors.get(n) or '(no reason logged)'}" for n in failed]
    notes = (jobs[jobs["status"] == "static"].drop_duplicates("pathology", keep="last")
             .set_index("pathology")["fingerprint_notes"].dropna())
    lines += [f"Fingerprint overlap, {n}: {text}" for n, text in notes.items() if n in set(static["pathology"])]
    return "\n".join(lines)


def _fingerprint(job):
    """The verdict the static job logged: metric `fingerprint_ok` (1 pass, 0 fail)."""
    ok = job.get("fingerprint_ok")
    if ok is None or pd.isna(ok):
        return "-" if job.name == "none" else "not checked"
    return "pass" if ok > 0 else "FAIL"


def _change(base, value):
    if value is None or pd.isna(value):
        return "-"
    if base is None or pd.isna(base) or _same(base, value):
        return _num(value)
    return f"{_num(base)} -> {_num(value)}"


def _same(a, b):
    return (pd.isna(a) and pd.isna(b)) or a == b


def _num(v):
    return "-" if pd.isna(v) else f"{v:g}"


def write(out, jobs, ranked, titles, md):
    """rank.csv (every job, its rank where it has one), rank.md and the figures."""
    plot_dir = out / "plots"
    plot_dir.mkdir(parents=True, exist_ok=True)
    for old in [*plot_dir.glob("slowdown_*.png"), *plot_dir.glob("roofline_*.png"), *plot_dir.glob("bandwidth_*.png"),
                *plot_dir.glob("step_*.png"), plot_dir / "heatmap.png"]:
        old.unlink(missing_ok=True)  # figures of an earlier ranking would pass for this one's
    table = jobs.merge(ranked[["run_id", "rank"]], on="run_id", how="left")
    lead = ["sweep", "rank", "pathology", "shape", "status"]
    table = table[lead + [c for c in table.columns if c not in lead]]
    table.to_csv(out / "rank.csv", index=False)
    head = "\n\n".join(t.replace("\n", "  \n") for t in titles)
    (out / "rank.md").write_text(f"# ablate ranking\n\n{head}\n\n" + "\n\n".join(md) + "\n")
    written = [out / "rank.csv", out / "rank.md"]
    shapes = list(dict.fromkeys(ranked["shape"]))
    for shape in shapes:
        path = plot_dir / f"slowdown_{shape}.png"
        plots.slowdown_bars(ranked, shape, path)
        written.append(path)
        if roofline.bandwidth_figure(ranked, shape, plot_dir / f"bandwidth_{shape}.png"):
            written.append(plot_dir / f"bandwidth_{shape}.png")  # a memory-bound kernel's, for its roofline
        elif roofline.figure(ranked, shape, plot_dir / f"roofline_{shape}.png"):
            written.append(plot_dir / f"roofline_{shape}.png")
        if insitu.has_steps(ranked) and insitu.figure(ranked, shape, plot_dir / f"step_{shape}.png"):
            written.append(plot_dir / f"step_{shape}.png")  # kernel against step slowdown, Amdahl's line
    if len(shapes) > 1:
        plots.slowdown_heatmap(ranked, shapes, plot_dir / "heatmap.png")
        written.append(plot_dir / "heatmap.png")
    return written


if __name__ == "__main__":
    sys.exit(main())
