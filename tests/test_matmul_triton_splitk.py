"""matmul_triton's split-K, tail-split and strip candidates on the CPU: the kernel run in Triton's
interpreter (TRITON_INTERPRET=1, CPU tensors) against an FP32 reference, each launch twice on one
workspace (the counters back at 0 after each); which shapes time them (spec.candidates); the pathologies
over a split-K base, built for sm_90, keep their fingerprints or are declared not applicable.

The interpreter runs the programs of a grid one after another, so it checks the arithmetic and
the bookkeeping (each tile's splits, the slots, the last program's sum, the fallback where the
workspace is too small, the counters' reset), not the ordering between programs running at once
(the barrier and the acquire-release atomic), which only a GPU exercises."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ablate.job import plugins

ROOT = Path(__file__).resolve().parents[1]
MATMUL = plugins.load("matmul_triton")
SPEC = MATMUL.spec
SPLIT = [n for n, c in SPEC.CANDIDATES.items() if c.get("SPLIT_K", 1) > 1]
TAILS = [n for n, c in SPEC.CANDIDATES.items() if c.get("TAIL_SPLIT", 1) > 1]
# (m, n, k, dtype, candidate, USE_TMA, workspace elements or None for the spec's[, META overrides]):
# partial tiles in m and n, a K tail, a split left empty (64 x 96 x 640: 5 K steps of 128 over 4
# splits of 2), m = 1, TMA loads (descriptors made by the host, and on the device) and pointer
# loads, and a workspace too small for the split (the kernel's fallback). FP16 only: Triton
# 3.6's interpreter gets BF16 wrong for every candidate (the base's m64_tiles and m64_ptr too:
# errors of 3e10 at 100 x 72 x 1000, 2026-12-02), numpy having no BF16
CASES = [(64, 96, 640, "fp16", "splitk2", False, None), (64, 96, 640, "fp16", "splitk4", False, None),
         (100, 72, 1000, "fp16", "splitk4", False, None), (100, 72, 1000, "fp16", "splitk8", False, None),
         (100, 72, 1000, "fp16", "splitk3", False, None),
         (100, 72, 1000, "fp16", "splitk4_n128", False, None), (100, 72, 1000, "fp16", "splitk2", True, None),
         (100, 72, 1000, "fp16", "splitk4", True, None), (1, 200, 1000, "fp16", "splitk4", True, None),
         (100, 72, 1000, "fp16", "splitk4", True, None, {"HOST_TMA": False}),
         (100, 72, 1000, "fp16", "splitk4", False, 4096)]


def interpreted(cases):
    """[[relative error, counters' sum, workspace written] of each of two launches] of each case,
    run in Triton's interpreter (tests/matmul_splitk_interpreted.py); a skip where it cannot."""
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "matmul_splitk_interpreted.py"), json.dumps(cases)],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    said = json.loads(done.stdout.strip().splitlines()[-1])
    if "skip" in said:
        pytest.skip(f"Triton's interpreter cannot run the kernel here: {said['skip']}")
    return said["runs"]


def test_split_k_computes_c_in_the_interpreter_and_leaves_the_counters_at_zero():
    for case, runs in zip(CASES, interpreted(CASES)):
        fallback = case[6] is not None
        for err, locks, written in runs:
            assert err <= SPEC.TOLERANCE[case[3]], (case, err)
            assert locks == 0, (case, "counters left", locks)
            assert written != fallback, (case, "workspace written" if written else "workspace untouched")
        assert runs[0][0] == runs[1][0], case  # the partials summed in one order: the same C again


# The tail split (TAIL_SPLIT) on a persistent grid of a few programs: (m, n, k, dtype, candidate,
# USE_TMA, workspace or None, META overrides, whether the tail is split). 9 tiles on 4 programs:
# 8 whole, the last split 4 ways (of 16 K steps; of 5, the last split empty); 12 odd tiles (partial
# in m and n, a K tail) on 5: 2 split 2 ways; 4 tiles on 8 programs: no full wave, each split 2
# ways; 9 on 5: the last wave 4 of 5, whole; the workspace smaller than a tile; 6 tiles on 2
# programs: no tail. 128 x 256 tiles too, and descriptors made on the device.
TAIL = [(384, 384, 1000, "fp16", "square_tail", True, None, {"NUM_SMS": 4}, True),
        (384, 384, 320, "fp16", "square_tail", False, None, {"NUM_SMS": 4}, True),
        (264, 392, 200, "fp16", "square_tail", True, None, {"NUM_SMS": 5}, True),
        (200, 256, 1000, "fp16", "square_tail", False, None, {"NUM_SMS": 8}, True),
        (384, 384, 1000, "fp16", "square_tail", True, None, {"NUM_SMS": 5}, False),
        (384, 384, 1000, "fp16", "square_tail", True, 4096, {"NUM_SMS": 4}, False),
        (300, 600, 1000, "fp16", "wide_tail", True, None, {"NUM_SMS": 4}, True),
        (256, 768, 1000, "fp16", "wide_tail", True, None, {"NUM_SMS": 2}, False),
        (384, 384, 1000, "fp16", "square_tail", True, None, {"NUM_SMS": 4, "HOST_TMA": False}, True)]


def test_the_tail_split_computes_c_in_the_interpreter_and_leaves_the_counters_at_zero():
    for case, runs in zip(TAIL, interpreted([case[:-1] for case in TAIL])):
        m, n, k, dtype, candidate, _, ws, meta, split = case
        shape = {"m": m, "n": n, "k": k, "dtype": dtype}
        if ws is None:  # spec.tail_split, which prunes the timing, says what the kernel does
            assert (SPEC.tail_split(shape, {**SPEC.base_meta_of(candidate), **meta}) > 1) == split, case
        for err, locks, written in runs:
            assert err <= SPEC.TOLERANCE[case[3]], (case, err)
            assert locks == 0, (case, "counters left", locks)
            assert written == case[-1], (case, "workspace written" if written else "workspace untouched")
        assert runs[0][0] == runs[1][0], case


def test_the_tail_split_launches_a_program_an_sm_and_is_timed_where_it_splits():
    """Its grid: NUM_SMS programs even under a wave of tiles (the idle ones split the tail); the
    same tile without it launches one a tile there. Timed only where the tail is split: 1616 x 2864
    (299 tiles of 128 x 128, 35 past two waves: 3 ways; 156 of 128 x 256, 24 past one: 4 ways),
    not at 5824 x 608 (230: the last wave 98 of 132) nor on full waves (1536 x 1408: 132)."""
    def at(m, n, k):
        return {"m": m, "n": n, "k": k, "dtype": "fp16"}

    assert SPEC.grid(at(200, 256, 1000), SPEC.base_meta_of("square_tail")) == (SPEC.META["NUM_SMS"],)
    assert SPEC.grid(at(200, 256, 1000), SPEC.base_meta_of("square_w4")) == (4,)
    assert SPEC.tail_split(at(1616, 2864, 3296), SPEC.base_meta_of("square_tail")) == 3
    assert SPEC.tail_split(at(1616, 2864, 3296), SPEC.base_meta_of("wide_tail")) == 4
    assert {"square_tail", "wide_tail"} <= set(SPEC.candidates(at(1616, 2864, 3296)))
    for shape in (at(5824, 608, 3280), at(1536, 1408, 1024)):
        assert "square_tail" not in SPEC.candidates(shape), shape
    assert SPEC.tail_split(at(1616, 2864, 3), SPEC.base_meta_of("square_tail")) == 1  # one K step
    assert SPEC.tail_split(at(320, 464, 208), SPEC.base_meta_of("square_tail")) == 4  # split, but k < 1024:
    assert "square_tail" not in SPEC.candidates(at(320, 464, 208))  # not timed


# Tiles widened by a strip (STRIP_N): (m, n, k, dtype, candidate, USE_TMA, None, META overrides).
# 128 x 320 over 200 x 360 (a second column of tiles whose strip is past n) on 2 persistent
# programs, TMA loads and pointer loads; 128 x 192 over 264 x 392 x 200 (the strip of the last
# column wholly past n, a K tail) on 3, descriptors from the host and from the device; 520 x 600 on
# 4 programs of several tiles each, grouped by 2, C by its TMA descriptor (the candidate's C leaves by
# pointers); a program per tile of 64 x 128.
STRIPS = [(200, 360, 200, "fp16", "wide_strip", True, None, {"NUM_SMS": 2}),
          (200, 360, 200, "fp16", "wide_strip", False, None, {"NUM_SMS": 2}),
          (264, 392, 200, "fp16", "wide_strip", True, None, {"NUM_SMS": 3, "BLOCK_N": 128}),
          (264, 392, 200, "fp16", "wide_strip", True, None, {"NUM_SMS": 3, "BLOCK_N": 128, "HOST_TMA": False}),
          (520, 600, 136, "fp16", "wide_strip", True, None,
           {"NUM_SMS": 4, "GROUP_M": 2, "TMA_STORE": True}),
          (520, 600, 136, "fp16", "wide_strip", True, None, {"PERSISTENT": False, "BLOCK_M": 64, "BLOCK_N": 64})]


def test_the_strip_tiles_compute_c_in_the_interpreter():
    for case, runs in zip(STRIPS, interpreted(STRIPS)):
        for err, locks, written in runs:
            assert err <= SPEC.TOLERANCE[case[3]], (case, err)
            assert (locks, written) == (0, False), case  # no workspace


def test_a_strip_widens_the_tiles_the_grid_counts():
    """1616 x 2864: 117 tiles of 128 x 320, one wave of the 132 SMs (156 of 128 x 256), and the
    strip's own descriptor from the host, B's block STRIP_N wide."""
    shape = {"m": 1616, "n": 2864, "k": 3296, "dtype": "fp16"}
    meta = SPEC.base_meta_of("wide_strip")
    assert SPEC.tiles(shape, meta) == 13 * 9 and SPEC.tiles(shape, SPEC.META) == 13 * 12
    assert SPEC.grid(shape, meta) == (117,)
    assert SPEC.descriptors(meta)["s_host"] == ("b", (32, 64))
    assert SPEC.descriptors(meta)["c_host"] is None  # C by pointers (TMA_STORE off)
    assert SPEC.descriptors(SPEC.META)["s_host"] is None
    assert SPEC.descriptors({**meta, "USE_TMA": False})["s_host"] is None


def test_split_k_is_timed_where_few_tiles_meet_a_long_k_and_the_workspace_holds_it():
    """spec.candidates: the worst shapes of the H200's random check (2026-12-02) time them;
    shapes of two waves of 64 x 64 tiles or more, or k < 1024, do not; every other candidate is
    timed everywhere, and static mode's choice never names one."""
    def at(m, n, k):
        return {"m": m, "n": n, "k": k, "dtype": "fp16"}

    others = [n for n in SPEC.CANDIDATES if n not in SPLIT and n not in TAILS]

    def timed(shape):  # the tail-split candidates, timed where their tail splits, are the next test's
        return [n for n in SPEC.candidates(shape) if n not in TAILS]

    for s in (at(704, 240, 5472), at(784, 288, 2448), at(208, 1328, 1712), at(880, 496, 1664)):
        assert timed(s) == others + SPLIT, s
        assert SPEC.choose(s) not in SPLIT
    # 224 tiles of 64 x 64: 8 splits of them need 7.3M elements, past the workspace's 2^22
    assert timed(at(896, 1008, 3808)) == others + [n for n in SPLIT if n != "splitk8"]
    for s in (at(2048, 2048, 2048), at(704, 240, 1008), at(64, 96, 640)):
        assert timed(s) == others, s
    # the workspace, at its cap, holds no split of 64 x 64 tiles past 2^22 / 8 / 4096 = 128 tiles
    big = at(8192, 8192, 8192)
    assert SPEC.workspace_size(big) == 2 ** 22 and not SPEC.split_fits(big, SPEC.base_meta_of("splitk2"))
    assert SPEC.grid(at(704, 240, 5472), SPEC.base_meta_of("splitk4")) == (11 * 4 * 4,)
    # one specialization of the workspace's sizes at every shape: multiples of 16, never 1
    for s in (at(1, 16, 16), at(16, 16, 16), at(264, 264, 264), at(9000, 9000, 16)):
        assert SPEC.workspace_size(s) % 16 == 0 and SPEC.lock_count(s) % 16 == 0, s
        assert SPEC.lock_count(s) > -(-s["m"] // 16) * -(-s["n"] // 16) or SPEC.lock_count(s) == 2 ** 16, s


def pathologies_over(candidate, shape_yaml, m, n, k, declared_na, marker):
    """Static jobs at m x n x k moved onto `candidate`, as a GPU's timing would move them: those
    in `declared_na` are declared not applicable with why; the others build and keep their
    fingerprints over a base whose META holds `marker` (no_fp_fusion: equal machine code, as at
    every shape)."""
    pytest.importorskip("triton")
    from ablate.job.job import make_job, with_tuned
    from ablate.pipeline import run_job
    from conftest import kept_build_dir

    def job(pathology):
        cfg = plugins.compose("matmul_triton", [f"pathology={pathology}", f"shape={shape_yaml}", f"shape.m={m}",
                                                f"shape.n={n}", f"shape.k={k}", "mode=static", "build.arch=sm_90",
                                                f"build.dir={kept_build_dir('triton')}"])
        return with_tuned(make_job(cfg, f"{candidate}_{m}x{n}x{k}"), {"kind": "candidates", "candidate": candidate})

    names = [p for p in MATMUL.options("pathology") if not p.startswith("tune_") and p != "none"]
    outcomes = {p: run_job(job(p)) for p in names}
    declared = {p for p, r in outcomes.items() if r.status == "not_applicable" and "declares it not applicable" in r.error}
    assert declared == declared_na, {p: outcomes[p].error for p in outcomes}
    for name, r in outcomes.items():
        if name in declared or name == "no_fp_fusion":
            assert r.status == "not_applicable", (name, r.status, r.error)
            continue
        assert r.status == "static" and r.metrics["fingerprint_ok"] == 1, (name, r.status, r.error)
        assert marker in r.params["base_meta"], name


def test_pathologies_over_a_split_k_base_keep_their_fingerprints_or_are_declared_not_applicable():
    """At 704 x 240 x 5472 on splitk4: the pathologies that would compile to the split-K base's
    machine code (not_persistent, no_tma_store: the split-K programs read neither flag;
    small_tiles: 64 x 64 already) are declared not applicable."""
    pathologies_over("splitk4", "decode_m64_bf16", 704, 240, 5472, {"not_persistent", "no_tma_store", "small_tiles"},
                     '"SPLIT_K": 4')


def test_pathologies_over_a_tail_split_base_keep_their_fingerprints_or_are_declared_not_applicable():
    """At 1616 x 2864 x 3296 (299 tiles of 128 x 128: 35 past two waves, split 3 ways) on
    square_tail: not_persistent, which would take the tail split with the persistent grid, is
    declared not applicable."""
    pathologies_over("square_tail", "sq4k_fp16", 1616, 2864, 3296, {"not_persistent"}, '"TAIL_SPLIT": 4')


def test_pathologies_over_a_strip_base_keep_their_fingerprints():
    """At 1616 x 2864 x 3296 on wide_strip (117 tiles of 128 x 320): every pathology applies (the
    strip's tiles keep the tile loop apart from the K loop, persistent or not) and keeps its
    fingerprint, but no_tma_store (the candidate stores C by pointers already)."""
    pathologies_over("wide_strip", "sq4k_fp16", 1616, 2864, 3296, {"no_tma_store"}, '"STRIP_N": 64')
