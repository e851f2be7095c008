"""What a sweep runs, designed before its first job: Hydra's own expansion of the command
line (`sweep_jobs`), each job's config made into a Job once (`jobs_of_sweep`: the callback
builds their variants before the first job), and the interactions design that
`hydra/sweeper=interactions` (hydra_plugins/ablate_interactions) asks for: the base, each
pathology alone, every pair on different seams (two patches of one seam cannot be combined; a generic pathology is a seam of its own;
generic with generic only with interactions.pairs=all; none with a side not applicable to the kernel),
and the **inversion**: one pathology per seam switched on ("everything off"), then that set
with each one taken out (each optimization added back alone). A pathology's seam is the one
its patch replaces (ablate/job/variant.py reads it from the patch), not its yaml's word.
A design that combines nothing (a kernel with generic pathologies only, as a foreign kernel
has: no pair by default, no seam of its own to invert) is no interactions sweep: it stops in
one line that says why and names the option that pairs them (`nothing_to_pair`), before
anything is built; what the design pairs that one might not expect (generic with generic, no
inversion) is said before the first job (`pairing_lines`).

The analysis of what such a sweep measured is ablate/report/interactions.py.
"""
import itertools
import logging
import os
import sys

from omegaconf import OmegaConf

from ablate.job.variant import GENERIC_SEAM

BASE = "none"
log = logging.getLogger(__name__)


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


# Hydra composes a job in ~0.1 s on the H100's host, re-reading every yaml it names: 84 jobs
# were ~21 s before a sweep's first launch on four GPUs, the same as on one (docs/benchmarks.md,
# "The third session"). From FORK_AT jobs on, forked copies of this process compose them in
# chunks of CHUNK, in order; each config comes back pickled, as Hydra's own launchers send them.
FORK_AT = 16
CHUNK = 4
FORK_WAIT_S = 60  # a chunk's answer, at most: its 4 jobs take ~0.4 s on the H100's host
_forked = None  # (loader, master config) for the forked composers: set before the fork


def composers(n_jobs, cpus=None) -> int:
    """How many processes compose a sweep of `n_jobs` (1: this one, one job after another):
    forked ones on Linux only (fork elsewhere is unsafe or slow), one per CPU up to a chunk each."""
    if n_jobs < FORK_AT or not sys.platform.startswith("linux"):
        return 1
    return max(1, min(cpus or os.cpu_count() or 1, -(-n_jobs // CHUNK), 16))


def _compose(loader, config, overrides):
    return loader.load_sweep_config(master_config=config, sweep_overrides=list(overrides))


def _compose_chunk(chunk):
    """The chunk's configs; None from the first that fails on: the parent composes that one
    itself and raises Hydra's own error (not every exception survives pickling)."""
    loader, config = _forked
    out = []
    for overrides in chunk:
        try:
            out.append(_compose(loader, config, overrides))
        except Exception:  # noqa: BLE001 - raised again in the parent, in its own words
            out.append(None)
            break
    return out


def job_configs(config, jobs=None, processes=None):
    """Each job's config, in job order (`jobs`: sweep_jobs' list), composed with Hydra's own
    loader: exactly what that job will see, yielded as each is ready. `processes` (default
    `composers`) > 1 composes in that many forked processes, in order. A composer that dies
    (the kernel's OOM killer on a machine that builds beside it) or answers no chunk within
    FORK_WAIT_S is ended, and this process composes the rest itself: a pool of
    multiprocessing's lost the dead one's chunk and waited for it forever (a CI run's sweep
    hung 300 s before its first line, 2026-12-02; tests/test_variant.py kills one)."""
    global _forked
    from hydra.core.global_hydra import GlobalHydra

    loader = GlobalHydra.instance().config_loader()
    jobs = sweep_jobs(config) if jobs is None else jobs
    processes = composers(len(jobs)) if processes is None else processes
    done = 0
    if processes > 1:
        import concurrent.futures as futures
        import multiprocessing

        _forked = (loader, config)
        chunks = [jobs[i:i + CHUNK] for i in range(0, len(jobs), CHUNK)]
        pool = futures.ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("fork"))
        try:
            pending = [pool.submit(_compose_chunk, chunk) for chunk in chunks]
            for chunk, future in zip(chunks, pending):
                try:
                    configs = future.result(timeout=FORK_WAIT_S)
                except (futures.process.BrokenProcessPool, futures.TimeoutError) as e:
                    log.warning("a process composing the sweep's jobs %s: the other %d composed here",
                                "died" if isinstance(e, futures.process.BrokenProcessPool)
                                else f"gave no answer in {FORK_WAIT_S} s", len(jobs) - done)
                    break
                for overrides, cfg in zip(chunk, configs):
                    yield cfg if cfg is not None else _compose(loader, config, overrides)
                    done += 1
        finally:
            _forked = None
            _end_pool(pool, whole=done == len(jobs))
    yield from (_compose(loader, config, o) for o in jobs[done:])


def _end_pool(pool, whole):
    """The composers' end: they exit where every chunk was answered; else (a composer died or
    hangs, or the caller stopped at a bad job) none is waited for."""
    if whole:
        pool.shutdown(wait=True)
        return
    for process in list((getattr(pool, "_processes", None) or {}).values()):  # before shutdown forgets them
        process.kill()
    pool.shutdown(wait=False, cancel_futures=True)


_composed = {}  # tuple(overrides): the config the callback composed for that job, for its launcher


def keep_composed(overrides, jobs):
    """Hand each job's config, composed once by the callback (jobs_of_sweep), to the launcher
    that runs it (hydra_plugins/ablate_sweeper: ComposedOnce), instead of composing it again:
    Hydra's composition is ~0.1 s a job on the H100's host, and the launcher's, one job after
    another, held back the GPUs of a sweep on two (docs/benchmarks.md, "Every GPU"). `[]`
    forgets them (the sweep's end)."""
    _composed.clear()
    _composed.update({tuple(o): job.cfg for o, job in zip(overrides, jobs)})


def take_composed(overrides):
    """The config composed for these overrides, once (None where none is kept)."""
    return _composed.pop(tuple(overrides), None)


def jobs_of_sweep(config, jobs=None, each=None) -> list:
    """The Job of every job of a multirun, in job order; ValueError naming the first bad one.
    `each(job)`, where given, is called with each as soon as it is worked out (the callback
    sends the first ones to the GPU worker while it composes the rest)."""
    from ablate.pipeline import job_of

    out = []
    configs = job_configs(config, jobs)
    try:
        for cfg in configs:
            out.append(job_of(cfg, OmegaConf.select(cfg, "hydra.runtime.choices.shape", default=None)))
            if each is not None:
                each(out[-1])
    finally:
        configs.close()  # a bad job: the composers still at work are ended now, not at exit
    return out


def base_of(variant) -> tuple:
    """What a variant's base is built with at its job's shape, as a key: the configuration the
    shape's base runs (a CUDA kernel's candidate macros, a tuned Triton kernel's META; both
    empty where the kernel has none). Jobs at shapes whose bases differ build variants of one
    name from different sources: cutlass_gemm's cp_async over `large` at sq8k and over
    `skinny` at decode_m64."""
    return tuple(sorted(variant.base_macros.items())), repr(sorted(variant.base_meta.items()))


def variants_of_sweep(jobs) -> list:
    """The distinct variants of `jobs` (one name over two bases is two variants: `base_of`),
    in job order; in static mode, after them, the rests of the combined ones (each without one
    of its pathologies, against which its fingerprint is checked: ablate/job/fingerprint.py),
    so that the sweep's build makes them all. A job the kernel opts out of
    (`kernel.not_applicable`: Job.opted_out), or one that cannot run (Job.failed: its autotuner
    failed), builds nothing, so its variant is not among them."""
    variants = {}
    jobs = [job for job in jobs if not job.opted_out and not job.failed]
    for job in jobs:
        variants.setdefault((job.variant.name, base_of(job.variant)), job.variant)
    for job in jobs:
        if job.mode == "static":
            for rest in job.rests.values():
                variants.setdefault((rest.name, base_of(rest)), rest)
    return list(variants.values())


def builds_of_sweep(jobs, variants) -> list[tuple[tuple, list]]:
    """`variants` (variants_of_sweep's) as the sweep builds them: [(base_of key, its variants)],
    one build each, every name once in it and the base of its jobs among them (every job is
    timed against its own), in the order of the variants."""
    groups = {}
    for v in variants:
        groups.setdefault(base_of(v), []).append(v)
    for job in jobs:
        group = groups.get(base_of(job.base))
        if group is not None and job.base.name not in [v.name for v in group]:
            group.insert(0, job.base)
    return list(groups.items())


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


def design(seams, chosen, pairs=True, inversion=True, generic_pairs=False):
    """The variants of an interactions sweep, in job order, each a sorted tuple of pathology
    names (() is the base): base, singles, cross-seam pairs, then everything off (one
    pathology per seam, `chosen`) and everything off with each one taken out. Duplicates
    (with two or three seams the inversion's sets are pairs or singles) appear once. A pair of
    two generic pathologies (seams generic.*) only with `generic_pairs` (interactions.pairs=all)."""
    names = sorted(n for n in seams if n != BASE)
    out = [(), *((n,) for n in names)]
    if pairs:
        out += [p for p in pairs_of(seams)[0]
                if generic_pairs or not all(seams[n].startswith(GENERIC_SEAM) for n in p)]
    if inversion and len(chosen) >= 2:
        full = tuple(sorted(chosen.values()))
        out += [full, *(tuple(n for n in full if n != left) for left in full)]
    return list(dict.fromkeys(out))


PAIRS = ("own", "all")  # interactions.pairs: own pathologies with each other and the generic ones; all: generic too


def interactions_jobs(config, loader, jobs):
    """The interactions design's jobs (lists of overrides) from the basic sweeper's `jobs`."""
    return interactions_design(config, loader, jobs)[0]


def interactions_design(config, loader, jobs):
    """(the interactions design's jobs, lists of overrides; the lines that say what it left out
    and how long it takes) from the basic sweeper's `jobs`.

    `config` is the sweep's config (its hydra.sweeper says which parts; its kernel.inversion
    which pathology stands for a seam that has several; its `interactions` which pairs and
    pathologies), `loader` Hydra's config loader, used to read each pathology's seam as a job
    would see it. A pair with a side not applicable to the kernel (declared, or its machine
    code the base's: the base and the generic pathologies are built here for that, and cached
    for the sweep's build) is left out before anything is timed."""
    from ablate.sweep import study

    def key(override):
        return override.split("=", 1)[0].lstrip("+~")

    options = config.hydra.sweeper
    which_pairs, only = study_options(config)
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
    made, shapes = {}, set()  # each pathology's Job (its seam, whether it applies), composed once
    for rest, names in groups.items():
        for i, name in enumerate(names):
            if name in made and i:
                continue
            cfg = loader.load_sweep_config(master_config=config, sweep_overrides=[*rest, f"pathology={name}"])
            made.setdefault(name, _job_of(cfg))
            if not i:
                shapes.add(str(OmegaConf.select(cfg, "hydra.runtime.choices.shape", default=None)))
    seams: dict[str, str] = {}
    for name, job in made.items():
        if name == BASE:
            continue
        seams[name] = job.variant.seam_of(name)
        if not seams[name]:
            raise SystemExit(f"ablate: pathology {name!r} replaces no seam (its patch defines no "
                             "ABLATE_SEAM_* macro and its yaml names no `seam:`, and it is not a generic "
                             "pathology): the interactions sweep needs each pathology's seam to know which "
                             "pairs can be combined")
    mode = str(OmegaConf.select(config, "mode", default="gpu"))
    asks = made and (only == "significant" or mode != "static")  # the store, for the names or the estimate
    found = study.latest_single_sweep(config, next(iter(made.values())).kernel) if asks else None
    kept = narrowed(only, [n for n in made if n != BASE], found, shapes)
    pairs, inversion = bool(options.get("pairs", True)), bool(options.get("inversion", True))

    def variants(names, generic_pairs):
        # The inversion switches off the kernel's own seams; a generic pathology's seam of its
        # own (Variant.seam_of) enters the pairs only.
        own = {n: seams[n] for n in names if not seams[n].startswith(GENERIC_SEAM)}
        chosen = seam_choice(own, config.get("kernel", {}).get("inversion"))
        return design({n: seams[n] for n in names}, chosen, pairs=pairs, inversion=inversion,
                      generic_pairs=generic_pairs)

    kept_of = {rest: [n for n in names if n != BASE and n in kept] for rest, names in groups.items()}
    planned = {rest: variants(names, which_pairs == "all") for rest, names in kept_of.items()}
    if not any(len(v) > 1 for vs in planned.values() for v in vs):  # an ordinary sweep under another name
        with_all = sum(len(variants(names, True)) for names in kept_of.values())
        raise SystemExit(nothing_to_pair({n: seams[n] for n in kept}, which_pairs, pairs, inversion, with_all))
    not_applicable = inapplicable({n: made[n] for n in kept if made[n].variant.generic}) if pairs else {}
    out, dropped = [], 0
    for rest, vs in planned.items():
        for variant in vs:
            if len(variant) > 1 and set(variant) & set(not_applicable):
                dropped += 1
                continue
            value = "none" if not variant else variant[0] if len(variant) == 1 else "[" + ",".join(variant) + "]"
            out.append([*rest, f"pathology={value}"])
    left_out = "; ".join(f"{n} ({why})" for n, why in sorted(not_applicable.items()))
    if not any(job[-1].startswith("pathology=[") for job in out):
        raise SystemExit(f"ablate: hydra/sweeper=interactions has nothing to pair: every combination has a side "
                         f"not applicable to the kernel: {left_out}")
    lines = []
    if dropped:
        lines.append(f"interactions: {dropped} jobs of combinations left out, a side not applicable to the kernel: "
                     + left_out)
    lines += pairing_lines(out, {n: seams[n] for n in kept}, inversion)
    untimed = sum(1 for job in out if job[-1].split("=", 1)[1] in not_applicable)
    lines.append(study.estimate_line(len(out), len(out) - untimed, mode, found))
    return out, lines


def own_seams(seams) -> list:
    """The kernel's own seams of `seams` ({pathology: seam}), sorted: the generic ones left out."""
    return sorted({s for s in seams.values() if not s.startswith(GENERIC_SEAM)})


def _on_seams(own) -> str:
    return f"this sweep's pathologies are on {len(own)} ({', '.join(own) or 'none: all generic'})"


def nothing_to_pair(seams, which_pairs, pairs, inversion, with_all) -> str:
    """The one line that stops an interactions sweep whose design combines nothing (the base
    and each pathology alone: an ordinary sweep under the interactions' name): why, and the
    option that pairs them where one does. `seams`: {pathology: seam} of the sweep's;
    `with_all`: the jobs the design would have with interactions.pairs=all."""
    head = "ablate: hydra/sweeper=interactions has nothing to pair: "
    names, own = sorted(seams), own_seams(seams)
    if len(names) < 2:
        return head + (f"the sweep has one pathology ({names[0]})" if names else "the sweep has no pathology") + \
            ": name two or more (pathology=a,b,c, or interactions.only=[a,b])"
    if not pairs and not inversion:
        return head + "hydra.sweeper.pairs=false and hydra.sweeper.inversion=false leave the base and each " \
                      "pathology alone, an ordinary sweep (leave hydra/sweeper=interactions out for one)"
    if not pairs:
        return head + f"hydra.sweeper.pairs=false leaves the inversion, which needs two seams of the kernel's own; " \
                      f"{_on_seams(own)}"
    if which_pairs == "own" and not own and pairs_of(seams)[0]:
        return head + f"this sweep's pathologies are all generic ({', '.join(names)}), which pair with one " \
                      f"another only with interactions.pairs=all (up to {with_all} jobs)" + \
                      (", and the inversion switches off the kernel's own seams only" if inversion else "")
    by_seam = {}
    for name in names:
        by_seam.setdefault(seams[name], []).append(name)
    return head + "no two of this sweep's pathologies are on different seams, and two changes of one seam " \
                  "cannot be combined (" + "; ".join(f"{s}: {', '.join(n)}" for s, n in sorted(by_seam.items())) + ")"


def pairing_lines(jobs, seams, inversion):
    """The lines that say, before the first job, what the design pairs that a user might not
    expect: how many of `jobs` pair generic pathologies with one another (interactions.pairs=all),
    and no inversion where the sweep's pathologies (`seams`, {pathology: seam}) have fewer than
    two seams of the kernel's own."""
    def generic(name):
        return seams[name].startswith(GENERIC_SEAM)
    both = [job for job in jobs if job[-1].startswith("pathology=[")
            and all(generic(n) for n in job[-1].split("=", 1)[1].strip("[]").split(","))]
    lines = [f"interactions: {len(both)} of the {len(jobs)} jobs pair generic pathologies with one another "
             "(interactions.pairs=all)"] if both else []
    if inversion and len(own := own_seams(seams)) < 2:
        lines.append(f"interactions: no inversion: it switches off two or more seams of the kernel's own, and "
                     f"{_on_seams(own)}")
    return lines


def study_options(config):
    """(interactions.pairs, interactions.only) of the sweep's config; SystemExit naming the
    field where a value is not one it takes."""
    node = OmegaConf.select(config, "interactions", default=None) or {}
    pairs = node.get("pairs", "own")
    if pairs not in PAIRS:
        raise SystemExit(f"ablate: interactions.pairs must be one of {list(PAIRS)} (own: the kernel's pathologies "
                         f"with one another and with the generic ones; all: generic with generic too), got {pairs!r}")
    only = node.get("only", "all")
    if isinstance(only, (list, tuple)) or OmegaConf.is_list(only):
        only = [str(n) for n in only]
        if not only:
            raise SystemExit("ablate: interactions.only: an empty list leaves nothing to combine")
    elif only not in ("all", "significant"):
        raise SystemExit("ablate: interactions.only must be all, significant or a list of pathologies "
                         f"([a,b,c]; a,b,c would sweep it), got {only!r}")
    return pairs, only


def narrowed(only, names, found, shapes):
    """The pathologies of `names` that interactions.only keeps; SystemExit naming the field."""
    if only == "all":
        return list(names)
    if only == "significant":
        from ablate.sweep import study

        if found is None:
            raise SystemExit("ablate: interactions.only=significant: no timed single-pathology sweep of this kernel "
                             "in the store to say which are significant: make sweep first, or name them "
                             "(interactions.only=[a,b,c])")
        try:
            significant = study.significant(found, shapes)
        except ValueError as e:
            raise SystemExit(f"ablate: interactions.only=significant: {e}") from None
        kept = [n for n in names if n in significant]
        if not kept:
            raise SystemExit(f"ablate: interactions.only=significant: none of this sweep's pathologies is significant "
                             f"in sweep {found[0]} (significant there: {significant or 'none'})")
        return kept
    unknown = [n for n in only if n not in names]
    if unknown:
        raise SystemExit(f"ablate: interactions.only: {', '.join(unknown)} not among this sweep's pathologies "
                         f"({', '.join(sorted(names))})")
    return [n for n in names if n in only]


def inapplicable(jobs):
    """{generic pathology: why it does not apply to the kernel} of `jobs` ({name: its single
    Job}): declared by the kernel (kernel.not_applicable), or its machine code the base's
    (pipeline.not_applicable): the base and these variants are built for that (one ninja run,
    cached for the sweep's build). A variant that fails to build is not among them: its pairs
    are built, and fail, as results."""
    from ablate.build.compile import BuildError, build
    from ablate.paths import ROOT
    from ablate.pipeline import not_applicable

    out = {n: "declared by the kernel" for n, job in jobs.items() if job.opted_out}
    todo = {n: job for n, job in jobs.items() if n not in out and job.variant.changes_build}
    if not todo:
        return out
    first = next(iter(todo.values()))
    try:
        built = build([first.base, *(job.variant for job in todo.values())], first.build, first.plugin, ROOT)
    except BuildError as e:  # nothing can be built (no nvcc, a bad build config)
        raise SystemExit(f"ablate: {e}") from None
    base = built[first.base.name]
    for name, job in todo.items():
        var = built[job.variant.name]
        if base.ok and var.ok and not_applicable(job.variant, base, var):
            out[name] = "equal machine code"
    return out


def _job_of(cfg):
    """The Job of a composed config; SystemExit naming the problem."""
    from ablate.pipeline import job_of

    try:
        return job_of(cfg, OmegaConf.select(cfg, "hydra.runtime.choices.shape", default=None))
    except ValueError as e:
        raise SystemExit(f"ablate: {e}") from None
