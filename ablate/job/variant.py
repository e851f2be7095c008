"""A variant: the base kernel with some pathologies switched on, read from `cfg.pathology`.

`cfg.pathology` maps each selected pathology's name to its yaml content (docs/design.md):
`pathology=none` gives `{none: {...}}`, `pathology=[a,b]` gives `{a: {...}, b: {...}}`.
A pathology's header is a path relative to its kernel's plugin folder (patches/x.cuh), or to
ablate/include/ for ablate's own (the calibrations': ablate/calibration_null.cuh).
Calibrations (conf/calibration/, `make calibrate`) are pathologies whose true effect is
known by construction: `truth` states it, and `launches: N` makes each launch of the
variant N launches of its kernel.
A Triton kernel's pathology is `meta: {NAME: value}`: overrides of the base's constexprs and
compile options (spec.META: BLOCK_M, GROUP_M, a flag the kernel reads, num_stages, num_warps),
a value a number or `{fraction_of_base: F}` (that fraction of the base's value, at least 1);
a CuTe DSL kernel's likewise overrides its compile-time parameters (a value may also be a
string or null: QuACK's reload_from).
Everything that later reaches nvcc's command line (or Triton's compiler) is checked here
against strict patterns, so a bad config is a clear error before anything is built.
"""
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig, ListConfig, OmegaConf

from ablate.job import fingerprint

BASE = "none"
from ablate.paths import INCLUDE, ROOT as PROJECT_ROOT

NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
MACRO_NAME_RE = re.compile(r"^ABLATE_[A-Z0-9_]+$")
MACRO_VALUE_RE = re.compile(r"^[A-Za-z0-9_]*$")
TUNED_MACRO_RE = re.compile(r"^[A-Z][A-Z0-9_]*$")  # a CUDA kernel's TUNABLES macro (ablate/job/tunables.py)
SEAM_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+ABLATE_SEAM_([A-Z0-9_]+)\b", re.M)
# What makes a pathology's build (or launch) differ from the base's: a pathology other than
# the base (and a calibration, whose `truth` says what it is) must have one, or it is refused
# before anything is built (it would measure the base against itself and read as a pathology).
BUILD_FIELDS = ("macros", "header", "flags", "regs_cap", "transform", "sm_fraction", "meta")
SPEC_KEYS = {"header", "macros", "seam", "mechanism", "expected", "fingerprint", "counters", "launches", "truth",
             "generic", "flags", "regs_cap", "transform", "sm_fraction", "unchanged_means", "meta",
             "launch_only", "tuned"}
# Extra nvcc flags a pathology may add (`flags:`): a fixed vocabulary, nothing else reaches nvcc.
FLAG_RE = re.compile(r"^(--fmad=(true|false)|-prec-div=(true|false)|-prec-sqrt=(true|false)|-ftz=(true|false)"
                     r"|-Xptxas=-dlcm=(ca|cg|cs)|-Xptxas=-dscm=(cg|cs|wt))$")
# Source transforms (`transform:`), applied to a build copy of the kernel's sources (build/compile.py).
TRANSFORMS = ("unroll_1",)
# A Triton meta-parameter's name (a constexpr parameter of the kernel, or a compile option).
META_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


GENERIC_SEAM = "generic."  # the prefix of a generic pathology's seam of its own (Variant.seam_of)


class VariantError(ValueError):
    """A pathology config that cannot become a variant."""


@dataclass(frozen=True)
class Variant:
    name: str  # sorted pathology names joined by "+"; "none" for the base
    pathologies: tuple[str, ...]  # sorted, without "none"
    macros: dict[str, str] = field(default_factory=dict)  # -DNAME=VALUE, sorted by name
    headers: tuple[str, ...] = ()  # -include paths: relative to the project root when inside it
    specs: dict[str, dict] = field(default_factory=dict)  # each pathology's yaml content
    launches: int = 1  # launches of the kernel per launch of the variant (calibrations)
    seams: dict[str, str] = field(default_factory=dict)  # each pathology's seam, as its patch replaces it
    flags: tuple[str, ...] = ()  # extra nvcc flags (FLAG_RE), in the pathologies' order
    regs_fraction: float | None = None  # -maxrregcount at this fraction of the base's registers
    transforms: tuple[str, ...] = ()  # source transforms of a build copy (TRANSFORMS)
    sm_fraction: float | None = None  # launched on a green context with this fraction of the SMs
    generic: tuple[str, ...] = ()  # its generic pathologies (conf/generic/): equal SASS is "not applicable"
    # A Triton kernel's overrides of its META: {name: value, or {"fraction_of_base": F}}, sorted by name.
    meta: dict = field(default_factory=dict)
    launch_only: tuple[str, ...] = ()  # its pathologies that change only the host's launch arguments
    # An autotuned Triton kernel's base META for the job's shape (its autotuner's pick on a
    # GPU: ablate/build/triton_autotune.py), in place of spec.META; {}: spec.META.
    base_meta: dict = field(default_factory=dict)
    # A CUDA kernel's candidate configuration for the job's shape (ablate/job/candidates.py): the
    # macros its base (and so every variant of the job) is built with, before the pathologies' own.
    base_macros: dict = field(default_factory=dict)

    @property
    def is_base(self) -> bool:
        return not self.pathologies

    def seam_of(self, name) -> str | None:
        """The seam pathology `name` stands for in the interactions design: its patch's; a
        generic pathology (conf/generic/) replaces none of the source's, since it changes how
        the whole kernel is built or launched, so it stands for a seam of its own,
        `generic.<its yaml's seam:>` (the mechanism it acts on: no_launch_bounds and
        regs_capped both redefine __launch_bounds__, generic.registers), `generic.<name>`
        where the yaml names none; the inversion (the kernel's own seams switched off) leaves
        it out. None for a hand-written pathology without a seam."""
        if name in self.seams:
            return self.seams[name]
        return f"{GENERIC_SEAM}{self.specs[name].get('seam') or name}" if name in self.generic else None

    @property
    def changes_build(self) -> bool:
        """Whether its library differs from the base's by construction (else only its launch does)."""
        return bool(self.macros or self.headers or self.flags or self.regs_fraction or self.transforms
                    or self.meta)


def variant_from_cfg(pathology_cfg, kernel_dir) -> Variant:
    """The variant that `cfg.pathology` selects for the kernel whose plugin folder is
    `kernel_dir` (headers are relative to it). Raises VariantError naming the pathology and
    field at fault."""
    kernel_dir = Path(kernel_dir).resolve()
    if isinstance(pathology_cfg, (DictConfig, ListConfig)):
        pathology_cfg = OmegaConf.to_container(pathology_cfg, resolve=True)
    if not isinstance(pathology_cfg, Mapping) or not pathology_cfg:
        raise VariantError(
            f"cfg.pathology must map each pathology's name to its spec, got {pathology_cfg!r}"
            " (select at least `pathology=none`)")

    macros: dict[str, str] = {}
    macro_owner: dict[str, str] = {}
    headers: list[str] = []
    specs: dict[str, dict] = {}
    seams: dict[str, str] = {}
    flags: list[str] = []
    transforms: list[str] = []
    meta: dict = {}
    meta_owner: dict[str, str] = {}
    generic_seams: dict[str, str] = {}
    regs_fraction = sm_fraction = None
    for name in sorted(pathology_cfg):
        spec = _check_spec(name, pathology_cfg[name])
        if name == BASE:
            continue
        for macro, value in _check_macros(name, spec.get("macros"), _tuned_name(name, spec)).items():
            if macro in macros and macros[macro] != value:
                raise VariantError(
                    f"pathology '{name}': macros.{macro}={value} conflicts with "
                    f"{macro}={macros[macro]} from pathology '{macro_owner[macro]}'")
            macros[macro], macro_owner[macro] = value, name
        for key, value in _check_meta(name, spec.get("meta")).items():
            if key in meta and meta[key] != value:
                raise VariantError(f"pathology '{name}': meta.{key}={value} conflicts with {key}={meta[key]} "
                                   f"from pathology '{meta_owner[key]}'")
            meta[key], meta_owner[key] = value, name
        header = _check_header(name, spec.get("header"), kernel_dir)
        if header is not None and header not in headers:
            headers.append(header)
        seam = _check_seam(name, spec.get("seam"), header)
        if seam is None and spec.get("meta") and not spec.get("generic"):  # the parameters it overrides
            seam = "+".join(sorted(str(k).lower() for k in spec["meta"]))
        if spec.get("generic"):  # a seam of its own (seam_of): not one of the source's, which the library reports
            _check_generic_seam(name, f"{GENERIC_SEAM}{seam or name}", generic_seams)
        elif seam is not None:
            other = next((n for n, s in seams.items() if s == seam), None)
            if other is not None:
                raise VariantError(f"pathologies '{other}' and '{name}' both replace the {seam} seam "
                                   f"(their patches both define ABLATE_SEAM_{seam.upper()}): they cannot be combined")
            seams[name] = seam
        flags += [f for f in _check_flags(name, spec.get("flags")) if f not in flags]
        transform = _check_transform(name, spec.get("transform"))
        if transform is not None and transform not in transforms:
            transforms.append(transform)
        regs_fraction = _one(name, "regs_cap", _check_regs_cap(name, spec.get("regs_cap")), regs_fraction)
        sm_fraction = _one(name, "sm_fraction", _check_fraction(name, "sm_fraction", spec.get("sm_fraction")),
                           sm_fraction)
        specs[name] = spec

    pathologies = tuple(specs)
    return Variant(
        name="+".join(pathologies) or BASE,
        pathologies=pathologies,
        macros=dict(sorted(macros.items())),
        headers=tuple(headers),
        specs=specs,
        launches=math.prod(int(spec.get("launches") or 1) for spec in specs.values()),
        seams=seams,
        flags=tuple(flags),
        regs_fraction=regs_fraction,
        transforms=tuple(transforms),
        sm_fraction=sm_fraction,
        generic=tuple(n for n, spec in specs.items() if spec.get("generic")),
        meta=dict(sorted(meta.items())),
        launch_only=tuple(n for n, spec in specs.items() if spec.get("launch_only")),
    )


def _check_generic_seam(name, seam, taken) -> None:
    """Two generic pathologies of one seam of their own act on one mechanism (each redefines
    what the other does): they cannot be combined, as two patches of one seam cannot."""
    other = next((n for n, s in taken.items() if s == seam), None)
    if other is not None:
        raise VariantError(f"pathologies '{other}' and '{name}' both act on the {seam} seam (generic "
                           "pathologies of one mechanism): they cannot be combined")
    taken[name] = seam


def _check_meta(name, meta) -> dict:
    """`meta: {NAME: value}`: a Triton kernel's constexpr or compile-option overrides, a CuTe
    DSL kernel's compile-time parameters; a value is a number, a bool, a string or null (a
    CuTe DSL kernel's configuration field: QuACK's reload_from), or {fraction_of_base: F}
    (0 < F < 1) for an integer of the base's."""
    if meta is None:
        return {}
    if not isinstance(meta, Mapping) or not meta:
        raise VariantError(f"pathology '{name}': meta must map meta-parameters to values, got {meta!r}")
    out = {}
    for key, value in meta.items():
        if not isinstance(key, str) or not META_NAME_RE.match(key):
            raise VariantError(f"pathology '{name}': meta name {key!r} must match {META_NAME_RE.pattern}")
        if isinstance(value, Mapping):
            if set(value) != {"fraction_of_base"}:
                raise VariantError(f"pathology '{name}': meta.{key} must be a number, a bool, a string, null "
                                   f"or {{fraction_of_base: F}}, got {dict(value)!r}")
            value = {"fraction_of_base": _check_fraction(name, f"meta.{key}.fraction_of_base",
                                                         value["fraction_of_base"])}
        elif value is not None and not isinstance(value, (bool, int, float, str)):
            raise VariantError(f"pathology '{name}': meta.{key} must be a number, a bool, a string, null "
                               f"or {{fraction_of_base: F}}, got {value!r}")
        out[key] = value
    return out


def _check_regs_cap(name, regs_cap) -> float | None:
    """`regs_cap: {fraction_of_base: F}`: the variant's registers capped at F times the base's."""
    if regs_cap is None:
        return None
    if not isinstance(regs_cap, Mapping) or set(regs_cap) != {"fraction_of_base"}:
        raise VariantError(f"pathology '{name}': regs_cap must be {{fraction_of_base: F}}, got {regs_cap!r}")
    return _check_fraction(name, "regs_cap.fraction_of_base", regs_cap["fraction_of_base"])


def _one(name, key, value, earlier):
    """A setting only one pathology of a variant may make (two register caps cannot both hold)."""
    if value is not None and earlier is not None:
        raise VariantError(f"pathology '{name}': {key} is set by another pathology of this variant too")
    return earlier if value is None else value


def _check_fraction(name, key, value) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
        raise VariantError(f"pathology '{name}': {key} must be a number in (0, 1), got {value!r}")
    return float(value)


def _check_flags(name, flags) -> list[str]:
    """Extra nvcc flags, each one of FLAG_RE's: no other text reaches nvcc's command line."""
    if flags is None:
        return []
    if not isinstance(flags, (list, tuple)):
        raise VariantError(f"pathology '{name}': flags must be a list, got {flags!r}")
    for flag in flags:
        if not isinstance(flag, str) or not FLAG_RE.match(flag):
            raise VariantError(f"pathology '{name}': flag {flag!r} is not one ablate passes to nvcc "
                               f"(allowed: {FLAG_RE.pattern})")
    return list(flags)


def _check_transform(name, transform) -> str | None:
    if transform is None:
        return None
    if transform not in TRANSFORMS:
        raise VariantError(f"pathology '{name}': transform {transform!r} is not one of {list(TRANSFORMS)}")
    return transform


def _check_spec(name, spec) -> dict:
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise VariantError(f"pathology name {name!r} must match {NAME_RE.pattern}")
    if spec is None:
        spec = {}
    if not isinstance(spec, Mapping):
        raise VariantError(f"pathology '{name}': its spec must be a mapping, got {spec!r}")
    unknown = sorted(set(spec) - SPEC_KEYS)
    if unknown:
        raise VariantError(
            f"pathology '{name}': unknown field(s) {unknown}; known: {sorted(SPEC_KEYS)}")
    if name == BASE and any(spec.get(k) for k in BUILD_FIELDS):
        raise VariantError(f"pathology '{BASE}' is the base: it takes no macros, header, flags, "
                           "regs_cap, transform, sm_fraction or meta")
    for key in ("generic",):
        if spec.get(key) is not None and not isinstance(spec[key], bool):
            raise VariantError(f"pathology '{name}': {key} must be true or false, got {spec[key]!r}")
    if spec.get("launch_only") is not None and (not isinstance(spec["launch_only"], str)
                                                or not spec["launch_only"].strip()):
        raise VariantError(f"pathology '{name}': launch_only must be a sentence saying which launch "
                           f"arguments its macros change (its device code is the base's), got "
                           f"{spec['launch_only']!r}")
    if spec.get("unchanged_means") is not None and not isinstance(spec["unchanged_means"], str):
        raise VariantError(f"pathology '{name}': unchanged_means must be a sentence")
    if name != BASE and spec.get("truth") is None and not any(spec.get(k) not in (None, {}, [], "") for k in BUILD_FIELDS):
        raise VariantError(f"pathology '{name}': no macros and no header: it would build the base again; "
                           "give it macros (-D, for a seam of the base to read) or a header (its patch), "
                           "or, for a generic one, flags, regs_cap, transform or sm_fraction; a Triton "
                           "or CuTe DSL kernel's: meta (its compile-time parameters' overrides)")
    launches = spec.get("launches")
    if launches is not None and (isinstance(launches, bool) or not isinstance(launches, int) or launches < 1):
        raise VariantError(f"pathology '{name}': launches must be a whole number >= 1, got {launches!r}")
    truth = spec.get("truth")
    if truth is not None and (isinstance(truth, bool) or not isinstance(truth, (int, float)) or not truth > 0):
        raise VariantError(f"pathology '{name}': truth must be a positive number (the known slowdown), got {truth!r}")
    if spec.get("fingerprint") is not None:
        try:
            fingerprint.validate(spec["fingerprint"])
        except ValueError as err:
            raise VariantError(f"pathology '{name}': fingerprint: {err}") from None
    if spec.get("counters") is not None:
        from ablate.job import counters  # ncu's metric list is read on first use

        try:
            counters.validate(spec["counters"])
        except ValueError as err:
            raise VariantError(f"pathology '{name}': counters: {err}") from None
    return dict(spec)


def _tuned_name(name, spec) -> str | None:
    """A generated neighbour's tunable (ablate/job/tunables.py: `tuned: {name, base, value}`),
    the one macro it may set without the ABLATE_ prefix (a CUDA kernel's TUNABLES name)."""
    tuned = spec.get("tuned")
    if tuned is None:
        return None
    if not isinstance(tuned, Mapping) or set(tuned) != {"name", "base", "value"}:
        raise VariantError(f"pathology '{name}': tuned must be {{name, base, value}}, got {tuned!r}")
    return str(tuned["name"])


def _check_macros(name: str, macros, tuned=None) -> dict[str, str]:
    if macros is None:
        return {}
    if not isinstance(macros, Mapping):
        raise VariantError(f"pathology '{name}': macros must be a mapping, got {macros!r}")
    out = {}
    for macro, value in macros.items():
        if not isinstance(macro, str) or not (MACRO_NAME_RE.match(macro) or (
                macro == tuned and TUNED_MACRO_RE.match(macro))):
            raise VariantError(
                f"pathology '{name}': macro name {macro!r} must match {MACRO_NAME_RE.pattern}")
        # bool is an int subclass, but True would become "True": refuse it.
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise VariantError(
                f"pathology '{name}': macros.{macro} must be an integer or a string, "
                f"got {value!r}")
        value = str(value)
        if not MACRO_VALUE_RE.match(value):
            raise VariantError(
                f"pathology '{name}': macros.{macro}={value!r} must match "
                f"{MACRO_VALUE_RE.pattern}")
        out[macro] = value
    return out


def replaced_seams(header) -> list[str]:
    """The seams a patch replaces: the ABLATE_SEAM_<SEAM> macros it defines, as lower-case
    names (`#define ABLATE_SEAM_SMEM_LAYOUT NoSwizzle` -> smem_layout). `header`: a path as
    _check_header returns it."""
    path = Path(header) if Path(header).is_absolute() else PROJECT_ROOT / header
    return sorted({m.lower() for m in SEAM_DEFINE.findall(path.read_text(errors="replace"))})


def _check_seam(name: str, said, header) -> str | None:
    """The seam pathology `name` replaces: the one its patch defines, which its yaml's
    `seam:` must name where it names one; the yaml's word only where there is no patch to
    read (a pathology of macros alone)."""
    found = replaced_seams(header) if header is not None else []
    if said is not None and not isinstance(said, str):
        raise VariantError(f"pathology '{name}': seam must be a seam's name, got {said!r}")
    if len(found) > 1:
        raise VariantError(f"pathology '{name}': its patch {header} replaces {len(found)} seams "
                           f"({', '.join(found)}); a pathology replaces one")
    if found and said is not None and said != found[0]:
        raise VariantError(f"pathology '{name}': its yaml says seam: {said}, but its patch {header} replaces "
                           f"the {found[0]} seam (#define ABLATE_SEAM_{found[0].upper()}); make them agree")
    return found[0] if found else said


def _check_header(name: str, header, kernel_dir: Path) -> str | None:
    if header is None:
        return None
    if not isinstance(header, str) or not header:
        raise VariantError(f"pathology '{name}': header must be a path, got {header!r}")
    path = Path(header)
    if path.is_absolute():
        raise VariantError(f"pathology '{name}': header {header!r} must be relative to the "
                           f"kernel's folder {kernel_dir}")
    if path.suffix != ".cuh":
        raise VariantError(f"pathology '{name}': header {header!r} must end in .cuh")
    resolved = (kernel_dir / path).resolve()
    if not resolved.exists() and (INCLUDE / path).is_file():
        resolved = (INCLUDE / path).resolve()  # one of ablate's own headers
    # The kernel's own folder; or this project (the test-only pathologies of tests/); or ablate's.
    if not any(resolved.is_relative_to(d) for d in (kernel_dir, PROJECT_ROOT, INCLUDE)):
        raise VariantError(f"pathology '{name}': header {header!r} is outside the kernel's "
                           f"folder {kernel_dir}")
    if not resolved.is_file():
        raise VariantError(f"pathology '{name}': header {header!r} does not exist in {kernel_dir}")
    # A plain path: it reaches nvcc's command line as `-include PATH`, run from the project root.
    if resolved.is_relative_to(PROJECT_ROOT):
        return resolved.relative_to(PROJECT_ROOT).as_posix()
    return str(resolved)
