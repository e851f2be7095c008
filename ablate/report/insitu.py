"""What each pathology is worth to a model step, in the ranking (ablate/gpu/insitu.py: the step
metrics of jobs run with insitu.workload): the columns beside the kernel's slowdown, the
findings' section "Worth to the step" in plain words, and a figure of the kernel's slowdown
against the step's, with Amdahl's line through the kernel's share."""
import numpy as np
import pandas as pd

from ablate.gpu.stats import interval_text

STEP = ("step_slowdown", "step_slowdown_lo", "step_slowdown_hi", "step_share", "step_amdahl")


def has_steps(ranked) -> bool:
    return all(c in ranked for c in STEP) and ranked["step_slowdown"].notna().any()


def columns(ranked) -> pd.DataFrame:
    """The step's columns of the ranking: its slowdown with the interval, the kernel's share of
    the step, Amdahl's prediction from it, the calibrated 2x of the step ('-' where a job has none)."""
    def cell(r, fmt):
        return "-" if pd.isna(r.get("step_slowdown")) else fmt(r)

    rows = ranked.to_dict("records")
    return pd.DataFrame({
        "step [95% CI]": [cell(r, lambda r: interval_text(r["step_slowdown"], r["step_slowdown_lo"],
                                                          r["step_slowdown_hi"], "x", digits=4)) for r in rows],
        "share": [cell(r, lambda r: f"{100 * r['step_share']:.2f}%") for r in rows],
        "amdahl": [cell(r, lambda r: f"{r['step_amdahl']:.4f}x") for r in rows],
        "2x kernel: step": [cell(r, lambda r: f"{r['step_twice']:.4f}x" if pd.notna(r.get("step_twice")) else "-")
                            for r in rows],
    }, index=ranked.index)


def lines(ranked) -> list[str]:
    """The findings' section: each pathology's worth to the step, then the step's sensitivity
    to the kernel (the calibrated 2x), per shape and workload."""
    if not has_steps(ranked):
        return []
    out = ["Worth to the step (in situ: the variant inside the model's step, against the base there):"]
    d = ranked[ranked["step_slowdown"].notna()]
    workload = d["workload"] if "workload" in d else pd.Series(["the workload"] * len(d), index=d.index)
    for (shape, name), part in d.groupby([d["shape"], workload.fillna("the workload")], sort=False):
        for _, r in part[part["pathology"] == "none"].iterrows():
            if not r["step_slowdown_lo"] <= 1 <= r["step_slowdown_hi"]:  # the control: the base against itself
                step = interval_text(r["step_slowdown"], r["step_slowdown_lo"], r["step_slowdown_hi"], "x", digits=4)
                out.append(f"  - the control (none, the base against itself) at {shape} in {name}: the step {step}, "
                           f"its interval clear of 1: this step's candidates differ by about "
                           f"{100 * abs(r['step_slowdown'] - 1):.2f}% for a reason that is not the kernel (or by "
                           "chance, 1 in 20); read differences of that size here as noise" + _order_text(r))
        for _, r in part[part["pathology"] != "none"].sort_values("step_slowdown", ascending=False).iterrows():
            step = interval_text(r["step_slowdown"], r["step_slowdown_lo"], r["step_slowdown_hi"], "x", digits=4)
            verdict = str(r.get("step_vs_amdahl") or "")
            out.append(f"  - {r['pathology']} at {shape} in {name}: the kernel {r['slowdown']:.3f}x, the step {step}"
                       f"{' (significant)' if r.get('step_significant') == 1 else ' (not significant)'}; "
                       f"Amdahl predicts {r['step_amdahl']:.4f}x from the kernel's {100 * r['step_share']:.2f}% "
                       f"of the step: {verdict.split(':')[0] if verdict else 'n/a'}")
        if "step_order_effect" in part and (effect := part["step_order_effect"].median()) == effect \
                and abs(effect) >= ORDER_NOTE:
            out.append(f"  - {shape} in {name}: a round's last candidate ran {100 * effect:+.2f}% against its first "
                       "(the median over its jobs): the orders are counterbalanced, so this cancels in each slowdown "
                       "but widens its interval")
        twice = part["step_twice"].dropna() if "step_twice" in part else pd.Series(dtype=float)
        if not twice.empty:
            t = float(np.median(twice))
            out.append(f"  - {shape} in {name}: the kernel twice over costs the step {t:.4f}x: a kernel 10% faster "
                       f"would buy about {10 * (t - 1):.2f}% of the step (share {100 * part['step_share'].median():.2f}%,"
                       f" {part['step_launches'].median():.0f} launches a step){_twice_check(part)}")
    if "step_not_measured" in ranked:
        for _, r in ranked[ranked["step_not_measured"].notna()].iterrows():
            out.append(f"  - {r['pathology']} at {r['shape']}: the kernel {r['slowdown']:.3f}x; not measured in the step: "
                       f"{r['step_not_measured']}")
    return out


ORDER_NOTE = 0.01  # an order effect past this (last against first of a round) is said in the findings


def _order_text(r) -> str:
    """The control's order effect, where the job recorded one (ablate/gpu/insitu.py, order_effect)."""
    effect = r.get("step_order_effect")
    if effect is None or pd.isna(effect):
        return ""
    return (f"; a round's last candidate ran {100 * effect:+.2f}% against its first (the job's "
            "step_samples.json has every round's order and times)")


ZOOM = 2.5  # past this kernel slowdown a second panel shows the pathologies at or below it on their own


def _twice_check(part) -> str:
    """Whether each job's calibrated 2x holds 1 + share (Amdahl for a kernel exactly 2x) in its
    interval: the planted 2x against the profiler's share. On the H200 (2026-12-02) a prefill's
    2x read below 1 + share in every job while each interval held it: the median says which way."""
    cols = {"step_twice_lo", "step_twice_hi", "step_amdahl_twice"}
    if not cols <= set(part):
        return ""
    p = part.dropna(subset=list(cols))
    if p.empty:
        return ""
    held = int(((p["step_twice_lo"] <= p["step_amdahl_twice"]) & (p["step_amdahl_twice"] <= p["step_twice_hi"])).sum())
    gap = float(np.median(p["step_twice"] - p["step_amdahl_twice"]))
    return (f"; the 2x holds 1 + share ({float(p['step_amdahl_twice'].median()):.4f}x) in {held} of {len(p)} jobs' "
            f"intervals, the median {100 * gap:+.2f}% from it")


def figure(ranked, shape, path):
    """The kernel's slowdown against the step's per pathology (95% intervals), with Amdahl's
    line 1 + share x (kernel - 1) through the jobs' median share and the calibrated 2x (the
    kernel twice over, measured in the step). Where some pathology passes ZOOM times (the H200's
    prefill, 2026-12-02: no_unroll 45x beside a dozen within 2x, piled up at the origin), a second
    panel shows those within ZOOM alone."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d = ranked[(ranked["shape"] == shape) & ranked["step_slowdown"].notna()]
    if d.empty:
        return None
    near = d[d["slowdown_hi"] <= ZOOM]
    panels = [d, near] if len(near) and len(near) < len(d) else [d]
    fig, axes = plt.subplots(1, len(panels), figsize=(7 * len(panels), 5), squeeze=False)
    share = float(d["step_share"].median())
    for ax, part in zip(axes[0], panels):
        _panel(ax, part, share)
    axes[0][0].set_title(f"What each pathology costs the step, shape {shape}")
    if len(panels) > 1:
        axes[0][1].set_title(f"those within {ZOOM}x in the kernel")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _panel(ax, d, share):
    ax.errorbar(d["slowdown"], d["step_slowdown"],
                xerr=[d["slowdown"] - d["slowdown_lo"], d["slowdown_hi"] - d["slowdown"]],
                yerr=[d["step_slowdown"] - d["step_slowdown_lo"], d["step_slowdown_hi"] - d["step_slowdown"]],
                fmt="o", capsize=3)
    for _, r in d.iterrows():
        ax.annotate(r["pathology"], (r["slowdown"], r["step_slowdown"]), xytext=(4, 4), textcoords="offset points",
                    fontsize=8)
    if {"step_twice", "step_twice_lo", "step_twice_hi"} <= set(d) and d["step_twice"].notna().any():
        t = d[d["step_twice"].notna()]  # the calibration: a kernel exactly 2x, measured in the step
        ax.errorbar([2.0] * len(t), t["step_twice"], yerr=[t["step_twice"] - t["step_twice_lo"],
                                                         t["step_twice_hi"] - t["step_twice"]],
                    fmt="s", color="gray", alpha=0.6, capsize=3, label="the kernel twice over (calibration)")
    k = np.linspace(min(1.0, d["slowdown_lo"].min()), max(2.0, d["slowdown_hi"].max()), 50)
    ax.plot(k, 1 + share * (k - 1), "--", color="gray", label=f"Amdahl: 1 + {100 * share:.2f}% x (kernel - 1)")
    ax.set_xlabel("kernel slowdown (95% interval)")
    ax.set_ylabel("step slowdown (95% interval)")
    ax.legend(loc="upper left")
