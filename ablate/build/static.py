"""Static metrics of one built variant: what `mode=static` logs, read from the binary alone.

Metric names (docs/design.md), over the whole library:
- `regs`: the most registers per thread of any kernel instance;
- `smem_bytes`: the most shared memory per block (static from ptxas + dynamic from the
  variant info's `smem_bytes`) of any config;
- `spill_bytes`: spill stores + loads summed over every function;
- `threads_per_block`: the most of any config;
- `occupancy_blocks`, `occupancy_warps`: the least of any config (the worst instance);
- `sass.<class>`: instruction counts summed over every kernel instance (ablate.build.sass.CLASSES).
And per config C of the variant info (its `name`, e.g. d64 or fp16_h8k), over
its kernel instances: `C.regs`, `C.smem_bytes`, `C.spill_bytes`, `C.threads_per_block`,
`C.occupancy_blocks`, `C.occupancy_warps` and `C.sass.<class>`.

Which compiled instance belongs to which config, the kernel's spec says (`config_of`, from
the demangled name); without it, a library of one config owns every instance.
"""
import json

from ablate.build import sass
from ablate.build.occupancy import occupancy


def static_metrics(build_result, spec, info_json=None, sass_report: dict | None = None) -> dict:
    """{metric: number} for a built variant (an ablate.build.compile.BuildResult with status "built")
    of the kernel whose spec is `spec`.

    `info_json` is the library's `ablate_variant_info()` (a dict or its JSON text; read with
    ctypes from the library when None, which needs no GPU). `sass_report` is
    `sass.read(build_result.lib)` when the caller already has it (to compare the SASS text
    with the base's); it is read here otherwise."""
    if build_result.status != "built":
        raise ValueError(f"variant {build_result.variant} has no library to analyse: "
                         f"{build_result.status} (log: {build_result.log_path})")
    info = _info(build_result.lib, info_json, spec)
    report = sass_report if sass_report is not None else sass.read(build_result.lib)
    configs = {str(c["name"]): c for c in info.get("configs", [])}
    if not configs:
        raise ValueError(f"variant {build_result.variant}: its info has no configs: {info}")
    resources = build_result.ptxas["kernels"]
    mix = report["kernels"]

    metrics: dict[str, float] = {}
    per_config = {}
    for key, config in configs.items():
        kernels = [name for name in resources if config_of(spec, name, info["configs"]) == key]
        if not kernels:  # names that say nothing of the config: judge by every instance
            kernels = list(resources)
        regs = max(resources[k]["registers"] for k in kernels)
        smem = int(config["smem_bytes"]) + max(resources[k]["smem_bytes"] for k in kernels)
        threads = int(config["threads"])
        occ = occupancy(build_result.arch, threads, regs, smem)
        per_config[key] = {
            "regs": regs,
            "smem_bytes": smem,
            "spill_bytes": sum(resources[k]["spill_store_bytes"] + resources[k]["spill_load_bytes"]
                               for k in kernels),
            "threads_per_block": threads,
            "occupancy_blocks": occ["blocks"],
            "occupancy_warps": occ["warps"],
        }
        for cls in sass.CLASSES:
            per_config[key][f"sass.{cls}"] = sum(mix[k][cls] for k in kernels if k in mix)

    metrics["regs"] = build_result.ptxas["max_registers"]
    metrics["smem_bytes"] = max(d["smem_bytes"] for d in per_config.values())
    metrics["spill_bytes"] = build_result.ptxas["spill_bytes"]
    metrics["threads_per_block"] = max(d["threads_per_block"] for d in per_config.values())
    metrics["occupancy_blocks"] = min(d["occupancy_blocks"] for d in per_config.values())
    metrics["occupancy_warps"] = min(d["occupancy_warps"] for d in per_config.values())
    metrics.update({f"sass.{cls}": n for cls, n in report["totals"].items()})
    for key, values in per_config.items():
        metrics.update({f"{key}.{name}": value for name, value in values.items()})
    return metrics


def config_of(spec, kernel_name: str, configs: list[dict]) -> str | None:
    """The config (by name) a compiled kernel instance belongs to: the spec's answer, or the
    only config when the spec does not say."""
    if hasattr(spec, "config_of"):
        return spec.config_of(kernel_name, configs)
    return str(configs[0]["name"]) if len(configs) == 1 else None


def launched(spec, kernel_name: str, shape: dict, configs: list[dict]) -> bool:
    """Whether a shape runs this compiled instance: the spec's answer (spec.launched), else
    whether it is the only one."""
    if hasattr(spec, "launched"):
        return bool(spec.launched(kernel_name, shape, configs))
    return len(configs) == 1


def _info(lib, info_json, spec) -> dict:
    if info_json is None:
        from ablate.build.library import variant_info

        return variant_info(lib, spec)
    if isinstance(info_json, (str, bytes)):
        return json.loads(info_json)
    return dict(info_json)
