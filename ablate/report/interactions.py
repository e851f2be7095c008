"""Interactions between pathologies: which optimizations carry the speed together.

One-at-a-time ablation measures r_a, the slowdown with optimization a removed. Two removed
together can cost more than the product (they compound) or less (they overlap: removing one
hides the other). The sweep that measures it is designed in ablate/sweep/design.py; this
module reads it back:

- **Estimates** (`stats.combine`, `interaction`): every quantity is a sum of the jobs' log
  slowdowns, log I(a,b) = log r_ab - log r_a - log r_b, and each job's log slowdown is the
  mean of its replicates' log ratios (ablate/gpu/stats.py). The jobs are independent runs, so the
  variance of the sum is the sum of the variances, and its interval Student's t with
  Welch-Satterthwaite degrees of freedom: the same two-stage estimate as a job's own
  interval, which holds across runs where a bootstrap over one run's samples does not
  (docs/design.md, "Interactions").
- **Shapley** (`shapley_exact`, `shapley_sampled`, `shapley_order2`): attribution of the
  total log slowdown of "everything off" to each optimization. Exact needs the game on all
  2^n coalitions, sampled needs n coalitions per permutation; a sweep times the coalitions of
  size 0, 1, 2, n-1 and n only, so `make rank` gives the exact Shapley values of the game
  truncated to order 2 (its Harsanyi dividends from the singles and pairs), with the residual
  of the higher orders, v(N) minus their sum, reported beside them.
- **Report** (`report`): the heatmap of log2 I per shape, the significant interactions in
  words, the inversion table; csv and markdown beside the ranking, a summary run in MLflow.
"""
import itertools
import json
import math

import numpy as np

from ablate.gpu.stats import combine, replicate_ratios
from ablate.sweep.design import pairs_of

BASE = "none"


def replicate_logs(samples_json):
    """A job's replicate log ratios, log(median variant / median base) of each replicate, from
    its samples.json artifact (ablate/gpu/measure.py: {"replicates": [{candidate: samples}]})."""
    reps = json.loads(samples_json)["replicates"] if isinstance(samples_json, str) else samples_json["replicates"]
    return np.log(replicate_ratios([r["base"] for r in reps], [r["variant"] for r in reps]))


def interaction(logs_ab, logs_a, logs_b, min_effect=0.0, level=0.95):
    """I(a,b) = r_ab / (r_a r_b) with its interval (`combine`): > 1 the two compound, < 1 they
    overlap."""
    return combine([(1, logs_ab), (-1, logs_a), (-1, logs_b)], min_effect, level)


# ---- Shapley ------------------------------------------------------------------------------

def shapley_exact(players, value):
    """Exact Shapley values of the game `value(frozenset) -> float` on `players` (all 2^n
    coalitions are asked for): phi_i = sum over S not holding i of
    |S|! (n-|S|-1)! / n! (v(S + i) - v(S))."""
    players = list(players)
    n = len(players)
    cache = {}

    def v(s):
        if s not in cache:
            cache[s] = float(value(s))
        return cache[s]

    phi = {}
    for i in players:
        others = [p for p in players if p != i]
        total = 0.0
        for k in range(n):
            w = math.factorial(k) * math.factorial(n - k - 1) / math.factorial(n)
            for s in itertools.combinations(others, k):
                s = frozenset(s)
                total += w * (v(s | {i}) - v(s))
        phi[i] = total
    return phi


def shapley_sampled(players, value, permutations, rng=None):
    """Shapley values estimated from `permutations` random orders of the players (each costs n
    coalitions): the mean marginal contribution of each player where it joins, with the
    standard error of that mean. Returns {player: (estimate, standard error)}."""
    players = list(players)
    rng = np.random.default_rng(rng)
    if permutations < 2:
        raise ValueError(f"permutations must be at least 2, got {permutations}")
    cache = {}

    def v(s):
        if s not in cache:
            cache[s] = float(value(s))
        return cache[s]

    marginals = {p: [] for p in players}
    for _ in range(permutations):
        s = frozenset()
        for idx in rng.permutation(len(players)):
            p = players[idx]
            marginals[p].append(v(s | {p}) - v(s))
            s = s | {p}
    return {p: (float(np.mean(m)), float(np.std(m, ddof=1) / math.sqrt(len(m)))) for p, m in marginals.items()}


def harsanyi(players, value, order=None):
    """Harsanyi dividends (Moebius coefficients) m(S) = sum over T in S of (-1)^(|S|-|T|) v(T),
    for the coalitions up to `order` players (all when None)."""
    players = sorted(players)
    top = len(players) if order is None else order
    return {frozenset(s): sum((-1) ** (len(s) - k) * value(frozenset(t))
                              for k in range(len(s) + 1) for t in itertools.combinations(s, k))
            for size in range(1, top + 1) for s in itertools.combinations(players, size)}


def shapley_order2(singles, pair_values):
    """Exact Shapley values of the game truncated to order 2, and its dividends: from v({i})
    (`singles`) and v({i,j}) (`pair_values`, keyed by frozenset) alone. m(i) = v(i),
    m(ij) = v(ij) - v(i) - v(j) (log I), phi_i = m(i) + 1/2 sum_j m(ij). Each phi_i is a
    linear combination of the measured v's: returned as {player: {coalition: coefficient}},
    so that its interval can be taken over the jobs (`combine`)."""
    players = sorted(singles)
    coef = {}
    for i in players:
        c = {frozenset([i]): 1.0}
        for j in players:
            if j == i:
                continue
            ij = frozenset([i, j])
            if ij not in pair_values:
                raise ValueError(f"the pair {i} + {j} was not measured: the order-2 game needs every pair")
            c[ij] = c.get(ij, 0.0) + 0.5
            c[frozenset([i])] -= 0.5
            c[frozenset([j])] = c.get(frozenset([j]), 0.0) - 0.5
        coef[i] = c
    return coef


def evaluate(coefficients, values):
    """sum c_S v(S) of one linear combination of coalition values."""
    return sum(c * values[s] for s, c in coefficients.items())


def analyse(jobs, logs, seams, min_effect):
    """The interactions of one shape. `jobs`: {variant: run_id} (variant = tuple of names),
    `logs`: {run_id: replicate log ratios}, `seams`: {name: seam}. Returns a dict of
    `pairs` (rows: a, b, r_a, r_b, r_ab, product, I, lo, hi, df, significant), `same_seam`
    (the pairs never built), `inversion` (rows per optimization, or None when the sweep has
    none) and `shapley` (the order-2 game's values and residual, or None)."""
    have = {v: logs[r] for v, r in jobs.items() if r in logs}
    single = {v[0]: have[v] for v in have if len(v) == 1}
    rows = []
    combinable, same = pairs_of({n: seams[n] for n in single if n in seams})
    for a, b in combinable:
        if (a, b) not in have:
            continue
        i = interaction(have[(a, b)], single[a], single[b], min_effect)
        r_a, r_b, r_ab = (math.exp(np.mean(x)) for x in (single[a], single[b], have[(a, b)]))
        rows.append({"a": a, "b": b, "r_a": r_a, "r_b": r_b, "r_ab": r_ab, "product": r_a * r_b,
                     "I": i["value"], "lo": i["lo"], "hi": i["hi"], "df": i["df"], "significant": i["significant"]})
    out = {"pairs": rows, "same_seam": same, "inversion": None, "shapley": None}

    full = max((v for v in have if len(v) >= 3 and len({seams.get(n) for n in v}) == len(v)), key=len, default=None)
    if full is None:
        return out
    total = combine([(1, have[full])], min_effect)
    inv = []
    for name in full:
        rest = tuple(n for n in full if n != name)
        row = {"optimization": name, "seam": seams.get(name, "?")}
        if name in single:
            alone = combine([(1, single[name])], min_effect)
            row.update(missing=alone["value"], missing_lo=alone["lo"], missing_hi=alone["hi"])
        if rest in have:
            back = combine([(1, have[full]), (-1, have[rest])], min_effect)
            row.update(present=back["value"], present_lo=back["lo"], present_hi=back["hi"])
        inv.append(row)
    out["inversion"] = {"full": full, "total": total, "rows": inv}

    # Shapley of log slowdown on the players of `full`: the game truncated to order 2.
    values = {frozenset([n]): single[n] for n in full if n in single}
    values.update({frozenset(p): have[p] for p in itertools.combinations(full, 2) if p in have})
    try:
        coef = shapley_order2({n: None for n in full}, {s: None for s in values if len(s) == 2})
    except ValueError as e:
        out["shapley"] = {"error": str(e)}
        return out
    if any(s not in values for c in coef.values() for s in c):
        out["shapley"] = {"error": "a single of the inversion's set was not measured"}
        return out
    phi = {n: combine([(c, values[s]) for s, c in coef[n].items() if c != 0], min_effect) for n in full}
    # The higher orders' share: v(N) - sum_i phi_i = v(N) - sum_pairs v(ij) + (n - 2) sum_i v(i).
    n = len(full)
    residual = combine([(1, have[full])] + [(-1, values[s]) for s in values if len(s) == 2]
                       + [(n - 2, values[s]) for s in values if len(s) == 1], min_effect)
    out["shapley"] = {"phi": phi, "residual": residual}
    return out


# ---- the report ---------------------------------------------------------------------------

SHAPLEY_METHOD = ("Shapley values of log slowdown over the inversion's pathologies, exact for the game "
                  "truncated to order 2 (Harsanyi dividends of the measured singles and pairs: "
                  "phi_i = log r_i + 1/2 sum_j log I_ij); the residual is what the orders >= 3 add to "
                  "everything off, which the sweep does not resolve")


def _interval(r, digits=3):
    return f"{r['value']:.{digits}f}x [{r['lo']:.{digits}f}, {r['hi']:.{digits}f}]"


def words(shape, row):
    verb = "compound" if row["I"] > 1 else "overlap"
    return (f"{shape}: {row['a']} and {row['b']} {verb}: together {row['r_ab']:.2f}x, the product predicts "
            f"{row['product']:.2f}x (I = {row['I']:.3f} [{row['lo']:.3f}, {row['hi']:.3f}])")


def interaction_jobs(ranked):
    """Whether a ranked sweep holds interactions: a job of two pathologies or more whose
    pathologies were each timed alone on the same shape."""
    for shape, group in ranked.groupby("shape"):
        names = set(group["pathology"])
        if any("+" in v and all(n in names for n in v.split("+")) for v in names):
            return True
    return False


def report(ranked, out, params, logs):
    """Interactions, inversion and Shapley of a ranked sweep (rank.ranking's table), or None
    when it has no pairs. `params`: {run_id: {pathologies, seams, min_effect}}, `logs`:
    {run_id: replicate log ratios}, as rank reads them from the store (the only reader).
    Returns (text sections, markdown sections, files written, results per shape) and writes
    interactions.csv, inversion.csv, interactions.md and plots/interactions_<shape>.png into
    `out`; rank hands the results to tracking for the sweep's summary run."""
    import pandas as pd

    from ablate.report import plots

    if ranked.empty or not interaction_jobs(ranked):
        return None
    seams, margins = {}, set()
    for run_id, p in params.items():
        names, where = (p["pathologies"] or "").split(","), (p["seams"] or "").split(",")
        if len(names) == len(where):
            seams.update({n: s for n, s in zip(names, where) if n != BASE and s != "-"})
        if p["min_effect"] not in (None, "null", "None"):
            margins.add(float(p["min_effect"]))
    if len(margins) > 1:
        raise ValueError(f"the sweep's jobs were judged with different bench.min_effect: {sorted(margins)}")
    min_effect = margins.pop() if margins else _default_min_effect()
    missing = [r for r in ranked["run_id"] if r not in logs]

    text, md, pair_rows, inv_rows, results = [], [], [], [], {}
    plot_dir = out / "plots"
    plot_dir.mkdir(parents=True, exist_ok=True)
    for old in plot_dir.glob("interactions_*.png"):
        old.unlink()
    written = []
    for shape in dict.fromkeys(ranked["shape"]):
        group = ranked[ranked["shape"] == shape]
        jobs = {tuple(v.split("+")) if v != BASE else (): r for v, r in zip(group["pathology"], group["run_id"])}
        res = analyse(jobs, logs, seams, min_effect)
        results[shape] = res
        if not res["pairs"]:
            continue
        for row in res["pairs"]:
            pair_rows.append({"shape": shape, **row, "seam_a": seams.get(row["a"]), "seam_b": seams.get(row["b"]),
                              "verdict": ("compound" if row["I"] > 1 else "overlap") if row["significant"] else "ns"})
        sig = sorted((r for r in res["pairs"] if r["significant"]), key=lambda r: -abs(math.log(r["I"])))
        lead = (f"Interactions at {shape} (I = r_ab / (r_a r_b); 95% interval over the three jobs' replicates, "
                f"Welch-Satterthwaite t; significant = beyond 1 +- {min_effect:g}): {len(sig)} of "
                f"{len(res['pairs'])} pairs significant"
                + ("; not combinable (same seam), never built: "
                   + ", ".join(f"{a} + {b}" for a, b in res["same_seam"]) if res["same_seam"] else ""))
        listed = "\n".join("- " + words(shape, r) for r in sig)
        text.append(lead + ("\n" + listed if sig else ""))
        md.append(f"### Interactions at {shape}\n\n{lead}\n\n" + (listed or "No pair interacts beyond the margin."))
        path = plot_dir / f"interactions_{shape}.png"
        plots.interaction_heatmap(res["pairs"], res["same_seam"], shape, min_effect, path)
        written.append(path)
        inv = res["inversion"]
        if inv is None:
            continue
        table = pd.DataFrame([{
            "optimization (its pathology)": r["optimization"], "seam": r["seam"],
            "slowdown when only it is missing": _interval({"value": r["missing"], "lo": r["missing_lo"],
                                                           "hi": r["missing_hi"]}) if "missing" in r else "-",
            "speedup when only it is present": _interval({"value": r["present"], "lo": r["present_lo"],
                                                          "hi": r["present_hi"]}) if "present" in r else "-",
            **_shapley_cells(res["shapley"], r["optimization"]),
        } for r in inv["rows"]])
        for r in inv["rows"]:
            inv_rows.append({"shape": shape, **r, **{f"shapley_{k}": v for k, v in
                                                     _shapley_numbers(res["shapley"], r["optimization"]).items()}})
        head = (f"Inversion at {shape}: everything off ({' + '.join(inv['full'])}) is {_interval(inv['total'], 2)} "
                "the base's time; each optimization added back alone, beside its slowdown when it alone is "
                "missing, and its Shapley share of the total:")
        tail = _shapley_tail(res["shapley"], inv["total"])
        text += [head, table.to_string(index=False), tail]
        md += [f"### Inversion at {shape}\n\n{head}\n\n" + _markdown(table) + f"\n\n{tail}"]
    if missing:
        text.append(f"{len(missing)} timed jobs have no samples.json to read their replicates from; "
                    "the pairs that need them are left out")

    pd.DataFrame(pair_rows).to_csv(out / "interactions.csv", index=False)
    pd.DataFrame(inv_rows).to_csv(out / "inversion.csv", index=False)
    (out / "interactions.md").write_text("# ablate interactions\n\n" + "\n\n".join(md) + "\n")
    written = [out / "interactions.csv", out / "inversion.csv", out / "interactions.md", *written]
    return text, ["## Interactions", *md], written, results


def _default_min_effect():
    from omegaconf import OmegaConf

    from ablate.paths import CONF

    return float(OmegaConf.load(CONF / "bench" / "default.yaml").min_effect)


def _shapley_numbers(shapley, name):
    if not shapley or "phi" not in shapley:
        return {}
    p = shapley["phi"][name]
    return {"value": p["value"], "lo": p["lo"], "hi": p["hi"]}


def _shapley_cells(shapley, name):
    """The share of one optimization, and its part of the shares' log sum (the columns add to
    100%; the measured total differs from that sum by the residual)."""
    if not shapley or "phi" not in shapley:
        return {"Shapley share (order 2)": "-"}
    p = shapley["phi"][name]
    whole = sum(math.log(q["value"]) for q in shapley["phi"].values())
    return {"Shapley share (order 2)": _interval(p),
            "% of the shares (log)": f"{100 * math.log(p['value']) / whole:.1f}%" if whole else "-"}


def _shapley_tail(shapley, total):
    if not shapley:
        return "Shapley: not computed."
    if "phi" not in shapley:
        return f"Shapley: not computed ({shapley['error']})."
    res = shapley["residual"]
    prod = math.prod(p["value"] for p in shapley["phi"].values())
    return (f"Method: {SHAPLEY_METHOD}. The shares multiply to {prod:.2f}x; everything off measured "
            f"{total['value']:.2f}x; the residual of the orders >= 3 is {_interval(res)}"
            f" ({'significant' if res['significant'] else 'not significant'}).")


def _markdown(df):
    from ablate.report.plots import markdown

    return markdown(df)
