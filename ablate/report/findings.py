"""What a ranking says, in plain words, before its tables: the findings `make rank` prints first.

A kernel engineer reads a ranking to decide what to do next; the tables leave the reading to
them. `of(ranked, unranked)` draws the conclusions that the numbers support, each with its
interval (rank.py's ranked table: one row per timed job, `significant` as the worker decided
it with bench.min_effect):

- **the base is beaten** (headroom): a job whose variant is significantly *faster* than its
  base is no ablation but a statement about the base: "the base is beaten at n64m:
  tune_block_64 runs 1.89x faster [1.87, 1.91]; adopt BLOCK=64 or explain". Its speed-up is
  1 / slowdown, its interval [1 / hi, 1 / lo];
- **what carries the speed**: the largest significant slowdowns per shape;
- **what is free**: the pathologies whose interval lies within 1 +- bench.min_effect
  (candidates to simplify the kernel);
- **predictions that missed**: the yaml's `expected` read for a stated range ("1.2-1.6x",
  "~1.9x", "1.5x or more", "up to 2x", "about 1x", "1.00x"; a clause naming shapes applies to
  those shapes, the first range without a shape to the rest), and a job whose whole interval
  lies outside it;
- **mechanisms the counters refuted** (bench.profile=true: counters_verdict);
- **tunables** (ablate/job/tunables.py's neighbours, param `tuned`): per shape and tunable
  the slowdown on each side, and whether the base sits at a local optimum (no neighbour
  significantly faster).

The generated neighbours are kept out of "carries" and "free" (they are no ablations of an
optimization) and reported in the tunables' table instead; calibrations never reach here.
`text` is one screen; `markdown` the same for findings.md and rank.md; `interactions_text`
the same reading of an interactions report (the pairs that carry speed together, and the
inversion).
"""
import json
import math
import re

import pandas as pd

from ablate.gpu.stats import interval_text

BASE = "none"  # ablate.job.variant.BASE: the A/A job
TUNE_PREFIX = "tune_"  # ablate.job.tunables.PREFIX (report does not import the job's writer)
TOP = 3  # slowdowns named per shape under "carries the speed"
_NUM = r"(\d+(?:\.\d+)?)"
# Ranges a prediction states, most specific first: (pattern, (lo, hi) from the match).
RANGES = [
    (re.compile(rf"{_NUM}\s*x?\s*(?:-|–|to)\s*{_NUM}\s*x"), lambda m: (float(m[1]), float(m[2]))),
    (re.compile(rf"{_NUM}\s*x\s+or\s+more"), lambda m: (float(m[1]), math.inf)),
    (re.compile(rf"(?:at least|>=?)\s*{_NUM}\s*x"), lambda m: (float(m[1]), math.inf)),
    (re.compile(rf"(?:up to|at most|<=?)\s*{_NUM}\s*x", re.I), lambda m: (0.0, float(m[1]))),
    (re.compile(rf"(?:~|about\s+|around\s+)\s*{_NUM}\s*x", re.I), lambda m: (float(m[1]) / 1.1, float(m[1]) * 1.1)),
    (re.compile(rf"(?<![\d.]){_NUM}\s*x\b"), lambda m: (float(m[1]) / 1.05, float(m[1]) * 1.05)),
]


def is_tuned(name) -> bool:
    return isinstance(name, str) and name.startswith(TUNE_PREFIX)


def stated_range(expected, shape, shapes):
    """(lo, hi, the words it came from) of the prediction `expected` for `shape`, or None when
    it states no range ablate can read. A clause (split at ; , and sentence ends) that names
    shapes of the sweep applies to those; the first clause with a range and no shape, to the
    others."""
    if not isinstance(expected, str) or not expected.strip():
        return None
    general = None
    for clause in re.split(r"[;,]|\.\s", expected):
        found = None
        for pattern, bounds in RANGES:
            if m := pattern.search(clause):
                found = (*bounds(m), m.group(0).strip())
                break
        if found is None:
            continue
        named = [s for s in shapes if re.search(rf"\b{re.escape(str(s))}\b", clause)]
        if named:
            if shape in named:
                return found
        elif general is None:
            general = found
    return general


def speedup_text(r) -> str:
    """A significant speed-up in words: 1 / slowdown with its interval [1 / hi, 1 / lo]:
    `1.887x faster [1.868, 1.906]`."""
    value, _, interval = interval_text(1 / r["slowdown"], 1 / r["slowdown_hi"], 1 / r["slowdown_lo"], "x").partition(" ")
    return f"{value} faster {interval}"


def _slow(r) -> str:
    return interval_text(r["slowdown"], r["slowdown_lo"], r["slowdown_hi"], "x")


def _adopt(r) -> str:
    over = r.get("overrides")
    if isinstance(over, str) and over not in ("", "none"):
        return f"adopt {over}"
    return f"adopt what {r['pathology']} changes"


def of(ranked, unranked=None) -> dict:
    """The findings of a ranking ({headroom, carries, free, missed, refuted, tunables,
    not_applicable}), each a list of dicts (tunables: a DataFrame)."""
    if ranked is None or ranked.empty:
        return {"headroom": [], "carries": [], "free": [], "missed": [], "refuted": [], "unread": 0,
                "tunables": pd.DataFrame(), "not_applicable": [], "own": False}
    shapes = list(dict.fromkeys(ranked["shape"]))
    sig = ranked["significant"] == "yes"
    # the A/A job "faster" than itself is an unsteady machine, not headroom (README: none is the control)
    faster = ranked[sig & (ranked["slowdown"] < 1) & (ranked["pathology"] != BASE)].sort_values("slowdown")
    headroom = [{"shape": r["shape"], "pathology": r["pathology"], "run_id": r.get("run_id"),
                 "speedup": speedup_text(r), "adopt": _adopt(r),
                 "line": f"the base is beaten at {r['shape']}: {r['pathology']} runs {speedup_text(r)}; "
                         f"{_adopt(r)} or explain"}
                for _, r in faster.iterrows()]
    own = ranked[[not is_tuned(p) and p != BASE for p in ranked["pathology"]]]  # the A/A job measures nothing away
    carries = []
    for shape in shapes:
        slow = own[(own["shape"] == shape) & (own["significant"] == "yes") & (own["slowdown"] > 1)]
        top = slow.sort_values("slowdown", ascending=False).head(TOP)
        if not top.empty:
            carries.append({"shape": shape, "line": f"{shape}: " + ", ".join(
                f"{r['pathology']} {_slow(r)}" for _, r in top.iterrows())})
    free = []
    for shape in shapes:
        nothing = own[(own["shape"] == shape) & (own["significant"] == "no")]
        if not nothing.empty:
            free.append({"shape": shape, "line": f"{shape}: " + ", ".join(
                f"{r['pathology']} {_slow(r)}" for _, r in nothing.sort_values("slowdown").iterrows())})
    missed, unread = [], 0
    for _, r in own.iterrows():
        stated = stated_range(r.get("expected"), r["shape"], shapes)
        if stated is None:
            unread += 1
            continue
        lo, hi, words = stated
        if r["slowdown_hi"] < lo or r["slowdown_lo"] > hi:
            side = "below" if r["slowdown_hi"] < lo else "above"
            missed.append({"shape": r["shape"], "pathology": r["pathology"],
                           "line": f"{r['pathology']} at {r['shape']}: expected {words}, measured {_slow(r)} "
                                   f"({side} the range)"})
    refuted = []
    if "counters_verdict" in ranked:
        for _, r in ranked[ranked["counters_verdict"] == "refuted"].iterrows():
            refuted.append({"shape": r["shape"], "pathology": r["pathology"],
                            "line": f"{r['pathology']} at {r['shape']}: {_slow(r)}, but the counters refute "
                                    "its mechanism (the table below says which counter did not move)"})
    not_applicable = []
    if unranked is not None and not unranked.empty:
        for _, r in unranked[[is_tuned(p) for p in unranked["pathology"]]].iterrows():
            why = str(r.get("error") or "").strip().split("\n")[0]
            not_applicable.append({"shape": r["shape"], "pathology": r["pathology"],
                                   "line": f"{r['pathology']} at {r['shape']}: {r['status']}: {why[:200]}"})
    return {"headroom": headroom, "carries": carries, "free": free, "missed": missed, "unread": unread,
            "refuted": refuted, "tunables": tunables(ranked), "not_applicable": not_applicable,
            "own": not own.empty}


def _tuned_of(value):
    """The one tunable a job's `tuned` param names ({name, base, value}), else None."""
    if not isinstance(value, str) or value in ("", "none"):
        return None
    try:
        items = json.loads(value)
    except ValueError:
        return None
    return items[0] if isinstance(items, list) and len(items) == 1 and isinstance(items[0], dict) else None


def tunables(ranked) -> pd.DataFrame:
    """Per shape and tunable: the base's value, each side's neighbour with its slowdown, and
    whether the base is at a local optimum there (no neighbour significantly faster; `one side`
    where only one neighbour was timed)."""
    if "tuned" not in ranked:
        return pd.DataFrame()
    rows = {}
    for _, r in ranked.iterrows():
        t = _tuned_of(r["tuned"])
        if t is None:
            continue
        row = rows.setdefault((r["shape"], t["name"]), {"shape": r["shape"], "tunable": t["name"],
                                                         "base": t["base"], "smaller": "-", "larger": "-",
                                                         "_sides": 0, "_beaten": []})
        try:
            side = "larger" if float(t["value"]) > float(t["base"]) else "smaller"
        except (TypeError, ValueError):
            side = "larger"
        row[side] = f"{t['value']}: {_slow(r)}"
        row["_sides"] += 1
        if r["significant"] == "yes" and r["slowdown"] < 1:
            row["_beaten"].append(f"{t['name']}={t['value']} {speedup_text(r)}")
    out = []
    for row in rows.values():
        beaten, sides = row.pop("_beaten"), row.pop("_sides")
        row["local optimum"] = ("NO: " + "; ".join(beaten) if beaten
                                else "yes" if sides >= 2 else "yes, one side timed")
        out.append(row)
    return pd.DataFrame(out)


def _section(title, items, empty):
    lines = [title]
    lines += [f"  - {i['line']}" for i in items] if items else [f"  {empty}"]
    return lines


def lines(found) -> list[str]:
    out = ["Findings (every number a slowdown = variant time / base time, or a speed-up, with its 95% interval):"]
    out += _section("The base is beaten (a variant significantly faster than the base):", found["headroom"],
                    "nowhere: no variant is significantly faster than the base.")
    # a sweep of the neighbours alone (make tune) ablates nothing: say so, not "nothing carries the speed"
    alone = "not asked: only the tunables' neighbours were timed (Tunables, below)."
    own = found.get("own", True)
    out += _section("What carries the speed (the largest significant slowdowns):", found["carries"],
                    "nothing: no pathology is a significant slowdown." if own else alone)
    out += _section("What is free (not significant: candidates to simplify):", found["free"],
                    "nothing." if own else alone)
    missed = _section("Predictions that missed their stated range (the whole interval outside it):",
                      found["missed"], "none.")
    if found.get("unread"):
        missed.append(f"  (the predictions of {found['unread']} more state no range ablate reads)")
    out += missed
    out += _section("Mechanisms the counters refuted:", found["refuted"],
                    "none (or no job profiled: make profile).")
    table = found["tunables"]
    if not table.empty:
        out.append("Tunables (the base's value against each neighbour; local optimum: no neighbour significantly "
                   "faster):")
        for shape, part in table.groupby("shape", sort=False):
            beaten = [v[len("NO: "):] for v in part["local optimum"] if v.startswith("NO")]
            out.append(f"  - {shape}: the base is " + (f"NOT at a local optimum ({'; '.join(beaten)})" if beaten
                                                        else "at a local optimum")
                       + f" of the {len(part)} tunables timed")
    if found["not_applicable"]:
        out += _section("Neighbours not applicable (cannot compile or launch, or the base's code):",
                        found["not_applicable"], "")
    return out


def text(found) -> str:
    return "\n".join(lines(found))


def markdown(found) -> str:
    from ablate.report.plots import markdown as table_md

    body = "\n".join(line if not line.startswith("  ") else line.strip() for line in lines(found))
    body = re.sub(r"^(?!- )(.+:)$", r"**\1**", body, flags=re.M)
    if not found["tunables"].empty:
        body += "\n\n" + table_md(found["tunables"])
    return body


def tunables_view(found):
    """The tunables' table for the report below the ranking (None without neighbours)."""
    table = found["tunables"]
    return None if table.empty else table


def headroom_tags(found) -> dict:
    """{run_id: tag text} of the jobs whose variant beats the base (MLflow tag `headroom`)."""
    return {h["run_id"]: h["line"] for h in found["headroom"] if isinstance(h.get("run_id"), str)}


def interactions_lines(results) -> list[str]:
    """The interactions report read the same way: per shape the pairs that carry speed
    together (significant compounding, I > 1) and those that overlap (I < 1: one hides the
    other), and the inversion: everything off and the optimizations with the largest Shapley
    shares. `results` is interactions.report's {shape: analyse(...)}."""
    out = []
    for shape, res in results.items():
        sig = [r for r in res.get("pairs") or [] if r["significant"]]
        pair = lambda r: f"{r['a']}+{r['b']} I = {interval_text(r['I'], r['lo'], r['hi'], 'x')}"  # noqa: E731
        together = sorted((r for r in sig if r["I"] > 1), key=lambda r: -r["I"])[:TOP]
        overlap = sorted((r for r in sig if r["I"] < 1), key=lambda r: r["I"])[:TOP]
        if res.get("pairs"):
            out.append(f"  - {shape}: pairs that carry speed together (compound): "
                       + (", ".join(map(pair, together)) or "none significant"))
            out.append(f"  - {shape}: pairs that overlap (removing one hides the other): "
                       + (", ".join(map(pair, overlap)) or "none significant"))
        inv = res.get("inversion")
        if inv:
            t = inv["total"]
            line = (f"  - {shape}: everything off ({len(inv['full'])} optimizations) runs "
                    f"{interval_text(t['value'], t['lo'], t['hi'], 'x')} the base's time")
            phi = (res.get("shapley") or {}).get("phi")
            if phi:
                top = sorted(phi.items(), key=lambda kv: -kv[1]["value"])[:TOP]
                line += "; the largest Shapley shares: " + ", ".join(
                    f"{n} {interval_text(p['value'], p['lo'], p['hi'], 'x')}" for n, p in top)
            out.append(line)
    return (["Findings of the interactions (I = r_ab / (r_a r_b), 95% intervals):"] + out) if out else []


def publish(out, found, pairs=(), parent_run_id=None) -> list:
    """findings.md into `out`, and in MLflow (ablate/sweep/tracking.py: log_findings) tag
    `headroom` on each job whose variant beats the base and, on the sweep's parent run, tag
    `findings` and the artifact findings.md. Returns the files written."""
    from pathlib import Path

    from ablate.sweep import tracking

    body = "# ablate findings\n\n" + markdown(found)
    if pairs:
        body += "\n\n" + "\n".join(line.strip() for line in pairs)
    path = Path(out) / "findings.md"
    path.write_text(body + "\n")
    tracking.log_findings(parent_run_id, headroom_tags(found), "\n".join([text(found), *pairs]), path)
    return [path]
