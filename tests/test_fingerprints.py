"""Every pathology of every kernel changes the machine code the way its yaml says (issue 4),
checked on real nvcc builds without a GPU; and what fails is reported by the pathology's name."""
import pytest

from ablate.job import fingerprint
from ablate.build import static
from ablate.job.variant import Variant, VariantError, variant_from_cfg
from conftest import NOT_BUILT
from test_build import ATTENTION, EVERY_PATHOLOGY

KERNEL_DIR = ATTENTION.dir
# The generic pathologies (conf/generic/) whose machine code equals the base's in each shipped
# kernel: not_applicable (docs/design.md's table); those a kernel declares so are not built.
NOT_APPLICABLE = {"attention": {"no_restrict", "no_launch_bounds", "no_l1"},
                  "rmsnorm": {"no_restrict", "no_l1", "strict_fp"},
                  "attention_hopper": {"no_restrict", "no_l1"},
                  "cutlass_gemm": set()}
DECLARED = {"attention_hopper": {"regs_capped", "no_launch_bounds"},
            "cutlass_gemm": {"no_unroll", "no_forceinline", "regs_capped", "no_restrict", "strict_fp"}}
# those the tests do not build (conftest's NOT_BUILT) are reported skipped, with why
REAL = [pytest.param(k, p, marks=pytest.mark.skip(reason=NOT_BUILT[k][p])) if p in NOT_BUILT.get(k, {}) else (k, p)
        for k, p in EVERY_PATHOLOGY if p != "none" and p not in DECLARED.get(k, ())]
LAUNCH_ONLY = {"half_sms"}  # the base's code, launched otherwise


def analyse(built, name):
    report = built.sass(name)
    return static.static_metrics(built.results[name], built.plugin.spec, None, report), report["text"]


def problems_of(built, variant):
    metrics, text = analyse(built, variant.name)
    base_metrics, base_text = analyse(built, "none")
    return fingerprint.check(variant, metrics, base_metrics, text, base_text)


@pytest.mark.parametrize("kernel, name", REAL)
def test_the_pathology_fingerprint_holds(built_kernels, kernel, name):
    built = built_kernels[kernel]
    if name in built.errors:
        pytest.fail(str(built.errors[name]))
    variant = built.variants[name]
    # a tunable's generated neighbour (tune_*, ablate/job/tunables.py) needs none: its SASS must differ
    assert variant.specs[name].get("fingerprint") or variant.specs[name].get("tuned"), \
        f"{kernel}/{name} declares no fingerprint"
    if name in NOT_APPLICABLE.get(kernel, ()):  # not_applicable: nothing to fingerprint
        from ablate.pipeline import not_applicable

        why = not_applicable(variant, built.results["none"], built.results[name])
        assert why and "machine code equals the base's" in why
        return
    assert problems_of(built, variant) == []


@pytest.mark.parametrize("kernel, name", REAL)
def test_the_pathology_sass_differs_from_the_base(built_kernels, kernel, name):
    built = built_kernels[kernel]
    if name in built.errors:
        pytest.fail(str(built.errors[name]))
    same = name in NOT_APPLICABLE.get(kernel, ()) or name in LAUNCH_ONLY or bool(built.variants[name].launch_only)
    assert (built.sass(name)["text"] == built.sass("none")["text"]) == same


@pytest.mark.parametrize("kernel, name", REAL)
def test_the_pathology_states_its_mechanism_and_prediction(built_kernels, kernel, name):
    spec = built_kernels[kernel].variants[name].specs[name]
    # A calibration replaces no seam; it states the effect it has by construction instead; a
    # generic pathology replaces none either, and says what equal machine code means.
    if "truth" in spec:
        first = "truth"
    elif spec.get("generic"):
        first = "sm_fraction" if name in LAUNCH_ONLY else "unchanged_means"
    else:
        first = "seam"
    for field in (first, "mechanism", "expected"):
        assert spec.get(field), f"{kernel}/{name}: no {field}"


def test_a_failing_fingerprint_is_reported_by_name_with_the_numbers(built):
    spec = dict(built.variants["extra_syncthreads"].specs["extra_syncthreads"],
                fingerprint={"sass.bar": "decreases", "sass.ldsm": "same"})
    variant = variant_from_cfg({"extra_syncthreads": spec}, KERNEL_DIR)
    metrics, _ = analyse(built, "extra_syncthreads")
    base_metrics, _ = analyse(built, "none")
    problems = problems_of(built, variant)
    assert problems == [f"extra_syncthreads: fingerprint sass.bar: decreases does not hold: "
                        f"extra_syncthreads has {metrics['sass.bar']}, the base "
                        f"{base_metrics['sass.bar']}"]


def test_a_pathology_without_fingerprint_is_reported_by_name(built):
    r = built.results["unfingerprinted"]
    assert r.status == "built"
    problems = problems_of(built, built.variants["unfingerprinted"])
    assert len(problems) == 1
    assert problems[0].startswith("unfingerprinted: no fingerprint")


def test_a_pathology_whose_sass_equals_the_base_is_reported(built):
    """noop's fingerprint (sass.bar: same) holds, but it changes nothing that runs."""
    problems = problems_of(built, built.variants["noop"])
    assert len(problems) == 1
    assert problems[0].startswith("noop: SASS equals the base's (")


def test_the_base_has_nothing_to_check(built):
    assert problems_of(built, built.variants["none"]) == []


def test_combined_pathologies_check_each_fingerprint(built):
    combined = variant_from_cfg({**{n: built.variants[n].specs[n] for n in ("fp32_accum",)},
                                 "unfingerprinted": built.variants["unfingerprinted"].specs[
                                     "unfingerprinted"]}, KERNEL_DIR)
    # Numbers of fp32_accum's own build stand in for the pair's: only the names matter here.
    metrics, text = analyse(built, "fp32_accum")
    base_metrics, base_text = analyse(built, "none")
    problems = fingerprint.check(combined, metrics, base_metrics, text, base_text)
    assert [p.split(":")[0] for p in problems] == ["unfingerprinted"]


def test_a_pair_whose_rules_overlap_reads_correctly(built_kernels):
    """rmsnorm's scalar_loads (every load 16-bit: no 128-bit load left) with two_pass (x read
    twice: `sass.ldg_128: increases`). Against the base, two_pass's rule cannot hold in the pair
    and a correct combination read as a failure; checked against the variant without it
    (scalar_loads alone), the two overlap on that metric: a note, and the fingerprint holds."""
    from ablate.job import plugins
    from ablate.job.job import make_job
    from ablate.pipeline import run_job

    b = built_kernels["rmsnorm"]
    cfg = plugins.compose("rmsnorm", ["pathology=[scalar_loads,two_pass]", "mode=static", "build.arch=sm_90",
                                      f"build.dir={b.build_cfg.dir}", f"build.nvcc={b.build_cfg.nvcc}"])
    job = make_job(cfg)
    assert {p: v.name for p, v in job.rests.items()} == {"scalar_loads": "two_pass", "two_pass": "scalar_loads"}
    out = run_job(job)
    assert out.status == "static" and out.error is None and out.metrics["fingerprint_ok"] == 1
    notes = out.params["fingerprint_notes"]
    assert ("two_pass: fingerprint sass.ldg_128: increases not checked in scalar_loads+two_pass: the other "
            "pathologies change sass.ldg_128 too (the base ") in notes
    # What the check against the base (rests not given) says of the same numbers: two_pass fails.
    base_metrics, base_text = analyse(b, "none")
    old = fingerprint.check(job.variant, out.metrics, base_metrics, "the pair's SASS", base_text)
    assert [p.split(":")[0] for p in old] == ["two_pass", "two_pass"]


def rest_case(rules, variant, rest, base, texts=("v", "r", "b")):
    """fingerprint.check of pathology `p` combined with `q`, on numbers given: the variant's,
    the rest's (the variant without p, i.e. q alone) and the base's of one metric `m`."""
    specs = {"p": {"fingerprint": rules}, "q": {"fingerprint": {"n": "differs"}}}
    v = Variant(name="p+q", pathologies=("p", "q"), specs=specs)
    notes = []
    problems = fingerprint.check(v, {"m": variant, "n": 1}, {"m": base, "n": 0}, texts[0], texts[2],
                                 {"p": ("q", {"m": rest, "n": 1}, texts[1]), "q": ("p", {"m": variant, "n": 0}, "p")},
                                 notes)
    return problems, notes


def test_a_combined_variants_rule_fails_only_on_a_metric_the_others_leave_alone():
    """Checked against the rest: a rule that holds there passes; one that does not, where the
    rest changed that metric too, is an overlap (a note); where the rest left the metric as
    the base has it, the rule means what it meant alone, and its failure is a failure."""
    assert rest_case({"m": "same"}, variant=0, rest=0, base=124) == ([], [])        # holds against the rest
    problems, notes = rest_case({"m": "increases"}, variant=0, rest=0, base=124)   # the rest changed m: overlap
    assert problems == [] and notes == ["p: fingerprint m: increases not checked in p+q: the other pathologies "
                                        "change m too (the base 124, q 0, p+q 0)"]
    problems, notes = rest_case({"m": "increases"}, variant=124, rest=124, base=124)  # the rest left m alone
    assert problems == ["p: fingerprint m: increases does not hold in p+q: it has 124, q (without p) 124, as the base"]
    problems, notes = rest_case({"m": "zero"}, variant=3, rest=124, base=124)       # a bound reads the variant
    assert problems == ["p: fingerprint m: zero does not hold in p+q: it has 3, q (without p) 124, as the base"]
    problems, notes = rest_case({"m": "increases"}, variant=0, rest=0, base=0, texts=("same", "same", "b"))
    assert problems == [] and notes == ["p: masked in p+q: its SASS equals that of q (without p); its rules are "
                                        "not checked here"]
    problems, _ = rest_case({"m": "increases"}, variant=0, rest=0, base=0, texts=("b", "r", "b"))
    assert problems[-1].startswith("p+q: SASS equals the base's")  # still an error, whatever else


def test_an_unmeasured_metric_is_reported():
    variant = Variant(name="x", pathologies=("x",), specs={"x": {"fingerprint": {"d96.regs":
                                                                                "increases"}}})
    problems = fingerprint.check(variant, {"regs": 1}, {"regs": 1}, "a", "b")
    assert problems == ["x: fingerprint metric d96.regs was not measured (variant x)"]


@pytest.mark.parametrize("rule, value, base, ok", [
    ("increases", 3, 2, True), ("increases", 2, 2, False),
    ("decreases", 1, 2, True), ("decreases", 2, 2, False),
    ("differs", 1, 2, True), ("differs", 2, 2, False),
    ("same", 2, 2, True), ("same", 3, 2, False),
    ("zero", 0, 5, True), ("zero", 1, 0, False),
    ("nonzero", 1, 0, True), ("nonzero", 0, 5, False),
    ({"equals": 32}, 32, 128, True), ({"equals": 32}, 64, 32, False),
    ({"at_least": 4}, 4, 0, True), ({"at_least": 4}, 3, 9, False),
    ({"at_most": 4}, 4, 9, True), ({"at_most": 4}, 5, 0, False),
])
def test_fingerprint_rules(rule, value, base, ok):
    fingerprint.validate({"regs": rule})
    assert fingerprint.holds(rule, value, base) is ok


@pytest.mark.parametrize("bad, message", [
    ({"sass.hmma": "zero"}, "unknown metric 'sass.hmma'"),
    ({"reg": "increases"}, "unknown metric 'reg'"),
    ({"regs": "grows"}, "regs: unknown rule 'grows'"),
    ({"regs": {"equals": "32"}}, "needs a number"),
    ({"regs": {"equals": True}}, "needs a number"),
    ({"regs": {"between": 3}}, "regs: rule"),
    ({"regs": {"equals": 1, "at_most": 2}}, "regs: rule"),
    (["regs"], "must map metric names to rules"),
])
def test_a_malformed_fingerprint_is_an_error_naming_the_pathology(bad, message):
    with pytest.raises(VariantError, match=f"pathology 'p': fingerprint: .*{message}"):
        variant_from_cfg({"p": {"macros": {"ABLATE_P": 1}, "fingerprint": bad}}, KERNEL_DIR)


def test_per_config_metrics_are_known():
    fingerprint.validate({"d64.regs": "increases", "d128.sass.ldsm": "same",
                          "fp16_h8k.sass.ldg_128": "zero"})
    with pytest.raises(ValueError, match="unknown metric 'sass.x.regs'"):
        fingerprint.validate({"sass.x.regs": "same"})


def test_a_launch_only_pathology_may_keep_the_base_sass_and_no_other_may():
    """`launch_only:` (cutlass_gemm's no_swizzle: a tile scheduler's host-side arguments) is a
    hand-written pathology whose device code is the base's by construction: equal SASS is
    what it says, not an error; alone only (combined with another, that one must still
    change the code)."""
    spec = {"fingerprint": {"sass.instructions": "same"}, "launch_only": "the scheduler's raster"}
    alone = Variant(name="p", pathologies=("p",), specs={"p": spec}, launch_only=("p",))
    metrics = {"sass.instructions": 10}
    assert fingerprint.check(alone, metrics, metrics, "same", "same") == []
    plain = Variant(name="p", pathologies=("p",), specs={"p": {"fingerprint": {"sass.instructions": "same"}}})
    assert fingerprint.check(plain, metrics, metrics, "same", "same")[0].startswith("p: SASS equals the base's")
    pair = Variant(name="p+q", pathologies=("p", "q"),
                   specs={"p": spec, "q": {"fingerprint": {"sass.instructions": "same"}}}, launch_only=("p",))
    assert fingerprint.check(pair, metrics, metrics, "same", "same")[-1].startswith("p+q: SASS equals the base's")


@pytest.mark.parametrize("value", ["", "  ", True, 1])
def test_launch_only_must_be_a_sentence(value):
    with pytest.raises(VariantError, match="pathology 'p': launch_only must be a sentence"):
        variant_from_cfg({"p": {"macros": {"ABLATE_P": 1}, "launch_only": value}}, KERNEL_DIR)
