"""Shape configs (conf/shape/) and their validation."""
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ablate.shapes import bytes_moved, flops, validate_shape

ROOT = Path(__file__).resolve().parents[1]
SHAPE_DIR = ROOT / "conf" / "shape"
HEAD_DIMS = [64, 128]
GOOD = {"batch": 4, "heads": 8, "seq": 512, "head_dim": 64, "causal": False}


def names(pattern):
    return sorted(p.stem for p in SHAPE_DIR.glob(f"{pattern}.yaml"))


def test_issue_shapes_have_their_sizes():
    expected = {"s512": (4, 8, 512), "s1k": (4, 16, 1024), "s2k": (4, 16, 2048),
                "s4k": (2, 16, 4096), "s8k": (1, 16, 8192)}
    for name, (b, h, s) in expected.items():
        for suffix, d, causal in (("", 64, False), ("_causal", 64, True), ("_d128", 128, False),
                                  ("_d128_causal", 128, True)):
            cfg = OmegaConf.load(SHAPE_DIR / f"{name}{suffix}.yaml")
            assert OmegaConf.to_container(cfg) == {"batch": b, "heads": h, "seq": s, "head_dim": d,
                                                   "causal": causal}, f"{name}{suffix}"


def test_globs_pick_families():
    assert len(names("*")) == 20
    assert names("*_d128*") == [n for n in names("*") if "_d128" in n] and len(names("*_d128*")) == 10
    assert all(OmegaConf.load(SHAPE_DIR / f"{n}.yaml").causal for n in names("*causal"))
    assert len(names("*causal")) == 10
    assert names("s4k*") == ["s4k", "s4k_causal", "s4k_d128", "s4k_d128_causal"]


@pytest.mark.parametrize("name", names("*"))
def test_every_shape_file_is_valid(name):
    shape = validate_shape(OmegaConf.load(SHAPE_DIR / f"{name}.yaml"), HEAD_DIMS)
    assert set(shape) == {"batch", "heads", "seq", "head_dim", "causal"}


@pytest.mark.parametrize(
    "change, message",
    [
        ({"head_dim": 96}, r"head_dim=96 is not built; kernel.head_dims is \[64, 128\]"),
        ({"seq": 0}, "seq must be >= 1"),
        ({"batch": -1}, "batch must be >= 1"),
        ({"heads": 0}, "heads must be >= 1"),
        ({"seq": 2**31}, "seq must be >= 1 .*fit a C int"),
        ({"seq": 512.0}, "seq must be an integer"),
        ({"batch": True}, "batch must be an integer"),
        ({"head_dim": "64"}, "head_dim must be an integer"),
        ({"causal": "yes"}, "causal must be true or false"),
    ],
)
def test_bad_shape_is_a_clear_error(change, message):
    with pytest.raises(ValueError, match=message):
        validate_shape({**GOOD, **change}, HEAD_DIMS)


def test_missing_key_is_named():
    with pytest.raises(ValueError, match="missing head_dim, causal"):
        validate_shape({"batch": 1, "heads": 1, "seq": 1}, HEAD_DIMS)


def test_head_dim_must_be_one_that_is_built():
    assert validate_shape(GOOD, [64])["head_dim"] == 64
    with pytest.raises(ValueError, match="not built"):
        validate_shape({**GOOD, "head_dim": 128}, [64])


def test_flops_and_bytes():
    # 4 B H S^2 D: two S x S x D matmuls of 2 flops per multiply-add.
    assert flops(GOOD) == 4 * 4 * 8 * 512 * 512 * 64
    assert flops({**GOOD, "causal": True}) == flops(GOOD) / 2
    assert bytes_moved(GOOD) == 4 * (4 * 8 * 512 * 64) * 2  # q, k, v, o in FP16
