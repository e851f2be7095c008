"""A job, worked out once: what one run of the app measures, made from its composed config
and handed on to every stage (build, static analysis, the GPU worker, the profiler, tracking).
No stage after this one reads the kernel's folder or turns a pathology config into a variant
again: they read the Job.

Bad input is a ValueError whose message names the problem (the app prints it as
`ablate: ...`), raised before anything is built.

The GPU half runs in other processes (the sweep's worker, ncu's driver, compute-sanitizer's
driver), which receive the job as JSON (`wire`) and read it back with `from_wire`: the one
place where a kernel is found again from its folder's path.
"""
from dataclasses import dataclass, field, replace
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ablate.job import candidates, plugins
from ablate.job.variant import BASE, Variant, variant_from_cfg

MODES = ("gpu", "static")


@dataclass(frozen=True)
class Job:
    plugin: plugins.Plugin
    shape: dict  # the shape as the kernel's spec validated it
    shape_name: str  # its config's name (s512), or its fields in words outside Hydra
    variant: Variant
    base: Variant  # every job is built, checked and timed against it
    peers: tuple[str, ...]  # the peers it times beside the kernel
    bench: dict  # how it checks and times (conf/bench), plain data
    mode: str  # as asked: gpu or static (gpu falls back to static without a GPU)
    kernel_counters: tuple[str, ...]  # the kernel's default ncu metrics (kernel.counters)
    cfg: DictConfig  # the composed config, kept for the record (config.yaml) and its settings
    # {pathology of the variant: why the kernel says it does not apply}: a generic one it opts out
    # of (kernel.not_applicable), or one its spec says has no meaning at this shape (spec.not_applicable)
    opted_out: dict = None
    # A combined variant's rests: {pathology: the variant without it}, against which static
    # mode checks that pathology's fingerprint (ablate/job/fingerprint.py); {} for one pathology.
    rests: dict = field(default_factory=dict)
    # An autotuned Triton kernel's base at this shape (ablate/build/triton_autotune.py): the
    # autotuner's record ({meta, sources, timings, gpu, ...}) on a GPU; {} otherwise.
    tuned: dict = field(default_factory=dict)
    # Why the job cannot run, found while it was worked out (the library's autotuner failed at
    # its shape, naming the config): recorded as the job's failure, and the sweep goes on.
    failed: str | None = None
    # cfg.insitu, checked, as plain data where it names a workload (ablate/gpu/insitu.py); None else
    insitu: dict | None = None
    # The configuration its base runs, of a kernel that declares CANDIDATES (ablate/job/candidates.py):
    # the spec's DEFAULT_CANDIDATE, or the fastest timed at the shape on a GPU (with_tuned); None else.
    candidate: str | None = None

    @property
    def kernel(self) -> str:
        return self.plugin.name

    @property
    def build(self):
        """cfg.build: dir, arch, nvcc, flags, jobs."""
        return self.cfg.build

    @property
    def peaks_dir(self) -> Path:
        """Where the GPU's measured ceilings are cached: cfg.peaks_dir, else beside build.dir
        (relative paths relative to the project root, as build.dir's)."""
        from ablate.paths import ROOT

        given = OmegaConf.select(self.cfg, "peaks_dir", default=None)
        if given:
            return (ROOT / Path(str(given)).expanduser()).resolve()
        if self.build.get("dir") is None:  # the shared build cache: the ceilings stay this checkout's
            return ROOT / "runs" / "peaks"
        return (ROOT / Path(str(self.build.dir)).expanduser()).resolve().parent / "peaks"

    @property
    def experiment(self) -> str:
        """The MLflow experiment: kernel.experiment, else the kernel's name."""
        return str(OmegaConf.select(self.cfg, "kernel.experiment", default=None) or self.kernel)

    @property
    def variants(self) -> list[Variant]:
        """What the job builds: the base, and the variant when it is another."""
        return [self.base] if self.variant.is_base else [self.base, self.variant]

    def wire(self, base_lib, variant_lib) -> dict:
        """What a process of the GPU half needs of the job, as JSON-able data."""
        wire = {"kernel_dir": str(self.plugin.dir), "base_so": str(base_lib), "variant_so": str(variant_lib),
                "shape": self.shape, "peers": list(self.peers), "launches": self.variant.launches,
                "sm_fraction": self.variant.sm_fraction, "bench": self.bench, "peaks_dir": str(self.peaks_dir)}
        if self.insitu is not None:
            wire["insitu"] = self.insitu
        return wire


def make_job(cfg, shape_name=None) -> Job:
    """The Job of a composed config; ValueError naming the problem. `shape_name`: the shape's
    config name when the caller knows it (Hydra's choice), else `shape.name` or its fields."""
    from ablate.job import counters
    from ablate.job.bench import peer_names, validate_bench, validate_profile

    if cfg.mode not in MODES:
        raise ValueError(f"mode must be one of {list(MODES)}, got {cfg.mode!r}")
    keep_worker_s(cfg)
    insitu = insitu_of(cfg)
    plugin = plugins.of(cfg)
    shape = shape_of(plugin, cfg.shape)
    validate_bench(cfg.bench)
    validate_profile(cfg.bench)
    peers = peer_names(cfg.bench, plugin.spec, plugin.name)
    kernel_counters = list(OmegaConf.select(cfg, "kernel.counters", default=None) or [])
    counters.check_names(kernel_counters, "kernel.counters")
    selected = OmegaConf.to_container(cfg.pathology, resolve=True)
    configs = {"": selected, BASE: {BASE: None}}
    named = [n for n in selected if n != BASE] if isinstance(selected, dict) else []
    if len(named) > 1:  # each pathology of a combination is checked against the others together
        configs.update({n: {k: v for k, v in selected.items() if k != n} for n in named})
    made = {key: variant_from_cfg(c, plugin.dir) for key, c in configs.items()}
    variant, base = made.pop(""), made.pop(BASE)
    check_language(plugin, variant)
    # every variant of the job on the spec's base at this shape (an autotuned kernel's: with_tuned)
    if tuned := shape_base(plugin, shape):
        variant, base = replace(variant, base_meta=tuned), replace(base, base_meta=tuned)
        made = {k: replace(v, base_meta=tuned) for k, v in made.items()}
    candidate = None
    if getattr(plugin.spec, "CANDIDATE_SETS", None):  # built on the one configuration its shape runs
        candidate = candidates.default(plugin.spec, shape)
        variant, base, made = _on_candidate(plugin.spec, candidate, variant, base, made)
    for name in variant.pathologies:
        counters.check_when(variant.specs[name].get("counters"), list(shape), f"pathology '{name}'")
    name = shape_name or OmegaConf.select(cfg, "shape.name", default=None) or plugin.label(shape)
    return Job(plugin=plugin, shape=shape, shape_name=str(name), variant=variant, base=base,
               peers=tuple(peers), bench=OmegaConf.to_container(cfg.bench, resolve=True), mode=str(cfg.mode),
               kernel_counters=tuple(kernel_counters), cfg=cfg, rests=made, insitu=insitu, candidate=candidate,
               opted_out=opted_out_of(cfg, plugin, variant, shape, candidate))


def opted_out_of(cfg, plugin, variant, shape, candidate=None) -> dict:
    """{pathology of the variant: why it does not apply}: a generic one the kernel's yaml opts out
    of (kernel.not_applicable), or one its spec says has no meaning at this shape, where its base
    runs `candidate`."""
    declared = not_applicable_of(cfg, plugin)
    return {**{p: why for p, why in declared.items() if p in variant.generic},
            **not_applicable_at(plugin, variant.pathologies, shape, candidate)}


def _on_candidate(spec, name, variant, base, rests):
    """(variant, base, rests) each built on candidate `name` of the spec's CANDIDATES."""
    return (candidates.on(variant, spec, name), candidates.on(base, spec, name),
            {k: candidates.on(v, spec, name) for k, v in rests.items()})


def autotuned(job) -> bool:
    """Whether the job's base is its Triton kernel's autotuner's pick: an autotuned function
    whose spec's META leaves a tuned key to it, timed on a GPU (mode=gpu)."""
    return (job.plugin.language == "triton" and getattr(job.plugin.spec, "META_FROM", None) == "autotune"
            and job.mode == "gpu")


def timed_candidates(job) -> bool:
    """Whether the job's base is the fastest of its kernel's CANDIDATES at its shape, timed on a
    GPU (mode=gpu; ablate/gpu/autotune.py)."""
    return bool(getattr(job.plugin.spec, "CANDIDATE_SETS", None)) and job.mode == "gpu"


def with_tuned(job, record=None, failed=None) -> Job:
    """The job on its tuned base (ablate/gpu/autotune.py), the record kept (`tuned`): the fastest of
    its kernel's CANDIDATES (every variant built on it, what does not apply there worked out again),
    or its autotuner's pick (every variant's base_meta the record's `meta` with the spec's META over
    it); or, where the tuning failed at the shape, the job marked `failed` with why (it builds
    nothing)."""
    if failed:
        return replace(job, failed=failed)
    if not record:
        return job
    if record.get("kind") == "candidates":  # the fastest of the spec's CANDIDATES at the shape
        name = record["candidate"]
        variant, base, rests = _on_candidate(job.plugin.spec, name, job.variant, job.base, job.rests)
        return replace(job, variant=variant, base=base, rests=rests, tuned=record, candidate=name,
                       opted_out=opted_out_of(job.cfg, job.plugin, variant, job.shape, name))
    meta = {**record["meta"], **job.plugin.spec.META_DECLARED}  # the spec's META wins
    return replace(job, variant=replace(job.variant, base_meta=meta), base=replace(job.base, base_meta=meta),
                   rests={k: replace(v, base_meta=meta) for k, v in job.rests.items()},
                   tuned={**record, "meta": meta})


def shape_base(plugin, shape) -> dict:
    """A Triton kernel's base META chosen by shape: its spec's `base_meta(shape)` (every key one
    of META's), in every mode; {} where the spec has none. ValueError naming spec.base_meta."""
    says = getattr(plugin.spec, "base_meta", None) if plugin.language == "triton" else None
    if says is None:
        return {}
    meta = says(shape)
    if not isinstance(meta, dict) or not meta:
        raise ValueError(f"kernel {plugin.name!r}: spec.base_meta(shape) must return the base's META at the shape "
                         f"(a non-empty dict), got {meta!r}")
    unknown = sorted(set(meta) - set(plugin.spec.META))
    if unknown:
        raise ValueError(f"kernel {plugin.name!r}: spec.base_meta(shape) gives {unknown}, which are not in its META")
    return {**plugin.spec.META, **meta}


INSITU_NUMBERS = {"steps_per_round": int, "min_rounds": int, "max_rounds": int, "precision": float,
                  "min_effect": float, "budget_s": float, "profile_steps": int, "ref_tolerance": float}


def insitu_of(cfg) -> dict | None:
    """cfg.insitu checked, as plain data, where it names a workload; None where it names none.
    ValueError naming the field: a workload that cannot be imported, options that are no
    mapping, a count or a bound that is no positive number."""
    given = OmegaConf.select(cfg, "insitu", default=None)
    if given is None or OmegaConf.select(cfg, "insitu.workload", default=None) is None:
        return None
    from ablate.job import workload

    insitu = OmegaConf.to_container(given, resolve=True)
    workload.load(insitu["workload"])
    if not isinstance(insitu.get("options") or {}, dict):
        raise ValueError(f"insitu.options must be a mapping of the workload's keyword arguments, "
                         f"got {insitu.get('options')!r}")
    for key, kind in INSITU_NUMBERS.items():
        value = insitu.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 \
                or (kind is int and value != int(value)):
            raise ValueError(f"insitu.{key} must be a positive {'integer' if kind is int else 'number'}, got {value!r}")
    if insitu["max_rounds"] < max(2, insitu["min_rounds"]):
        raise ValueError(f"insitu.max_rounds must be at least insitu.min_rounds and 2, got {insitu['max_rounds']!r}")
    return insitu


def keep_worker_s(cfg) -> float:
    """cfg.keep_worker_s: how long the GPU worker waits for the next run once idle
    (ablate/gpu/worker.py; 0 where a config predates it). ValueError naming it when it is not
    a number of seconds >= 0."""
    try:
        value = OmegaConf.select(cfg, "keep_worker_s", default=0)
    except Exception as e:  # ABLATE_KEEP_WORKER_S that does not resolve
        raise ValueError(f"keep_worker_s: {e}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"keep_worker_s must be a number of seconds >= 0 (0: the GPU worker ends with the run), "
                         f"got {value!r}")
    return float(value)


# What a pathology of each language may change (variant.BUILD_FIELDS): nvcc's inputs for a
# CUDA kernel, the meta-parameters for a Triton or CuTe DSL one; each may change the launch (sm_fraction).
LANGUAGE_FIELDS = {"cuda": ("macros", "header", "flags", "regs_cap", "transform"), "triton": ("meta",),
                   "cute": ("meta",)}


def check_language(plugin, variant) -> None:
    """ValueError naming the pathology and field when a pathology changes what its kernel's
    language does not have (meta: of a CUDA kernel; macros, a header, nvcc flags of a Triton or
    CuTe DSL one)."""
    for name, spec in variant.specs.items():
        for language, fields in LANGUAGE_FIELDS.items():
            if language == plugin.language:
                continue
            for key in fields:
                if key not in LANGUAGE_FIELDS[plugin.language] and spec.get(key) not in (None, {}, [], ""):
                    raise ValueError(f"pathology '{name}': {key} is for {language} kernels, and kernel "
                                     f"{plugin.name!r} is a {plugin.language} kernel")
        if plugin.language == "triton":  # a string or null is a CuTe DSL configuration field's, not a constexpr's
            for key, value in (spec.get("meta") or {}).items():
                if value is None or isinstance(value, str):
                    raise ValueError(f"pathology '{name}': meta.{key} must be a number, a bool or "
                                     f"{{fraction_of_base: F}} for a Triton kernel, got {value!r}")


def not_applicable_of(cfg, plugin) -> dict:
    """`kernel.not_applicable` of the kernel's yaml: {generic pathology: why it does not apply
    to this kernel}. Its jobs are `not_applicable`, with the reason, and nothing is built.
    ValueError for a name that is no generic pathology or a reason that is not a sentence."""
    declared = OmegaConf.select(cfg, "kernel.not_applicable", default=None) or {}
    declared = OmegaConf.to_container(declared, resolve=True) if not isinstance(declared, dict) else declared
    generic = {p.stem for p in (plugin.generic / "pathology").glob("*.yaml")}
    if not isinstance(declared, dict):
        raise ValueError(f"kernel {plugin.name!r}: kernel.not_applicable must map generic pathologies "
                         f"to the reason each does not apply, got {declared!r}")
    for name, why in declared.items():
        if name not in generic:
            raise ValueError(f"kernel {plugin.name!r}: kernel.not_applicable names {name!r}, which is no "
                             f"generic pathology (those of conf/generic/pathology: {', '.join(sorted(generic))})")
        if not isinstance(why, str) or not why.strip():
            raise ValueError(f"kernel {plugin.name!r}: kernel.not_applicable.{name} must say why")
    return {str(k): str(v).strip() for k, v in declared.items()}


def not_applicable_at(plugin, pathologies, shape, candidate=None) -> dict:
    """{pathology: why it does not apply at this shape}, as the kernel's spec says
    (spec.not_applicable(pathology, shape[, candidate]): a reason, or None where it applies), e.g.
    a pathology of code that the configuration the shape runs does not have. ValueError for a
    reason that is not a sentence."""
    says = getattr(plugin.spec, "not_applicable", None)
    out = {}
    for name in pathologies if says else ():
        why = candidates.not_applicable(plugin.spec, name, shape, candidate)
        if why is None:
            continue
        if not isinstance(why, str) or not why.strip():
            raise ValueError(f"kernel {plugin.name!r}: spec.not_applicable({name!r}, shape) must say why "
                             f"(a sentence) or return None, got {why!r}")
        out[name] = why.strip()
    return out


def shape_of(plugin, shape_cfg) -> dict:
    """The shape as the kernel's spec validates it; ValueError with the spec's message."""
    try:
        return plugin.spec.validate_shape(OmegaConf.to_container(shape_cfg, resolve=True))
    except ValueError as e:
        raise ValueError(f"shape: {e}") from None


def from_wire(wire: dict) -> tuple[plugins.Plugin, dict]:
    """(the kernel's plugin, the wire data) in a process of the GPU half."""
    return plugins.load_dir(Path(wire["kernel_dir"])), wire
