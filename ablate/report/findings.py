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
  "~1.9x", "1.5x or more", "at least 1.3x", "up to 2x", "about 1x", "1.00x"), each read only
  where it opens a clause and says where it holds (`stated_range`): at the shapes it names,
  "16 x 4096 (r16_h4k): 1.00x", "1.5-2x at s4k"; on every shape; on a memory- or compute-bound
  kernel; unqualified, at each shape the text does not mention. A range under a
  condition ablate cannot check ("close to 1x for a kernel whose ...", "up to 2x where ...")
  states none: such a pathology is named under "no range stated", never a miss. A miss is a
  job whose whole interval lies outside its range;
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
import itertools
import json
import math
import re

import pandas as pd

from ablate.gpu.stats import interval_text
from ablate.job import counters

BASE = "none"  # ablate.job.variant.BASE: the A/A job
TUNE_PREFIX = "tune_"  # ablate.job.tunables.PREFIX (report does not import the job's writer)
TOP = 3  # slowdowns named per shape under "carries the speed"
_NUM = r"(\d+(?:\.\d+)?)"
_X = r"\s*x(?!\w)(?!\s*\d)"  # a multiple, "1.5x": not "16 x 4096" (a shape's dimensions), nor "2x1"
# The forms that state a range, each read only where it opens its clause or segment
# ("1.2-1.6x: ...", "16 x 4096 (r16_h4k): 1.00x ..."), never inside prose ("DRAM reads up
# ~1.5x", "close to 1x for a kernel whose ..."): (pattern, (lo, hi) from the match).
RANGES = [
    (re.compile(rf"{_NUM}\s*x?\s*(?:-|–|to)\s*{_NUM}{_X}", re.I), lambda m: (float(m[1]), float(m[2]))),
    (re.compile(rf"{_NUM}{_X}\s+or\s+more", re.I), lambda m: (float(m[1]), math.inf)),
    (re.compile(rf"(?:at\s+least|>=?)\s*{_NUM}{_X}", re.I), lambda m: (float(m[1]), math.inf)),
    (re.compile(rf"(?:up\s+to|at\s+most|<=?)\s*{_NUM}{_X}", re.I), lambda m: (0.0, float(m[1]))),
    (re.compile(rf"(?:~|about\s+|around\s+)\s*{_NUM}{_X}", re.I), lambda m: (float(m[1]) / 1.1, float(m[1]) * 1.1)),
    (re.compile(rf"{_NUM}{_X}", re.I), lambda m: (float(m[1]) / 1.05, float(m[1]) * 1.05)),
]
# Where a range holds, from the words around it (brackets left out, shapes of the sweep aside):
EVERY = re.compile(r"(?:at|on) every shape")                                   # every shape, named or not
REST = re.compile(r"|elsewhere|(?:at|on) (?:every other shape|the other shapes)")  # the shapes no clause names
BOUND = re.compile(r"(?:on|for) (?:an? )?(memory|compute)-bound kernels?")    # the kernel's spec.BOUND
# A segment after an unqualified range that makes it conditional: "2x, where registers bind".
IF = re.compile(r"(?:where|wherever|when|whenever|if|unless|except|provided|for|on|at|in|with|without|but)\b", re.I)


def is_tuned(name) -> bool:
    return isinstance(name, str) and name.startswith(TUNE_PREFIX)


def _pieces(text):
    """`text` cut outside brackets into clauses (at ; | and sentence ends), each a list of
    (delimiter, segment): its segments cut at ", " and ": ", each with the delimiter before it
    ("" for a clause's first)."""
    clauses, segments, depth, start, before = [], [], 0, 0, ""
    for i, c in enumerate(text):
        depth = max(0, depth + (c in "([") - (c in ")]"))
        after = text[i + 1:i + 2]
        if depth or c in ")]":
            continue
        if c in ";|" or (c == "." and (not after or after.isspace())):
            clauses.append([*segments, (before, text[start:i])])
            segments, before, start = [], "", i + 1
        elif c in ",:" and (not after or after.isspace()):
            segments.append((before, text[start:i]))
            before, start = c, i + 1
    return [*clauses, [*segments, (before, text[start:])]]


def _bare(text) -> str:
    """`text` without what its brackets hold, in lower case, words only: what qualifies a range."""
    depth, kept = 0, []
    for c in text:
        depth = max(0, depth + (c in "([") - (c in ")]"))
        if not depth and c not in ")]":
            kept.append(c)
    return " ".join(re.sub(r"[^\w\s=-]", " ", "".join(kept)).lower().split())


def _named(text, shapes) -> list:
    return [s for s in shapes if re.search(rf"(?<!\w){re.escape(str(s))}(?!\w)", text)]


def _only_shapes(segment, shapes) -> bool:
    """Whether `segment` lists shapes and nothing else ("prefill_n4k and prefill_n14k (...)")."""
    words, names = _bare(segment).split(), {str(s).lower() for s in shapes}
    return bool(words) and all(w in names or w in ("and", "or") for w in words) and bool(names & set(words))


def _head(segment):
    """(lo, hi, words, the rest of the segment) of the range that opens `segment`, else None."""
    text = segment.lstrip()
    for pattern, bounds in RANGES:
        if m := pattern.match(text):
            return (*bounds(m), m.group(0).strip(), text[m.end():])
    return None


def ranges(expected, shapes) -> list:
    """Every range `expected` states, with where it holds: (lo, hi, words, where), where is
    ("shapes", [names of `shapes`]), ("every",), ("bound", "memory" | "compute") or ("rest",).
    A range under a condition ablate cannot check ("close to 1x for a kernel whose ...", "up
    to 2x where registers bind", "on the D=128 shapes", a label "16 x 4096:" that names no
    shape) is none of these: left out."""
    out = []
    for clause in _pieces(expected):
        for k, (before, segment) in enumerate(clause):
            if (head := _head(segment)) is None:
                continue
            lo, hi, words, scope = head
            label = clause[k - 1][1] if before == ":" else ""
            after = list(itertools.takewhile(lambda p: p[0] == "," and _head(p[1]) is None, clause[k + 1:]))
            listed = itertools.takewhile(lambda s: _only_shapes(s, shapes), (seg for _, seg in after))
            named = _named(" ".join([label, scope, *listed]), shapes)
            qualifier = _bare(f"{label} {scope}")
            if named:
                where = ("shapes", named)
            elif EVERY.fullmatch(qualifier):
                where = ("every",)
            elif m := BOUND.fullmatch(qualifier):
                where, words = ("bound", m[1]), f"{words} {qualifier}"
            elif REST.fullmatch(qualifier) and not (after and IF.match(after[0][1].lstrip())):
                where = ("rest",)
            else:
                continue
            out.append((lo, hi, words, where))
    return out


def stated_range(expected, shape, shapes, bound=None):
    """(lo, hi, the words it came from) of the prediction `expected` for `shape` (one of the
    sweep's `shapes`) on a kernel of spec.BOUND `bound`, or None where it states none. A
    range holds where its own clause says (`ranges`): at the shapes it names, first; on every
    shape; on a kernel of that bound; unqualified, at each shape the text does not mention
    (one it mentions elsewhere, "more at s512", takes none of it)."""
    if not isinstance(expected, str) or not expected.strip():
        return None
    found = ranges(expected, shapes)
    holds = [lambda w: w[0] == "shapes" and shape in w[1], lambda w: w[0] == "every"]
    if shape not in _named(expected, shapes):
        holds += [lambda w: w == ("bound", bound), lambda w: w[0] == "rest"]
    for test in holds:
        for lo, hi, words, where in found:
            if test(where):
                return lo, hi, words
    return None


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
    """The findings of a ranking ({headroom, carries, free, missed, unstated, refuted,
    tunables, not_applicable}), each a list of dicts (tunables: a DataFrame; combined: the
    number of combinations, held to no prediction)."""
    if ranked is None or ranked.empty:
        return {"headroom": [], "carries": [], "free": [], "missed": [], "refuted": [], "unstated": [], "combined": 0,
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
    missed, unstated, combined = [], {}, 0
    for _, r in own.iterrows():
        if "+" in str(r["pathology"]):  # a combination: each yaml predicts its pathology alone
            combined += 1
            continue
        bound = r.get("bound") if isinstance(r.get("bound"), str) else None
        stated = stated_range(r.get("expected"), r["shape"], shapes, bound)
        if stated is None:
            unstated.setdefault(r["pathology"], []).append(r["shape"])
            continue
        lo, hi, words = stated
        if r["slowdown_hi"] < lo or r["slowdown_lo"] > hi:
            side = "below" if r["slowdown_hi"] < lo else "above"
            missed.append({"shape": r["shape"], "pathology": r["pathology"],
                           "line": f"{r['pathology']} at {r['shape']}: expected {words}, measured {_slow(r)} "
                                   f"({side} the range)"})
    refuted = []
    if "counters_verdict" in ranked:
        judged = [counters.judged(v, s) for v, s in zip(ranked["counters_verdict"], ranked["significant"])]
        for _, r in ranked[[v == "refuted" for v in judged]].iterrows():
            refuted.append({"shape": r["shape"], "pathology": r["pathology"],
                            "line": f"{r['pathology']} at {r['shape']}: {_slow(r)}, but the counters refute "
                                    "its mechanism (the table below says which counter did not move)"})
    not_applicable = []
    if unranked is not None and not unranked.empty:
        for _, r in unranked[[is_tuned(p) for p in unranked["pathology"]]].iterrows():
            why = str(r.get("error") or "").strip().split("\n")[0]
            not_applicable.append({"shape": r["shape"], "pathology": r["pathology"],
                                   "line": f"{r['pathology']} at {r['shape']}: {r['status']}: {why[:200]}"})
    ran = own["pathology"].value_counts()
    unstated = [{"pathology": p, "shapes": at, "of": int(ran[p])} for p, at in sorted(unstated.items())]
    return {"headroom": headroom, "carries": carries, "free": free, "missed": missed, "unstated": unstated,
            "combined": combined, "refuted": refuted, "tunables": tunables(ranked), "not_applicable": not_applicable,
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


def unstated_text(found) -> str:
    """The pathologies held to no range, in one line: those whose `expected` states none (a
    condition ablate cannot check, "close to 1x for a kernel whose ...") at every shape they ran
    at, by name; at some shapes, with those shapes (their count past three); and the
    combinations, whose yamls predict each pathology alone. "" where there are none."""
    parts = []
    for u in found.get("unstated", []):
        at = u["shapes"]
        parts.append(u["pathology"] if len(at) == u["of"] else
                     f"{u['pathology']} at {', '.join(at)}" if len(at) <= TOP else
                     f"{u['pathology']} at {len(at)} of its {u['of']} shapes")
    if n := found.get("combined"):
        parts.append(f"{n} combination{'s' if n > 1 else ''} (a yaml predicts its pathology alone)")
    return "No range stated, so none held to one: " + "; ".join(parts) if parts else ""


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
    if note := unstated_text(found):
        missed.append(f"  {note}")
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
