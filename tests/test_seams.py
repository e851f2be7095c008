"""Seams declared once in the base and read from there: the variant info's seams come from
the base's declarations (ablate/build/seams.py), a patch's seam from its own #define
(ablate/job/variant.py), and static mode holds the two to each other (ablate/pipeline.py)."""
import pytest
from omegaconf import OmegaConf

from ablate.build import seams
from ablate.build.compile import build
from ablate.build.library import Kernel
from ablate.job import plugins
from ablate.job.variant import VariantError, variant_from_cfg
from ablate.paths import ROOT
from ablate.pipeline import seam_problems
from conftest import kept_build_dir

RMSNORM_SEAMS = ["vector", "access", "reduce", "residency", "launch", "math"]


def test_the_seams_a_base_declares():
    assert seams.declared(plugins.load("rmsnorm")) == RMSNORM_SEAMS
    attention = seams.declared(plugins.load("attention"))
    assert attention[:3] == ["tile", "smem_layout", "gmem_load"] and "kv_source" in attention
    assert "swizzle" in seams.declared(plugins.load("attention_hopper"))


def test_the_generated_header_names_every_declared_seam():
    text = seams.header(["tile", "smem_layout"])
    assert 'ABLATE_SEAM_STR(ABLATE_SEAM_TILE)' in text and 'ABLATE_SEAM_STR(ABLATE_SEAM_SMEM_LAYOUT)' in text
    assert text.count("#define ABLATE_SEAMS_JSON") == 1


def test_a_yaml_whose_seam_disagrees_with_its_patch_is_refused_naming_both():
    attention = plugins.load("attention")
    with pytest.raises(VariantError, match=r"pathology 'no_swizzle': its yaml says seam: tile, but its patch "
                                           r"\S*no_swizzle.cuh replaces the smem_layout seam"):
        variant_from_cfg({"no_swizzle": {"header": "patches/no_swizzle.cuh", "macros": {"ABLATE_NO_SWIZZLE": 1},
                                         "seam": "tile"}}, attention.dir)


def test_two_pathologies_on_one_seam_are_refused_from_their_patches():
    cfg = plugins.compose("attention", ["pathology=[scalar_loads,uncoalesced]"])
    with pytest.raises(VariantError, match="'scalar_loads' and 'uncoalesced' both replace the gmem_load seam"):
        variant_from_cfg(cfg.pathology, plugins.load("attention").dir)


def test_a_patch_seam_is_read_from_the_patch_not_the_yaml():
    cfg = plugins.compose("rmsnorm", ["pathology=smem_reduce"])
    pathology = OmegaConf.to_container(cfg.pathology)
    del pathology["smem_reduce"]["seam"]  # no word in the yaml: the patch says it
    assert variant_from_cfg(pathology, plugins.load("rmsnorm").dir).seams == {"smem_reduce": "reduce"}


def test_static_mode_holds_a_patch_to_the_seam_the_library_reports():
    """The library's own report of its seams (ABLATE_SEAMS_JSON, from the base's
    declarations) against the seams the patches replace: a patch whose #define never takes
    effect is caught; a real one passes."""
    plugin = plugins.load("rmsnorm")
    cfg = plugins.compose("rmsnorm", [f"build.dir={kept_build_dir('rmsnorm_seams')}", "build.jobs=2"])
    base = variant_from_cfg({"none": None}, plugin.dir)
    real = variant_from_cfg(OmegaConf.to_container(plugins.compose("rmsnorm", ["pathology=smem_reduce"]).pathology),
                            plugin.dir)
    dead = variant_from_cfg({"dead_seam": {"header": "../../tests/patches/dead_seam.cuh",
                                           "macros": {"ABLATE_DEAD_SEAM": 1}, "seam": "reduce"}}, plugin.dir)
    built = build([base, real, dead], cfg.build, plugin, ROOT)
    info = {name: Kernel(b.lib).info() for name, b in built.items()}
    assert list(info["none"]["seams"]) == RMSNORM_SEAMS
    assert info["smem_reduce"]["seams"]["reduce"] == "SharedTreeReduce"
    assert seam_problems(real, info["none"], info["smem_reduce"]) == []
    problems = seam_problems(dead, info["none"], info["dead_seam"])
    assert len(problems) == 1 and "reports the seams none changed" in problems[0]
    assert "dead_seam: reduce" in problems[0]
