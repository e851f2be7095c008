"""Figures of a ranking: slowdown bars with their 95% intervals per shape, and a
pathology x shape heatmap. Input is rank.py's ranked table (one row per pathology and shape)."""
import matplotlib

matplotlib.use("Agg")  # files only: no display on a build or GPU box

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
import numpy as np  # noqa: E402
import seaborn as sns  # noqa: E402

PALETTE = {"yes": "tab:red", "no": "tab:gray", "n/a": "lightgray"}  # n/a: not logged
BEATEN = "tab:green"  # a variant significantly faster than the base: the base is beaten


def slowdown_bars(ranked, shape, path):
    """Horizontal bars of one shape's slowdowns, worst first, with their intervals. Bars start
    at 1 (no effect), so a speed-up points left; wide ranges (serial_grid can cost 30x) get a
    log axis."""
    d = ranked[ranked["shape"] == shape].sort_values("slowdown", ascending=False)
    y = np.arange(len(d))
    sns.set_theme(style="whitegrid")
    fig, ax = plt.subplots(figsize=(8, 1.5 + 0.45 * len(d)))
    # A significant speed-up is a finding about the base (ablate/report/findings.py): marked.
    beaten = (d["significant"] == "yes") & (d["slowdown"] < 1)
    bars = ax.barh(y, d["slowdown"] - 1, left=1,
                   color=[BEATEN if b else PALETTE[s] for s, b in zip(d["significant"], beaten)])
    for bar, b in zip(bars, beaten):
        if b:
            bar.set_hatch("//")
    for yi in y[beaten.to_numpy()]:
        ax.annotate("base beaten", (1.0, yi), xytext=(4, 0), textcoords="offset points",  # right of 1: empty
                    ha="left", va="center", fontsize=8, color=BEATEN)
    ax.errorbar(d["slowdown"], y, xerr=[d["slowdown"] - d["slowdown_lo"], d["slowdown_hi"] - d["slowdown"]],
                fmt="none", ecolor="black", capsize=3)
    ax.axvline(1.0, color="black", linewidth=1)
    if d["slowdown_hi"].max() / d["slowdown_lo"].min() > 10:
        ax.set_xscale("log")
    ax.set_yticks(y, d["pathology"])
    ax.invert_yaxis()  # worst on top
    ax.set_xlabel("slowdown against the base (95% interval over the job's replicates)")
    ax.set_title(f"Pathologies ranked by slowdown, shape {shape}")
    ax.legend(handles=[Patch(color=c, label=k) for k, c in PALETTE.items()]
              + [Patch(color=BEATEN, hatch="//", label="faster: base beaten")], title="significant",
              loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def slowdown_heatmap(ranked, shapes, path):
    """Pathology x shape grid of slowdowns; colour is log2 of the ratio (white = no effect),
    `ns` marks the cells that are not significant (interval within 1 +- bench.min_effect)."""
    values = ranked.pivot(index="pathology", columns="shape", values="slowdown")[shapes]
    sig = ranked.pivot(index="pathology", columns="shape", values="significant")[shapes]
    order = np.log(values).mean(axis=1).sort_values(ascending=False).index
    values, sig = values.loc[order], sig.loc[order]
    labels = values.map(lambda v: "" if np.isnan(v) else f"{v:.2f}")
    labels = labels.where(sig != "no", labels + " ns").where(sig != "n/a", labels + " ?")
    sns.set_theme(style="white")
    fig, ax = plt.subplots(figsize=(max(5.5, 2.5 + 1.3 * len(shapes)), 1.5 + 0.45 * len(values)))
    sns.heatmap(np.log2(values), annot=labels, fmt="", center=0, cmap="RdBu_r",
                cbar_kws={"label": "log2 slowdown"}, linewidths=0.5, ax=ax)
    ax.set_xlabel("shape")
    ax.set_ylabel("")
    ax.set_title("Slowdown against the base\n(ns: not significant, the 95% interval lies within 1 ± bench.min_effect)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def interaction_heatmap(pairs, same_seam, shape, min_effect, path):
    """Pathology x pathology grid of one shape's interactions: colour is log2 I (red: the two
    compound, blue: they overlap), `ns` marks those whose interval lies within 1 ± min_effect,
    `same seam` the pairs that cannot be combined, blank the diagonal and the pairs not measured."""
    import pandas as pd

    names = sorted({r["a"] for r in pairs} | {r["b"] for r in pairs} | {n for p in same_seam for n in p})
    values = pd.DataFrame(np.nan, index=names, columns=names)
    labels = pd.DataFrame("", index=names, columns=names)
    for r in pairs:
        for a, b in ((r["a"], r["b"]), (r["b"], r["a"])):
            values.loc[a, b] = np.log2(r["I"])
            labels.loc[a, b] = f"{r['I']:.2f}" + ("" if r["significant"] else " ns")
    sns.set_theme(style="white")
    fig, ax = plt.subplots(figsize=(2.5 + 0.95 * len(names), 1.8 + 0.75 * len(names)))
    sns.heatmap(values, annot=labels, fmt="", center=0, cmap="RdBu_r", cbar_kws={"label": "log2 I"},
                linewidths=0.5, annot_kws={"fontsize": 8}, ax=ax)
    for a, b in same_seam:  # empty cells get no annotation from seaborn: written here
        for row, col in ((names.index(a), names.index(b)), (names.index(b), names.index(a))):
            ax.text(col + 0.5, row + 0.5, "same\nseam", ha="center", va="center", fontsize=8, color="gray")
    ax.set_title(f"Interactions at {shape}: I = r_ab / (r_a r_b)\n(> 1 compound, < 1 overlap; "
                 f"ns: the 95% interval lies within 1 ± {min_effect:g})")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def markdown(df):
    """A GitHub markdown table (pandas' to_markdown needs the tabulate package)."""
    cell = lambda v: str(v).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    lines = ["| " + " | ".join(map(cell, df.columns)) + " |", "|" + " --- |" * len(df.columns)]
    lines += ["| " + " | ".join(map(cell, row)) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)
