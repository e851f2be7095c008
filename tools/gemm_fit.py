"""cutlass_gemm's pool speeds (base/choice.def's GEMM_POOL rows) scored against measured readings,
and fitted to them.

    python tools/gemm_fit.py [--readings FILE.json ...] [--fit] [--add NAME=TMxTN/CMxCN ...]
                             [--drop NAME ...] [--hold NAME:off|half|on|unswizzled=SPEED ...] [--grid 5]
                             [--holdout SET ...] [--keep NAME --measured TEXT]

A reading is one shape's speed of each build measured beside cuBLAS (cuBLAS time / the build's,
1 = as fast): `python tools/gemm_candidates.py --json FILE` writes them, and
kernels/cutlass_gemm/base/pool_readings.json keeps the ones the pool's speeds were fitted to
(each set with where and when it was measured). Only the shapes the table hands to the pool count
(the `fastest` row of choice.def). For each, the wave model (spec.fastest) picks among the pool's
builds measured there; the score is the geometric mean of the pick's speed over the best of them,
printed overall and by where the rows start (k * 2 bytes off 64-byte half-lines, on a half-line,
on a 128-byte line), with the worst reading.

--fit searches the speeds (percent, on a --grid step from 50 to 100, each in turn, every one
tried again until none gains; ties go to the value nearest 100, the least extreme) from the
table's, and prints the GEMM_POOL rows of the best it found. --hold keeps a speed where the
readings alone would move it, --add scores a tuning build as if it were in the pool (its tile and
cluster given), --drop leaves one out.

--holdout SET leaves a set of readings out of the fit and scores both pools on it after: how
well the fitted speeds hold where they were not fitted.

--keep NAME --measured TEXT adds the readings of the other files given (gemm_candidates' JSON) to
the committed ones as a set of that name, TEXT saying on what GPU, when and at which commit they
were measured, so that the next fit has them too.

--table scores the table's own rows instead (the shapes it does not hand to the pool: m <= 256,
or up to half a wave), on kernels/cutlass_gemm/base/table_readings.json (or --readings): the
first row's pick over the best build measured, by set; --choice FILE scores another table (an
earlier choice.def, as `git show REV:kernels/cutlass_gemm/base/choice.def` writes it). With
--keep it adds to the table's readings.
"""
import argparse
import json
import math
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ablate.job import plugins  # noqa: E402

spec = plugins.load("cutlass_gemm").spec  # the table, the pool, the wave model

READINGS = ROOT / "kernels" / "cutlass_gemm" / "base" / "pool_readings.json"
TABLE_READINGS = READINGS.with_name("table_readings.json")  # where the table's own rows pick
CLASSES = ("off", "half", "on", "unswizzled")  # the pool's four speeds, in order (the last: on a line, unswizzled)
HOLD = {}  # speeds kept by default (none: since the unswizzled speed, large's on-line one fits at 100)


def load(paths, pool=True):
    """[{"set", "shape", "speeds"}] of every reading in `paths` (pool_readings.json's form: a
    "sets" list; or gemm_candidates' --json output: shape name -> {"shape", "vs_cublas"}),
    the readings of shapes the table does not hand to the pool left out (pool=False: those of
    shapes it does)."""
    readings = []
    for path in paths:
        data = json.loads(Path(path).read_text())
        if "sets" in data:
            sets = [(s["name"], s["readings"]) for s in data["sets"]]
        else:
            sets = [(Path(path).name, [{"shape": r["shape"], "speeds": r["vs_cublas"]} for r in data.values()])]
        for name, rows in sets:
            for r in rows:
                speeds = {b: v for b, v in r["speeds"].items() if b in spec.CANDIDATES}
                if speeds and to_pool(r["shape"]) == pool:
                    readings.append({"set": name, "shape": r["shape"], "speeds": speeds})
    return readings


def to_pool(shape):
    """Whether the table's first row that holds at `shape` is `fastest` (a pool of one entry
    named after that row tells it apart from every configuration the table names)."""
    return spec.choice(shape, spec.SMS, pool=[(spec.FASTEST, 1, 1, 1, 1, 1, 1, 1, 1)]) == spec.FASTEST


def geomean(logs):
    """exp of the mean of natural logs (nan for none)."""
    return math.exp(sum(logs) / len(logs)) if logs else float("nan")


def score(readings, pool):
    """(geometric mean of the pick's speed / the best's, [(mean, worst, count) by row class],
    the worst reading and its pick): the pool's builds measured at each reading only."""
    logs, worst = ([], [], []), None
    for r in readings:
        here = [row for row in pool if row[0] in r["speeds"]]
        if not here:
            continue
        pick = spec.fastest(r["shape"], spec.SMS, here)
        ratio = r["speeds"][pick] / max(r["speeds"][row[0]] for row in here)
        logs[spec.row_class(r["shape"]["k"])].append(math.log(ratio))
        if worst is None or ratio < worst[0]:
            worst = (ratio, r, pick)
    every = [x for c in logs for x in c]
    if not every:
        raise SystemExit("error: no reading measured a build of the pool at a shape the table hands to it")
    return geomean(every), [(geomean(c), math.exp(min(c)) if c else float("nan"), len(c)) for c in logs], worst


def table_score(readings, text=None):
    """({set: (geometric mean of the table's pick over the best build measured, readings)}, the same over all,
    the worst (ratio, reading, pick)): the rows of choice.def (or of `text`), at the readings
    where their pick was measured."""
    table, pool = spec.choice_table(text), spec.pool_table(text)  # parsed once, not per reading
    logs, worst = {}, None
    for r in readings:
        pick = spec.choice(r["shape"], spec.SMS, table=table, pool=pool)
        if pick not in r["speeds"]:
            continue
        ratio = r["speeds"][pick] / max(r["speeds"].values())
        logs.setdefault(r["set"], []).append(math.log(ratio))
        if worst is None or ratio < worst[0]:
            worst = (ratio, r, pick)
    if not logs:
        raise SystemExit("error: no reading measured the table's pick at a shape its own rows choose")
    return ({name: (geomean(xs), len(xs)) for name, xs in logs.items()},
            geomean([x for xs in logs.values() for x in xs]), worst)


def describe_table(label, readings, text=None):
    by_set, total, (ratio, worst, pick) = table_score(readings, text)
    counts = {}
    for r in readings:
        counts[r["set"]] = counts.get(r["set"], 0) + 1
    lines = [f"{label}: {total:.3f} of the best build measured (geometric mean over the readings that measured its pick)"]
    lines += [f"  {name:<10} {value:.3f} over {n} of {counts[name]} readings" for name, (value, n) in by_set.items()]
    s = worst["shape"]
    best = max(worst["speeds"], key=worst["speeds"].get)
    lines.append(f"  worst: {ratio:.3f} at m = {s['m']}, n = {s['n']}, k = {s['k']} ({worst['set']}): "
                 f"{pick} {worst['speeds'][pick]:.3f} of cuBLAS, {best} {worst['speeds'][best]:.3f}")
    return lines


def fit(readings, pool, hold, grid=5, seed=0):
    """The pool with speeds searched as the module says (`hold`: {(name, class): speed} kept)."""
    speeds = {row[0]: list(row[5:9]) for row in pool}
    shapes = {row[0]: row[1:5] for row in pool}
    for (name, cls), value in hold.items():
        if name in speeds:
            speeds[name][CLASSES.index(cls)] = value

    def current():
        return [(n, *shapes[n], *speeds[n]) for n in speeds]
    best = score(readings, current())[0]
    keys = [(n, c) for n in speeds for c in range(len(CLASSES)) if (n, CLASSES[c]) not in hold]
    rng = random.Random(seed)
    gained = True
    while gained:
        gained = False
        rng.shuffle(keys)
        for name, c in keys:
            for value in range(50, 101, grid):
                old = speeds[name][c]
                if value == old:
                    continue
                speeds[name][c] = value
                s = score(readings, current())[0]
                if s > best + 1e-9 or (abs(s - best) <= 1e-9 and abs(value - 100) < abs(old - 100)):
                    gained = gained or s > best + 1e-9
                    best = s
                else:
                    speeds[name][c] = old
    return current()


def keep(name, measured, paths, into=None):
    """Add every reading of `paths` (gemm_candidates' --json output; the table's `fastest` row
    or not: the fit leaves out what does not reach the pool) to `into` (the committed readings,
    the pool's or the table's) as the set `name`; how many. The base's reading ("chosen") counts
    as the table's pick where no tuning build of it was measured: keep readings under the rows
    they were measured with."""
    into = READINGS if into is None else into
    data = json.loads(Path(into).read_text())
    if name in {s["name"] for s in data["sets"]}:
        raise SystemExit(f"error: --keep {name!r}: {into} has a set of that name already")
    if not measured.strip():
        raise SystemExit("error: --keep needs --measured: the GPU, the date and the commit the readings are from")
    readings = []
    for path in paths:
        for shape_name, r in json.loads(Path(path).read_text()).items():
            speeds = {b: round(v, 4) for b, v in r["vs_cublas"].items() if b in spec.CANDIDATES}
            shape = {k: r["shape"][k] for k in ("m", "n", "k", "dtype")}
            pick = spec.choice(shape)  # the base's build ran the table's pick: its reading, where no tuning build of it ran
            if "chosen" in r["vs_cublas"] and pick in spec.CANDIDATES and pick not in speeds:
                speeds[pick] = round(r["vs_cublas"]["chosen"], 4)
            readings.append({"name": shape_name, "shape": shape, "speeds": speeds})
    if not readings:
        raise SystemExit(f"error: --keep {name!r}: no readings in {', '.join(map(str, paths)) or 'no file'}")
    data["sets"].append({"name": name, "measured": measured,
                         "command": "python tools/gemm_candidates.py ... --json FILE", "readings": readings})
    Path(into).write_text(json.dumps(data, indent=1) + "\n")
    return len(readings)


def parse_add(text):
    """NAME=TMxTN/CMxCN -> (name, tile M, tile N, cluster M, cluster N, 100, 100, 100, 100)."""
    try:
        name, rest = text.split("=")
        tile, cluster = rest.split("/")
        numbers = [int(x) for x in tile.split("x") + cluster.split("x")]
        if len(numbers) != 4:
            raise ValueError
    except ValueError:
        raise SystemExit(f"error: --add {text!r}: expected NAME=TMxTN/CMxCN, as n288=128x288/2x1") from None
    if name not in spec.CANDIDATES:
        raise SystemExit(f"error: --add {text!r}: {name!r} is not one of spec.CANDIDATES ({', '.join(spec.CANDIDATES)})")
    return (name, *numbers, 100, 100, 100, 100)


def parse_hold(text):
    """NAME:off|half|on|unswizzled=SPEED -> ((name, class), speed)."""
    try:
        key, value = text.split("=")
        name, cls = key.split(":")
        value = int(value)
    except ValueError:
        raise SystemExit(f"error: --hold {text!r}: expected NAME:off|half|on|unswizzled=SPEED, as large:on=100") from None
    if cls not in CLASSES or not 1 <= value <= 100:
        raise SystemExit(f"error: --hold {text!r}: the class must be one of {', '.join(CLASSES)} and the speed 1-100")
    return (name, cls), value


def describe(label, readings, pool):
    total, by_class, (ratio, worst, pick) = score(readings, pool)
    lines = [f"{label}: {total:.3f} of the best build measured (geometric mean over {sum(c[2] for c in by_class)} readings)"]
    lines += [f"  rows {cls:<4} {m:.3f} (worst {w:.3f}) over {n}" for cls, (m, w, n) in zip(CLASSES[:3], by_class)]
    s = worst["shape"]
    best = max((b for b in worst["speeds"] if b in {row[0] for row in pool}), key=worst["speeds"].get)
    lines.append(f"  worst: {ratio:.3f} at m = {s['m']}, n = {s['n']}, k = {s['k']} ({worst['set']}): "
                 f"{pick} {worst['speeds'][pick]:.3f} of cuBLAS, {best} {worst['speeds'][best]:.3f}")
    return lines


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--readings", nargs="+", default=[str(READINGS)], help="readings files (default: the committed ones)")
    p.add_argument("--fit", action="store_true", help="search the speeds and print the GEMM_POOL rows found")
    p.add_argument("--add", action="append", default=[], help="NAME=TMxTN/CMxCN: a tuning build scored as in the pool")
    p.add_argument("--drop", action="append", default=[], help="a configuration of the pool left out")
    p.add_argument("--hold", action="append", default=None,
                   help="NAME:off|half|on|unswizzled=SPEED kept in the fit (default: none)")
    p.add_argument("--grid", type=int, default=5, help="the speeds' step in percent")
    p.add_argument("--holdout", action="append", default=[],
                   help="a set of the readings the fit does not see; both pools are scored on it after")
    p.add_argument("--keep", default=None, help="add the other readings files to the committed ones as this set")
    p.add_argument("--measured", default="", help="with --keep: on what GPU, when and at which commit")
    p.add_argument("--table", action="store_true", help="score the table's own rows on the table's readings")
    p.add_argument("--choice", default=None, help="with --table: another choice.def to score beside this one")
    args = p.parse_args(argv)
    committed = TABLE_READINGS if args.table else READINGS
    if args.table and args.readings == [str(READINGS)]:
        args.readings = [str(TABLE_READINGS)]
    if args.keep is not None:
        others = [r for r in args.readings if Path(r).resolve() != committed.resolve()]
        count = keep(args.keep, args.measured, others, committed)
        print(f"kept {count} readings as the set {args.keep!r} in {committed}")
        args.readings = [str(committed)]
    if args.table:
        readings = load(args.readings, pool=False)
        print("\n".join(describe_table("choice.def's rows", readings)))
        if args.choice is not None:
            try:
                text = Path(args.choice).read_text()
            except OSError as e:
                raise SystemExit(f"error: --choice {args.choice}: {e.strerror}") from None
            print("\n".join(describe_table(f"{args.choice}'s rows", readings, text)))
        return
    if not 1 <= args.grid <= 50:
        raise SystemExit(f"error: --grid {args.grid}: must be 1-50 (percent)")
    pool = spec.pool_table()
    unknown = [n for n in args.drop if n not in {row[0] for row in pool}]
    if unknown:
        raise SystemExit(f"error: --drop {unknown}: not in the pool ({', '.join(row[0] for row in pool)})")
    pool = [row for row in pool if row[0] not in args.drop] + [parse_add(a) for a in args.add]
    hold = dict(parse_hold(h) for h in args.hold) if args.hold is not None else dict(HOLD)
    readings = load(args.readings)
    unknown = sorted(set(args.holdout) - {r["set"] for r in readings})
    if unknown:
        raise SystemExit(f"error: --holdout {unknown}: no such set ({', '.join(sorted({r['set'] for r in readings}))})")
    held_out = [r for r in readings if r["set"] in args.holdout]
    readings = [r for r in readings if r["set"] not in args.holdout]
    print("\n".join(describe("choice.def's pool" + (" (changed by --add/--drop)" if args.add or args.drop else ""),
                             readings, pool)))
    if args.fit:
        fitted = fit(readings, pool, hold, args.grid)
        print("\n".join(describe(f"fitted (held: {', '.join(f'{n}:{c}={v}' for (n, c), v in hold.items()) or 'none'})",
                                 readings, fitted)))
        if held_out:
            for label, which in (("choice.def's pool", pool), ("fitted", fitted)):
                print("\n".join(describe(f"held out ({', '.join(args.holdout)}), {label}", held_out, which)))
        for name, *numbers in fitted:
            print(f"GEMM_POOL({name}, {', '.join(map(str, numbers))})")


if __name__ == "__main__":
    main()
