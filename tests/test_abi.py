"""The kernel library's C ABI, called through ctypes: bad arguments are refused before any
CUDA call (so this runs without a GPU), and the variant info is valid JSON."""
import ctypes
import json
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
INVALID_VALUE = 1  # cudaErrorInvalidValue

# Fake device addresses, 16-byte aligned: validation must return before dereferencing them.
GOOD = dict(q=0x10000, k=0x20000, v=0x30000, o=0x40000, B=2, H=3, S=17, D=64, causal=0,
            scale=0.125)


@pytest.fixture(scope="session")
def base_lib():
    """The base variant built once (cached in runs/build, shared with the other tests)."""
    from ablate.job import plugins
    from ablate.build.compile import build
    from ablate.job.variant import variant_from_cfg

    cfg = plugins.compose("attention", ["pathology=none"])
    plugin = plugins.of(cfg)
    variant = variant_from_cfg(cfg.pathology, plugin.dir)
    result = build([variant], cfg.build, plugin, ROOT)[variant.name]
    assert result.status == "built", f"base failed to build:\n{result.log}"
    lib = ctypes.CDLL(str(result.lib))
    lib.ablate_attention_fwd.restype = ctypes.c_int
    lib.ablate_attention_fwd.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int] * 5 + [
        ctypes.c_float, ctypes.c_void_p]
    lib.ablate_variant_info.restype = ctypes.c_char_p
    lib.ablate_variant_info.argtypes = []
    return lib


def call(lib, **changes):
    a = {**GOOD, **changes}
    return lib.ablate_attention_fwd(a["q"], a["k"], a["v"], a["o"], a["B"], a["H"], a["S"],
                                    a["D"], a["causal"], a["scale"], None)


BAD = {
    **{f"{p}_null": {p: None} for p in "qkvo"},
    **{f"{p}_misaligned_8": {p: GOOD[p] + 8} for p in "qkvo"},
    "q_misaligned_2": {"q": GOOD["q"] + 2},
    "o_misaligned_1": {"o": GOOD["o"] + 1},
    **{f"D_{d}": {"D": d} for d in (0, -64, 32, 96, 127, 256)},
    **{f"{n}_{x}": {n: x} for n in "BHS" for x in (0, -1)},
    "BH_over_grid_limit": {"B": 256, "H": 256},
    "scale_nan": {"scale": math.nan},
    "scale_inf": {"scale": math.inf},
    "scale_minus_inf": {"scale": -math.inf},
    "scale_zero": {"scale": 0.0},
    "scale_negative": {"scale": -0.125},
}


@pytest.mark.parametrize("changes", BAD.values(), ids=BAD.keys())
def test_bad_argument_is_invalid_value(base_lib, changes):
    assert call(base_lib, **changes) == INVALID_VALUE


def test_good_arguments_pass_validation(base_lib):
    """The control for the cases above: the same call with nothing wrong is not refused as
    invalid. Without a GPU it fails later, at the first CUDA call (no driver / no device);
    with one it runs on real tensors and succeeds."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        assert call(base_lib) not in (0, INVALID_VALUE)
        return
    q, k, v, o = (torch.randn(GOOD["B"], GOOD["H"], GOOD["S"], GOOD["D"], device="cuda",
                              dtype=torch.float16) for _ in range(4))
    ptrs = {n: t.data_ptr() for n, t in zip("qkvo", (q, k, v, o))}
    assert call(base_lib, **ptrs) == 0
    torch.cuda.synchronize()


LAUNCH_NOTHING = {"D_96": {"D": 96}, "S_0": {"S": 0}, "o_misaligned_8": {"o_offset": 8}}


@pytest.mark.gpu
@pytest.mark.parametrize("changes", LAUNCH_NOTHING.values(), ids=LAUNCH_NOTHING.keys())
def test_bad_argument_launches_nothing(base_lib, changes):
    """On a GPU, a refused call leaves the (NaN-poisoned) output untouched."""
    import torch
    changes = dict(changes)
    o_offset = changes.pop("o_offset", 0)
    shape = (GOOD["B"], GOOD["H"], GOOD["S"], GOOD["D"])
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.float16) for _ in range(3))
    o = torch.full((q.numel() + 8,), float("nan"), device="cuda", dtype=torch.float16)
    rc = call(base_lib, q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(),
              o=o.data_ptr() + o_offset, **changes)
    assert rc == INVALID_VALUE
    torch.cuda.synchronize()
    assert torch.isnan(o).all(), "a refused call wrote to the output"


def test_variant_info_is_json_with_both_head_dims(base_lib):
    info = json.loads(base_lib.ablate_variant_info().decode())
    assert info["pathologies"] == []
    assert isinstance(info["seams"], dict) and info["seams"]
    configs = {c["head_dim"]: c for c in info["configs"]}
    assert sorted(configs) == [64, 128]
    for d, c in configs.items():
        for key in ("block_m", "block_n", "warps", "threads", "stages", "smem_bytes"):
            assert isinstance(c[key], int) and c[key] > 0, f"D={d}: {key}={c.get(key)!r}"
        assert c["threads"] == 32 * c["warps"], f"D={d}: threads != 32 * warps"
