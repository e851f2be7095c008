"""The README's figure: an actual sweep's slowdowns, drawn from the figures recorded in
docs/history/ (no GPU needed, nothing measured here).

The sweep: the attention kernel (kernels/attention, FlashAttention-2-style, FP16) at its default
shape s512 (B=4 H=8 S=512 D=64) on an NVIDIA H100 80GB HBM3, 2026-11-25, commit 04895af:

- ten jobs from `python -m ablate -m 'pathology=glob(*)' shape=s512` at 00:04 UTC, the "after"
  column of docs/history/package-restructured.md;
- the three pathologies issue 25 added, from `python -m ablate -m
  'pathology=none,no_smem_staging,divergent_branches,over_unroll' 'shape=s512,s4k'
  bench.profile=true` at 00:06 UTC, the same commit (docs/history/attention-new-pathologies.md;
  the 00:04 sweep read them 3.484x, 1.413x and 1.357x, its intervals not recorded).

The bars are drawn by ablate's own `make rank` figure (ablate.report.plots.slowdown_bars), the
findings worded by ablate's own reader (ablate.report.findings) against the predictions in
kernels/attention/conf/pathology/*.yaml. Run from the checkout:

    python tools/plot_recorded_sweep.py            # writes docs/img/attention-s512-h100.png, prints the findings
"""
import re
import sys
import tempfile
from pathlib import Path

import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ablate.report import findings, plots  # noqa: E402

plt = plots.plt  # matplotlib with the Agg backend, as plots set it

OUT = ROOT / "docs" / "img" / "attention-s512-h100.png"
CAPTION = ("attention (FlashAttention-2-style, FP16) at s512 on an NVIDIA H100 80GB HBM3, 2026-11-25, commit 04895af.\n"
           "Drawn by ablate's own rank figure from the figures recorded in docs/history/ (tools/plot_recorded_sweep.py).")
MIN_EFFECT = 0.01  # conf/bench/default.yaml: significant = the interval beyond 1 +- this

# pathology, slowdown, 95% interval low, high (variant time / base time), where it was recorded
RECORDED = [
    ("serial_grid", 24.007, 23.935, 24.079, "package-restructured.md"),
    ("scalar_loads", 3.879, 3.853, 3.905, "package-restructured.md"),
    ("no_smem_staging", 3.479, 3.465, 3.493, "attention-new-pathologies.md"),
    ("no_swizzle", 2.239, 2.228, 2.249, "package-restructured.md"),
    ("tiny_blocks", 2.166, 2.161, 2.172, "package-restructured.md"),
    ("divergent_branches", 1.414, 1.413, 1.416, "attention-new-pathologies.md"),
    ("over_unroll", 1.355, 1.353, 1.358, "attention-new-pathologies.md"),
    ("uncoalesced", 1.348, 1.343, 1.353, "package-restructured.md"),
    ("no_cp_async", 1.348, 1.345, 1.350, "package-restructured.md"),
    ("extra_syncthreads", 1.121, 1.119, 1.123, "package-restructured.md"),
    ("fp32_accum", 1.061, 1.060, 1.061, "package-restructured.md"),
    ("no_causal_skip", 1.000, 0.997, 1.004, "package-restructured.md"),
    ("none", 1.000, 0.999, 1.002, "package-restructured.md"),
]


def ranked_table():
    rows = []
    for name, value, lo, hi, source in RECORDED:
        text = (ROOT / "docs" / "history" / source).read_text()
        if not re.search(rf"{value:.3f}x?\**\s\[{lo:.3f}, {hi:.3f}\]", text):  # the figure must be the recorded one
            raise SystemExit(f"{name}: {value:.3f} [{lo:.3f}, {hi:.3f}] is not in docs/history/{source}")
        expected = ""
        path = ROOT / "kernels" / "attention" / "conf" / "pathology" / f"{name}.yaml"
        if path.exists():
            expected = yaml.safe_load(path.read_text())[name].get("expected", "")
        significant = "yes" if lo > 1 + MIN_EFFECT or hi < 1 - MIN_EFFECT else "no"
        rows.append({"pathology": name, "shape": "s512", "slowdown": value, "slowdown_lo": lo,
                     "slowdown_hi": hi, "significant": significant, "expected": expected})
    return pd.DataFrame(rows)


def main():
    ranked = ranked_table()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        bars = Path(tmp) / "bars.png"
        plots.slowdown_bars(ranked, "s512", bars)  # the figure make rank draws
        image = plt.imread(bars)
    height, width = image.shape[:2]
    fig = plt.figure(figsize=(width / 120, height / 120 + 0.55), dpi=120)  # the bars, and a caption under them
    ax = fig.add_axes([0, 0.55 / (height / 120 + 0.55), 1, 1 - 0.55 / (height / 120 + 0.55)])
    ax.imshow(image)
    ax.axis("off")
    fig.text(0.5, 0.02, CAPTION, ha="center", va="bottom", fontsize=8, wrap=True)
    fig.savefig(OUT, dpi=120)
    plt.close(fig)
    print(f"wrote {OUT.relative_to(ROOT)}")
    print(findings.text(findings.of(ranked)))


if __name__ == "__main__":
    main()
