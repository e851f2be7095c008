"""The CUTLASS GEMM plugin on the CPU: CUTLASS found in the nvidia-cutlass wheel (a clear line
without it), the shapes it refuses (naming the field), and which compiled instance is which
configuration in its real base library (built with every variant in conftest's session build)."""
import importlib.util

import pytest

from ablate.build import static
from ablate.build.library import Kernel
from ablate.job import plugins

GEMM = plugins.load("cutlass_gemm")
SPEC = GEMM.spec


def test_cutlass_comes_from_the_installed_wheel():
    include, = SPEC.INCLUDE_DIRS()
    assert (include / "cutlass" / "gemm" / "collective" / "collective_builder.hpp").is_file()
    assert (include / "cute" / "tensor.hpp").is_file()
    assert not (GEMM.dir / "cutlass").exists() and not list(GEMM.dir.rglob("cutlass.h"))  # never a copy


def test_without_the_wheel_the_build_says_what_to_install(monkeypatch):
    from ablate.build.compile import BuildError, include_dirs

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "cutlass_library" else real(name, *a))
    with pytest.raises(BuildError, match=r"kernel 'cutlass_gemm': spec.INCLUDE_DIRS: the nvidia-cutlass package "
                                         r"is not installed \(pip install nvidia-cutlass\)"):
        include_dirs(GEMM)


@pytest.mark.parametrize("field", ["n", "k"])
@pytest.mark.parametrize("value", [1, 7, 1001, 4100])
def test_n_and_k_must_be_multiples_of_8_and_the_error_names_the_field(field, value):
    shape = {"m": 64, "n": 4096, "k": 4096, "dtype": "fp16", field: value}
    with pytest.raises(ValueError, match=rf"^{field}={value}: must be a multiple of 8"):
        SPEC.validate_shape(shape)


def test_odd_m_is_a_shape():
    assert SPEC.validate_shape({"m": 333, "n": 1000, "k": 1032, "dtype": "bf16"})["m"] == 333


def test_every_shipped_shape_is_valid_and_each_configuration_has_one():
    from omegaconf import OmegaConf

    shapes = [OmegaConf.to_container(OmegaConf.load(GEMM.conf / "shape" / f"{n}.yaml"))
              for n in GEMM.options("shape")]
    for shape in shapes:
        SPEC.validate_shape(shape)
    assert {s["m"] <= SPEC.SKINNY_MAX_M for s in shapes} == {True, False}
    assert {s["dtype"] for s in shapes} == {"fp16", "bf16"}


def test_each_instance_is_one_configuration_and_a_shape_runs_one(built_kernels):
    b = built_kernels["cutlass_gemm"]
    base = b.results["none"]
    info = Kernel(base.lib).info()
    names = [c["name"] for c in info["configs"]]
    assert sorted(names) == ["bf16_large", "bf16_skinny", "fp16_large", "fp16_skinny"]
    instances = list(base.ptxas["kernels"])
    assert sorted(static.config_of(SPEC, k, info["configs"]) for k in instances) == sorted(names)
    for shape, want in (({"m": 64, "n": 4096, "k": 4096, "dtype": "fp16"}, "fp16_skinny"),
                        ({"m": 128, "n": 8, "k": 8, "dtype": "bf16"}, "bf16_skinny"),
                        ({"m": 129, "n": 8, "k": 8, "dtype": "fp16"}, "fp16_large")):
        ran = [static.config_of(SPEC, k, info["configs"]) for k in instances
               if static.launched(SPEC, k, shape, info["configs"])]
        assert ran == [want]
    # the configurations differ where the base says they do (static metrics per config)
    metrics = static.static_metrics(base, SPEC, info)
    assert metrics["fp16_large.sass.hgmma"] != metrics["fp16_skinny.sass.hgmma"]
    assert all(c["threads"] == 384 for c in info["configs"])
