"""Shape configs (each kernel's conf/shape/) and their validation by the kernel's spec."""
import pytest
from omegaconf import OmegaConf

from ablate.job import plugins

ATTENTION = plugins.load("attention")
RMSNORM = plugins.load("rmsnorm")
GOOD = {"batch": 4, "heads": 8, "seq": 512, "head_dim": 64, "causal": False}
GOOD_RMS = {"rows": 16, "hidden": 4096, "dtype": "fp16", "eps": 1e-6}


def names(plugin, pattern):
    return sorted(p.stem for p in (plugin.conf / "shape").glob(f"{pattern}.yaml"))


def load(plugin, name):
    return OmegaConf.to_container(OmegaConf.load(plugin.conf / "shape" / f"{name}.yaml"))


def test_issue_shapes_have_their_sizes():
    expected = {"s512": (4, 8, 512), "s1k": (4, 16, 1024), "s2k": (4, 16, 2048),
                "s4k": (2, 16, 4096), "s8k": (1, 16, 8192)}
    for name, (b, h, s) in expected.items():
        for suffix, d, causal in (("", 64, False), ("_causal", 64, True), ("_d128", 128, False),
                                  ("_d128_causal", 128, True)):
            assert load(ATTENTION, f"{name}{suffix}") == {"batch": b, "heads": h, "seq": s, "head_dim": d,
                                                          "causal": causal}, f"{name}{suffix}"


def test_globs_pick_families():
    assert len(names(ATTENTION, "*")) == 40  # each FP16 shape and its BF16 sibling (*_bf16)
    assert len(names(ATTENTION, "*_d128*")) == 20
    assert all(load(ATTENTION, n)["causal"] for n in names(ATTENTION, "*causal*"))
    assert len(names(ATTENTION, "*causal")) == 10 and len(names(ATTENTION, "*causal*")) == 20
    assert names(ATTENTION, "s4k*") == ["s4k", "s4k_bf16", "s4k_causal", "s4k_causal_bf16", "s4k_d128",
                                        "s4k_d128_bf16", "s4k_d128_causal", "s4k_d128_causal_bf16"]
    assert all(load(ATTENTION, n)["dtype"] == "bf16" for n in names(ATTENTION, "*bf16*"))
    assert len(names(ATTENTION, "*bf16*")) == 20
    # rmsnorm: r<rows>_h<hidden>[_bf16], from a decode step to the large shape of issue 9
    assert names(RMSNORM, "r16_*") == ["r16_h4k", "r16_h4k_bf16"]
    assert names(RMSNORM, "*bf16") == ["r16_h4k_bf16", "r16k_h8k_bf16"]
    assert load(RMSNORM, "r16_h4k") == {**GOOD_RMS}
    assert load(RMSNORM, "r16k_h8k") == {**GOOD_RMS, "rows": 16384, "hidden": 8192}


@pytest.mark.parametrize("plugin, name", [(p, n) for p in (ATTENTION, RMSNORM) for n in names(p, "*")],
                         ids=lambda x: getattr(x, "name", x))
def test_every_shape_file_is_valid(plugin, name):
    shape = plugin.spec.validate_shape(load(plugin, name))
    assert tuple(shape) == tuple(plugin.spec.SHAPE)
    assert plugin.spec.bytes_moved(shape) > 0 and plugin.spec.flops(shape) > 0


@pytest.mark.parametrize(
    "change, message",
    [
        ({"head_dim": 96}, r"head_dim must be one of \[64, 128\], got 96"),
        ({"seq": 0}, "seq must be >= 1"),
        ({"batch": -1}, "batch must be >= 1"),
        ({"heads": 0}, "heads must be >= 1"),
        ({"seq": 2**31}, "seq must fit the C parameter `int S`"),
        ({"seq": 512.0}, "seq must be an integer"),
        ({"batch": True}, "batch must be an integer"),
        ({"head_dim": "64"}, "head_dim must be one of"),
        ({"causal": "yes"}, "causal must be true or false"),
    ],
)
def test_bad_shape_is_a_clear_error(change, message):
    with pytest.raises(ValueError, match=message):
        ATTENTION.spec.validate_shape({**GOOD, **change})


@pytest.mark.parametrize(
    "change, message",
    [
        ({"hidden": 100}, "hidden must be an integer from 8 to 16384, a multiple of 8, got 100"),
        ({"hidden": 16392}, "hidden must be an integer from 8 to 16384"),
        ({"hidden": 0}, "hidden must be an integer from 8 to 16384"),
        ({"rows": 0}, "rows must be an integer from 1 to 2147483647"),
        ({"rows": 2**31}, "rows must be an integer from 1"),
        ({"rows": 16.0}, "rows must be an integer"),
        ({"dtype": "fp32"}, r"dtype must be one of \['fp16', 'bf16'\], got 'fp32'"),
        ({"eps": -1e-6}, "eps must be a finite number >= 0"),
        ({"eps": float("inf")}, "eps must be a finite number >= 0"),
        ({"eps": "small"}, "eps must be a finite number >= 0"),
    ],
)
def test_bad_rmsnorm_shape_is_a_clear_error(change, message):
    with pytest.raises(ValueError, match=message):
        RMSNORM.spec.validate_shape({**GOOD_RMS, **change})


def test_missing_key_is_named():
    with pytest.raises(ValueError, match="missing head_dim, causal"):
        ATTENTION.spec.validate_shape({"batch": 1, "heads": 1, "seq": 1})
    with pytest.raises(ValueError, match="missing dtype, eps"):
        RMSNORM.spec.validate_shape({"rows": 1, "hidden": 8})


def test_flops_and_bytes():
    spec = ATTENTION.spec
    # 4 B H S^2 D: two S x S x D matmuls of 2 flops per multiply-add.
    assert spec.flops(GOOD) == 4 * 4 * 8 * 512 * 512 * 64
    assert spec.flops({**GOOD, "causal": True}) == spec.flops(GOOD) / 2
    assert spec.bytes_moved(GOOD) == 4 * (4 * 8 * 512 * 64) * 2  # q, k, v, o in FP16
    # rmsnorm: x read and y written, w read once, 2 bytes each
    assert RMSNORM.spec.bytes_moved(GOOD_RMS) == 2 * (2 * 16 * 4096 + 4096)
    assert RMSNORM.spec.flops(GOOD_RMS) == 4 * 16 * 4096
