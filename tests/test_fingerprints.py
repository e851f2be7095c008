"""Every pathology of every kernel changes the machine code the way its yaml says (issue 4),
checked on real nvcc builds without a GPU; and what fails is reported by the pathology's name."""
import pytest

from ablate.job import fingerprint
from ablate.build import static
from ablate.job.variant import Variant, VariantError, variant_from_cfg
from test_build import ATTENTION, EVERY_PATHOLOGY

KERNEL_DIR = ATTENTION.dir
# The generic pathologies (conf/generic/) whose machine code equals the base's in each shipped
# kernel: not_applicable (docs/design.md's table); those a kernel declares so are not built.
NOT_APPLICABLE = {"attention": {"no_restrict", "no_launch_bounds", "no_l1"},
                  "rmsnorm": {"no_restrict", "no_l1", "strict_fp"},
                  "attention_hopper": {"no_restrict", "no_l1"}}
DECLARED = {"attention_hopper": {"regs_capped"}}
REAL = [(k, p) for k, p in EVERY_PATHOLOGY if p != "none" and p not in DECLARED.get(k, ())]
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
    assert variant.specs[name].get("fingerprint"), f"{kernel}/{name} declares no fingerprint"
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
    same = name in NOT_APPLICABLE.get(kernel, ()) or name in LAUNCH_ONLY
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
