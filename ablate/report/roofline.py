"""Where the base and each variant stand against the GPU's ceilings, from profiled jobs
(`bench.profile=true`): a roofline per shape and a speed-of-light table.

- Roofline: achieved TFLOP/s (the kernel's own work model, spec.flops, over the timed median:
  the job's `base_tflops` / `variant_tflops`) against arithmetic intensity, FLOPs per DRAM
  byte that ncu counted in one launch with the caches flushed (`ncu.<who>.dram__bytes.sum`),
  under the GPU's measured ceilings (`peak_gbps`: the copy; `peak_tflops`: the matrix product
  of the kernel's kind of work, spec.WORK, or FP32 FMA for a memory-bound kernel; the job's
  param `roof` names it; ablate/gpu/peaks.py). A pathology that moves a point left wastes DRAM bytes; down, time.
- Bandwidth, for a memory-bound kernel (spec.BOUND, the job's param `bound`), in place of
  the roofline, whose points would all crowd at an intensity near 1: achieved GB/s of the
  base and each variant (the fewest bytes the kernel must move, spec.bytes_moved, over the
  timed median: `base_gbps` / `variant_gbps`) against the measured copy ceiling
  (`peak_gbps`). Timed jobs suffice: nothing here needs the counters.
- Speed of light: percent of ncu's peak of the tensor pipe, DRAM, L2, shared memory and the
  issue slots (profile.SOL), per variant, base first.
Input is rank.py's ranked table (one row per job, metrics as columns).
"""
import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from ablate.gpu.peaks import WHAT  # noqa: E402
from ablate.gpu.profile import DRAM_BYTES, SOL  # noqa: E402


def _col(rows, name):
    return rows[name] if name in rows else pd.Series(np.nan, index=rows.index)


def points(ranked, shape):
    """[(label, intensity FLOP/byte, TFLOP/s)] of the base (once: every job of a shape times
    the same base) and every variant of a shape that was profiled and does floating-point work."""
    out = []
    for _, r in ranked[ranked["shape"] == shape].iterrows():
        for who in ("base", "variant"):
            tflops, us, dram = (r.get(k, np.nan) for k in (f"{who}_tflops", f"{who}_us", f"ncu.{who}.{DRAM_BYTES}"))
            if not all(pd.notna(v) for v in (tflops, us, dram)) or dram <= 0:
                continue
            label = "base" if who == "base" else r["pathology"]
            if label == "none" or any(p[0] == label for p in out):
                continue
            out.append((label, tflops * 1e12 * us * 1e-6 / dram, tflops))
    return out


def figure(ranked, shape, path):
    """The roofline of one shape; False when no job of it has what it needs."""
    pts = points(ranked, shape)
    d = ranked[ranked["shape"] == shape]
    peak_t, peak_g = _col(d, "peak_tflops").median(), _col(d, "peak_gbps").median()
    if not pts or not (np.isfinite(peak_t) and np.isfinite(peak_g)):
        return False
    xs, ridge = np.array([p[1] for p in pts]), peak_t * 1e3 / peak_g  # FLOP/byte where the roofs meet
    lo, hi = min(xs.min(), ridge) / 4, max(xs.max(), ridge) * 4
    x = np.geomspace(lo, hi, 200)
    fig, ax = plt.subplots(figsize=(8, 5.5))
    roofs = _col(d, "roof").dropna()
    roof = roofs.iloc[0] if len(roofs) else "fp16_tensor"  # jobs logged before the kinds of work
    ax.plot(x, np.minimum(peak_t, x * peak_g / 1e3), color="black", linewidth=1.5,  # TB/s x FLOP/B
            label=f"measured ceilings: {peak_g:.0f} GB/s copy, {peak_t:.0f} TFLOP/s {WHAT.get(roof, roof)}")
    for label, ai, tf in pts:
        base = label == "base"
        ax.scatter([ai], [tf], marker="*" if base else "o", s=160 if base else 40,
                   color="black" if base else "tab:red", zorder=3)
        ax.annotate(label, (ai, tf), textcoords="offset points", xytext=(5, 4), fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOPs of the work model per DRAM byte, ncu)")
    ax.set_ylabel("achieved TFLOP/s (timed)")
    ax.set_title(f"Roofline, shape {shape}: the base and each variant")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def memory_bound(ranked, shape) -> bool:
    """Whether the jobs of `shape` are of a memory-bound kernel (their param `bound`)."""
    bound = _col(ranked[ranked["shape"] == shape], "bound").dropna()
    return bool(len(bound)) and (bound == "memory").all()


def bandwidth(ranked, shape):
    """[(label, GB/s)] of the base (the median over the shape's jobs, each of which timed it)
    and of every timed variant of the shape, fastest first."""
    d = ranked[ranked["shape"] == shape]
    base = _col(d, "base_gbps").dropna()
    out = [("base", float(base.median()))] if len(base) else []
    out += [(r["pathology"], float(r["variant_gbps"])) for _, r in d.iterrows()
            if r["pathology"] != "none" and pd.notna(r.get("variant_gbps", np.nan))]
    return sorted(out, key=lambda p: -p[1])


def bandwidth_figure(ranked, shape, path):
    """Achieved GB/s per variant of one shape against the measured copy ceiling; False when
    the kernel is not memory-bound or nothing of the shape was timed."""
    bars = bandwidth(ranked, shape) if memory_bound(ranked, shape) else []
    ceiling = _col(ranked[ranked["shape"] == shape], "peak_gbps").median()
    if not bars or not np.isfinite(ceiling):
        return False
    y = np.arange(len(bars))
    fig, ax = plt.subplots(figsize=(8, 1.5 + 0.45 * len(bars)))
    ax.barh(y, [g for _, g in bars], color=["black" if n == "base" else "tab:red" for n, _ in bars])
    ax.axvline(ceiling, color="black", linestyle="--", linewidth=1.2,
               label=f"measured copy ceiling: {ceiling:.0f} GB/s")
    for i, (_, g) in enumerate(bars):
        ax.annotate(f"{g:.0f} GB/s ({100 * g / ceiling:.0f}%)", (g, i), textcoords="offset points",
                    xytext=(4, -3), fontsize=8)
    ax.set_yticks(y, [n for n, _ in bars])
    ax.invert_yaxis()  # fastest on top
    ax.set_xlim(0, max(ceiling, max(g for _, g in bars)) * 1.25)
    ax.set_xlabel("achieved GB/s (the bytes the kernel must move, over the timed median)")
    ax.set_title(f"Bandwidth, shape {shape}: the base and each variant")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def sol_table(ranked):
    """Percent of ncu's peak per unit, per shape: the base first, then each variant; None
    when nothing was profiled."""
    rows = []
    for shape in dict.fromkeys(ranked["shape"]):
        d = ranked[ranked["shape"] == shape]
        if f"ncu.base.{SOL['DRAM']}" not in d or d[f"ncu.base.{SOL['DRAM']}"].isna().all():
            continue
        first = d[d[f"ncu.base.{SOL['DRAM']}"].notna()].iloc[0]
        rows.append({"pathology": "base", "shape": shape,
                     **{unit: first.get(f"ncu.base.{m}", np.nan) for unit, m in SOL.items()}})
        for _, r in d.iterrows():
            if r["pathology"] != "none" and pd.notna(r.get(f"ncu.variant.{SOL['DRAM']}")):
                rows.append({"pathology": r["pathology"], "shape": shape,
                             **{unit: r.get(f"ncu.variant.{m}", np.nan) for unit, m in SOL.items()}})
    if not rows:
        return None
    table = pd.DataFrame(rows)
    for unit in SOL:
        table[unit] = table[unit].map(lambda v: "-" if pd.isna(v) else f"{v:.1f}%")
    return table
