"""Static metrics of one built variant: what `mode=static` logs, read from the binary alone.

Metric names (docs/design.md), over the whole library:
- `regs`: the most registers per thread of any kernel instance;
- `smem_bytes`: the most shared memory per block (static from ptxas + dynamic from the
  variant info's `smem_bytes`) of any head dim;
- `spill_bytes`: spill stores + loads summed over every function;
- `threads_per_block`: the most of any head dim;
- `occupancy_blocks`, `occupancy_warps`: the least of any head dim (the worst instance);
- `sass.<class>`: instruction counts summed over every kernel instance (ablate.sass.CLASSES).
And per head dim D, over its kernel instances (causal and not): `dD.regs`,
`dD.smem_bytes`, `dD.spill_bytes`, `dD.threads_per_block`, `dD.occupancy_blocks`,
`dD.occupancy_warps` and `dD.sass.<class>`.

A kernel instance belongs to head dim D when D is the one head dim of the variant info among
the integer template arguments of its name (`attention_fwd_kernel<BaseTile<64>, true>`).
"""
import json
import re

from ablate import sass
from ablate.occupancy import occupancy

_TEMPLATE_INT = re.compile(r"(?<![\w.])(\d+)(?![\w.])")


def static_metrics(build_result, info_json=None, sass_report: dict | None = None) -> dict:
    """{metric: number} for a built variant (an ablate.build.BuildResult with status "built").

    `info_json` is the library's `ablate_variant_info()` (a dict or its JSON text; read with
    ctypes from the library when None, which needs no GPU). `sass_report` is
    `sass.read(build_result.lib)` when the caller already has it (to compare the SASS text
    with the base's); it is read here otherwise."""
    if build_result.status != "built":
        raise ValueError(f"variant {build_result.variant} has no library to analyse: "
                         f"{build_result.status} (log: {build_result.log_path})")
    info = _info(build_result.lib, info_json)
    report = sass_report if sass_report is not None else sass.read(build_result.lib)
    configs = {int(c["head_dim"]): c for c in info.get("configs", [])}
    if not configs:
        raise ValueError(f"variant {build_result.variant}: its info has no configs: {info}")
    resources = build_result.ptxas["kernels"]
    mix = report["kernels"]

    metrics: dict[str, float] = {}
    per_dim = {}
    for dim, config in sorted(configs.items()):
        kernels = [name for name in resources if head_dim_of(name, configs) == dim]
        if not kernels:  # names that say nothing of the head dim: judge by every instance
            kernels = list(resources)
        regs = max(resources[k]["registers"] for k in kernels)
        smem = int(config["smem_bytes"]) + max(resources[k]["smem_bytes"] for k in kernels)
        threads = int(config["threads"])
        occ = occupancy(build_result.arch, threads, regs, smem)
        per_dim[dim] = {
            "regs": regs,
            "smem_bytes": smem,
            "spill_bytes": sum(resources[k]["spill_store_bytes"] + resources[k]["spill_load_bytes"]
                               for k in kernels),
            "threads_per_block": threads,
            "occupancy_blocks": occ["blocks"],
            "occupancy_warps": occ["warps"],
        }
        for cls in sass.CLASSES:
            per_dim[dim][f"sass.{cls}"] = sum(mix[k][cls] for k in kernels if k in mix)

    metrics["regs"] = build_result.ptxas["max_registers"]
    metrics["smem_bytes"] = max(d["smem_bytes"] for d in per_dim.values())
    metrics["spill_bytes"] = build_result.ptxas["spill_bytes"]
    metrics["threads_per_block"] = max(d["threads_per_block"] for d in per_dim.values())
    metrics["occupancy_blocks"] = min(d["occupancy_blocks"] for d in per_dim.values())
    metrics["occupancy_warps"] = min(d["occupancy_warps"] for d in per_dim.values())
    metrics.update({f"sass.{cls}": n for cls, n in report["totals"].items()})
    for dim, values in per_dim.items():
        metrics.update({f"d{dim}.{name}": value for name, value in values.items()})
    return metrics


def head_dim_of(kernel_name: str, configs) -> int | None:
    """The head dim (a key of `configs`) among the integer template arguments of a demangled
    kernel name, or None when there is not exactly one."""
    signature = kernel_name.split("(", 1)[0]
    found = {int(n) for n in _TEMPLATE_INT.findall(signature)} & set(configs)
    return found.pop() if len(found) == 1 else None


def _info(lib, info_json) -> dict:
    if info_json is None:
        from ablate.kernel import Kernel

        return Kernel(lib).info()
    if isinstance(info_json, (str, bytes)):
        return json.loads(info_json)
    return dict(info_json)
