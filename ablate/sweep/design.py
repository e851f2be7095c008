"""What a sweep runs, designed before its first job: Hydra's own expansion of the command
line (`sweep_jobs`), each job's config made into a Job once (`jobs_of_sweep`: the callback
builds their variants before the first job), and the interactions design that
`hydra/sweeper=interactions` (hydra_plugins/ablate_interactions) asks for: the base, each
pathology alone, every pair on different seams (two patches of one seam cannot be combined; a generic pathology is a seam of its own),
and the **inversion**: one pathology per seam switched on ("everything off"), then that set
with each one taken out (each optimization added back alone). A pathology's seam is the one
its patch replaces (ablate/job/variant.py reads it from the patch), not its yaml's word.

The analysis of what such a sweep measured is ablate/report/interactions.py.
"""
import itertools

from omegaconf import OmegaConf

from ablate.job.variant import GENERIC_SEAM

BASE = "none"


def sweep_jobs(config) -> list[list[str]]:
    """Each job's overrides, as Hydra's basic sweeper will expand the multirun's (its params
    plus the command line's task overrides, `glob(*)` and choice sweeps included).

    `config` is what `Callback.on_multirun_start(config)` receives."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.utils import get_class

    sweeper = config.hydra.sweeper
    try:
        cls = get_class(sweeper._target_)
    except Exception as e:
        raise ValueError(f"hydra.sweeper: cannot import {sweeper._target_}: {e}") from None
    if not isinstance(cls, type) or not issubclass(cls, BasicSweeper):
        raise ValueError(
            f"variants_of_sweep expands the basic sweeper's jobs (and its subclasses'), not {sweeper._target_}")
    loader = GlobalHydra.instance().config_loader()
    params = [f"{key}={value}" for key, value in (sweeper.get("params") or {}).items()]
    arguments = params + list(config.hydra.overrides.task)
    overrides = OverridesParser.create(config_loader=loader).parse_overrides(arguments)
    jobs = [list(job) for job in itertools.chain.from_iterable(BasicSweeper.split_arguments(overrides, None))]
    if hasattr(cls, "jobs_of"):  # a sweeper that designs its jobs from the basic ones (interactions)
        jobs = [list(job) for job in cls.jobs_of(config, loader, jobs)]
    return jobs


def job_configs(config, jobs=None):
    """Each job's composed config, in job order (`jobs`: sweep_jobs' list), composed with
    Hydra's own loader: exactly what that job will see. One at a time, as they are asked for."""
    from hydra.core.global_hydra import GlobalHydra

    loader = GlobalHydra.instance().config_loader()
    return (loader.load_sweep_config(master_config=config, sweep_overrides=list(overrides))
            for overrides in (sweep_jobs(config) if jobs is None else jobs))


def jobs_of_sweep(config, jobs=None, each=None) -> list:
    """The Job of every job of a multirun, in job order; ValueError naming the first bad one.
    `each(job)`, where given, is called with each as soon as it is worked out (the callback
    sends the first ones to the GPU worker while it composes the rest)."""
    from ablate.job.job import make_job

    out = []
    for cfg in job_configs(config, jobs):
        out.append(make_job(cfg, OmegaConf.select(cfg, "hydra.runtime.choices.shape", default=None)))
        if each is not None:
            each(out[-1])
    return out


def variants_of_sweep(jobs) -> list:
    """The distinct variants of `jobs`, in job order; in static mode, after them, the rests
    of the combined ones (each without one of its pathologies, against which its fingerprint
    is checked: ablate/job/fingerprint.py), so that one parallel build makes them all. A job
    the kernel opts out of (`kernel.not_applicable`: Job.opted_out) builds nothing, so its
    variant is not among them."""
    variants = {}
    jobs = [job for job in jobs if not job.opted_out]
    for job in jobs:
        variants.setdefault(job.variant.name, job.variant)
    for job in jobs:
        if job.mode == "static":
            for rest in job.rests.values():
                variants.setdefault(rest.name, rest)
    return list(variants.values())


def pairs_of(seams):
    """(combinable, same_seam): the pairs of pathologies (sorted tuples, sorted) on different
    seams, and those on the same seam, which cannot be combined. `seams`: {name: seam}."""
    names = sorted(n for n in seams if n != BASE)
    both = list(itertools.combinations(names, 2))
    return ([p for p in both if seams[p[0]] != seams[p[1]]], [p for p in both if seams[p[0]] == seams[p[1]]])


def seam_choice(seams, preferred=None):
    """{seam: the pathology that switches it off in the inversion}. Where a seam has several
    pathologies, `preferred` ({seam: name}, the kernel's `kernel.inversion`) says which; a
    seam it does not name, or names a pathology this sweep leaves out, takes the first name in
    sorted order. ValueError when `preferred` names a pathology of the sweep on another seam."""
    preferred = dict(preferred or {})
    by_seam = {}
    for name in sorted(n for n in seams if n != BASE):
        by_seam.setdefault(seams[name], []).append(name)
    for seam, name in list(preferred.items()):
        if name in seams and seams[name] != seam:
            raise ValueError(f"kernel.inversion.{seam}={name}: {name} replaces the {seams[name]} seam; "
                             f"the sweep's pathologies on seam {seam!r} are {by_seam.get(seam, [])}")
        if name not in seams:  # not in this sweep (a sweep of some pathologies): its seam takes the first
            del preferred[seam]
    return {seam: preferred.get(seam, names[0]) for seam, names in sorted(by_seam.items())}


def design(seams, chosen, pairs=True, inversion=True):
    """The variants of an interactions sweep, in job order, each a sorted tuple of pathology
    names (() is the base): base, singles, cross-seam pairs, then everything off (one
    pathology per seam, `chosen`) and everything off with each one taken out. Duplicates
    (with two or three seams the inversion's sets are pairs or singles) appear once."""
    names = sorted(n for n in seams if n != BASE)
    out = [(), *((n,) for n in names)]
    if pairs:
        out += pairs_of(seams)[0]
    if inversion and len(chosen) >= 2:
        full = tuple(sorted(chosen.values()))
        out += [full, *(tuple(n for n in full if n != left) for left in full)]
    return list(dict.fromkeys(out))


def interactions_jobs(config, loader, jobs):
    """The interactions design's jobs (lists of overrides) from the basic sweeper's `jobs`.

    `config` is the sweep's config (its hydra.sweeper says which parts; its kernel.inversion
    which pathology stands for a seam that has several), `loader` Hydra's config loader, used
    to read each pathology's seam as a job would see it."""
    def key(override):
        return override.split("=", 1)[0].lstrip("+~")

    options = config.hydra.sweeper
    groups: dict[tuple, list[str]] = {}
    for job in jobs:
        rest = tuple(o for o in job if key(o) != "pathology")
        names = [o.split("=", 1)[1] for o in job if key(o) == "pathology"]
        if len(names) != 1 or names[0].startswith("["):
            raise SystemExit("ablate: hydra/sweeper=interactions takes single pathologies to combine "
                             f"(pathology=glob(*), or pathology=a,b,c), got {' '.join(job)!r}")
        groups.setdefault(rest, [])
        if names[0] not in groups[rest]:
            groups[rest].append(names[0])
    seams: dict[str, str] = {}
    for rest, names in groups.items():
        for name in names:
            if name in seams or name == BASE:
                continue
            cfg = loader.load_sweep_config(master_config=config, sweep_overrides=[*rest, f"pathology={name}"])
            seam = _seam_of(cfg, name)
            if not seam:
                raise SystemExit(f"ablate: pathology {name!r} replaces no seam (its patch defines no "
                                 "ABLATE_SEAM_* macro and its yaml names no `seam:`, and it is not a generic "
                                 "pathology): the interactions sweep needs each pathology's seam to know which "
                                 "pairs can be combined")
            seams[name] = seam
    out = []
    for rest, names in groups.items():
        # The inversion switches off the kernel's own seams; a generic pathology's seam of its
        # own (Variant.seam_of) enters the pairs only.
        own = {n: seams[n] for n in names if n != "none" and not seams[n].startswith(GENERIC_SEAM)}
        chosen = seam_choice(own, config.get("kernel", {}).get("inversion"))
        for variant in design({n: seams[n] for n in names if n != "none"}, chosen,
                              pairs=bool(options.get("pairs", True)), inversion=bool(options.get("inversion", True))):
            value = "none" if not variant else variant[0] if len(variant) == 1 else "[" + ",".join(variant) + "]"
            out.append([*rest, f"pathology={value}"])
    return out


def _seam_of(cfg, name):
    """The seam pathology `name` replaces, as its Job's variant says (from its patch)."""
    from ablate.job.job import make_job

    try:
        return make_job(cfg).variant.seam_of(name)
    except ValueError as e:
        raise SystemExit(f"ablate: {e}") from None
