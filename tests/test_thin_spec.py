"""The thin spec (ablate/job/thin.py): the C ABI read from the kernel's own prototype
(ablate/build/abi.py), tensors declared with a role, a shape and a dtype, the work model as
formulas; and a spec written to the full form (tests/fixtures/full_spec/, the shipped specs
as they were before the thin form) still loads and says exactly what the thin one says."""
import ctypes
import shutil
from pathlib import Path

import pytest

from ablate.build import abi
from ablate.job import plugins, thin

ROOT = Path(__file__).resolve().parents[1]
FULL = ROOT / "tests" / "fixtures" / "full_spec"


# ---- the prototype ---------------------------------------------------------------------------

def proto(tmp_path, text, symbol="k_fwd", name="k.h"):
    (tmp_path / name).write_text(text)
    return abi.read_prototype(tmp_path, symbol)


def test_the_prototype_gives_types_and_names(tmp_path):
    p = proto(tmp_path, """
        // a comment naming k_fwd(float x) is no declaration
        #ifdef __cplusplus
        extern "C" {
        #endif
        /* the kernel */ int k_fwd(const float* __restrict__ a, float *b, const __half* c,
                                   long long n, int m, size_t bytes, unsigned flags, double alpha,
                                   float beta, bool on, int64_t big, cudaStream_t s);
        #ifdef __cplusplus
        }
        #endif
        """)
    assert [(x.name, x.kind) for x in p.params] == [
        ("a", "pointer"), ("b", "pointer"), ("c", "pointer"), ("n", "scalar"), ("m", "scalar"),
        ("bytes", "scalar"), ("flags", "scalar"), ("alpha", "scalar"), ("beta", "scalar"), ("on", "scalar"),
        ("big", "scalar"), ("s", "stream")]
    assert p.argtypes == [ctypes.c_void_p] * 3 + [
        ctypes.c_longlong, ctypes.c_int, ctypes.c_size_t, ctypes.c_uint, ctypes.c_double, ctypes.c_float,
        ctypes.c_bool, ctypes.c_int64, ctypes.c_void_p]
    assert p.restype is ctypes.c_int and p.where == "k.h"
    assert p.params[4].fits(2**31 - 1) and not p.params[4].fits(2**31) and not p.params[6].fits(-1)


def test_a_definition_in_a_source_and_a_void_launcher_are_read(tmp_path):
    p = proto(tmp_path, 'extern "C" void k_fwd(float* out, int n, void* stream) { launch(out, n); }',
              name="k.cu")
    assert p.restype is None and [x.kind for x in p.params] == ["pointer", "scalar", "stream"]


@pytest.mark.parametrize("text, message", [
    ('extern "C" int k_fwd(float* x, __half h, void* stream);', r"parameter 'h' has type `__half`"),
    ('extern "C" int k_fwd(float* x, Params p);', r"parameter 'p' has type `Params`"),
    ('extern "C" int k_fwd(float*, int n);', r"parameter 1 `float\*` .* has no name"),
    ('extern "C" int k_fwd(const float& x);', r"parameter 1 `const float& x`.*references"),
    ('extern "C" float* k_fwd(int n);', r"no extern \"C\" prototype of k_fwd"),
    ('extern "C" double k_fwd(int n);', r"k_fwd returns `double`"),
    ('int k_fwd(int n);', r"no extern \"C\" prototype of k_fwd in k.h"),
])
def test_what_ctypes_cannot_call_is_named(tmp_path, text, message):
    with pytest.raises(abi.AbiError, match=message):
        proto(tmp_path, text)


# ---- a thin spec, its defaults and its mistakes ----------------------------------------------

HEADER = 'extern "C" int k_fwd(const float* a, float* c, long long n, float beta, void* stream);\n'


def spec_of(tmp_path, body, header=HEADER):
    (tmp_path / "k.h").write_text(header)
    module = type(thin)("fake_spec")
    exec(body, vars(module))
    return thin.Spec(module, "k", tmp_path)


THIN = """
SYMBOL = "k_fwd"
WORK = "memory"
SHAPE = {"n": int, "beta": float}
TENSORS = {"a": ("in", "n", "fp32"), "c": ("inout", "n", "fp32")}
TOLERANCE = 1e-6
def reference(inputs, shape):
    return inputs["a"].double() + shape["beta"] * inputs["c"].double()
"""


def test_a_thin_spec_gets_every_default(tmp_path):
    torch = pytest.importorskip("torch")
    spec = spec_of(tmp_path, THIN)
    assert spec.OUTPUTS == ("c",) and spec.INOUTS == ("c",) and thin.roles(spec) == {"a": "in", "c": "inout"}
    assert spec.ARGTYPES == [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong, ctypes.c_float, ctypes.c_void_p]
    assert spec.BOUND == "memory" and spec.flops({"n": 5}) == 0
    shape = spec.validate_shape({"n": 10, "beta": 2, "ignored": 1})
    assert shape == {"n": 10, "beta": 2.0}
    assert spec.arguments({"a": 16, "c": 32}, shape, 99) == (16, 32, 10, 2.0, 99)
    assert spec.bytes_moved(shape) == 4 * 10 + 2 * 4 * 10  # a read; c read and written
    inputs = spec.make_inputs(shape, torch.Generator().manual_seed(0), "cpu")
    assert {n: (tuple(t.shape), t.dtype) for n, t in inputs.items()} == {"a": ((10,), torch.float32),
                                                                          "c": ((10,), torch.float32)}
    assert set(spec.reference(inputs, shape)) == {"c"} and spec.tolerance(shape) == 1e-6
    with pytest.raises(ValueError, match="n must be >= 1, got 0"):
        spec.validate_shape({"n": 0, "beta": 1.0})
    with pytest.raises(ValueError, match="missing beta"):
        spec.validate_shape({"n": 3})
    with pytest.raises(ValueError, match=r"n must fit the C parameter `long long n`"):
        spec.validate_shape({"n": 2**63, "beta": 1.0})


@pytest.mark.parametrize("change, message", [
    (("inout", "out"), None),  # still valid: c as a plain output
    (('"c": ("inout"', '"b": ("inout"'), r"pointer parameter 'c' .* is no tensor of TENSORS \['a', 'b'\]"),
    (('"beta": float', '"alpha": float'), r"parameter 'beta' .* is no field of SHAPE \['alpha', 'n'\]; give its value in PARAMS"),
    (('"fp32")}', '"fp32"), "d": ("in", "n", "fp32")}'), r"TENSORS \['d'\] are no pointer parameter of k_fwd"),
    (('("in", "n", "fp32")', '("in", "n", "int32")'), r"TENSORS\['a'\] is int32: say how to fill it"),
    (('("in", "n", "fp32")', '("input", "n", "fp32")'), r"role must be one of \['in', 'out', 'inout'\], got 'input'"),
    (('WORK = "memory"', 'WORK = "fp64_tensor"'), r"spec.WORK must be one of"),
    (('WORK = "memory"', 'WORK = "memory"\nBOUND = "compute"'), r"spec.WORK 'memory' and spec.BOUND 'compute' disagree"),
])
def test_a_thin_spec_mistake_names_its_entry(tmp_path, change, message):
    body = THIN.replace(*change)
    assert body != THIN
    if message is None:
        assert spec_of(tmp_path, body).INOUTS == ()
        return
    with pytest.raises(thin.SpecError, match=message):
        spec_of(tmp_path, body)


def test_params_formulas_and_work_kinds(tmp_path):
    spec = spec_of(tmp_path, THIN.replace('WORK = "memory"', 'WORK = "fp32_fma"\nFLOPS = "2 * n"\nBYTES = lambda s: 7')
                   .replace('"beta": float', '"beta": float, "scale": (1, 2)')
                   + 'PARAMS = {"n": "n * scale", "beta": lambda s: -s["beta"]}\n')
    shape = spec.validate_shape({"n": 4, "beta": 1.5, "scale": 2})
    assert spec.arguments({"a": 1, "c": 2}, shape, None) == (1, 2, 8, -1.5, None)
    assert spec.flops(shape) == 8 and spec.bytes_moved(shape) == 7
    assert spec.WORK == "fp32_fma" and spec.BOUND == "compute"
    with pytest.raises(ValueError, match=r"parameter 'n' \(`long long`\) cannot hold 2.5"):
        spec.arguments({"a": 1, "c": 2}, {**shape, "n": 1.25}, None)


def test_a_lone_tensor_reference_needs_one_output(tmp_path):
    torch = pytest.importorskip("torch")
    header = 'extern "C" int k_fwd(const float* a, float* c, float* d, long long n, float beta, void* stream);\n'
    spec = spec_of(tmp_path, THIN.replace('"fp32")}', '"fp32"), "d": ("out", "n", "fp32")}'), header)
    inputs = spec.make_inputs({"n": 3, "beta": 1.0}, torch.Generator().manual_seed(0), "cpu")
    with pytest.raises(ValueError, match=r"reference returned one Tensor; k has outputs \['c', 'd'\]"):
        spec.reference(inputs, {"n": 3, "beta": 1.0})


# ---- the full form, as plugins were written before the thin spec ----------------------------

def with_full_spec(tmp_path, name):
    """A copy of a shipped plugin whose spec.py is the full-form one of tests/fixtures."""
    folder = tmp_path / name
    shutil.copytree(plugins.load(name).dir, folder, symlinks=True)
    shutil.copy(FULL / f"{name}.py", folder / "spec.py")
    return plugins.load_dir(folder)


SHAPES = {"rmsnorm": [{"rows": 5, "hidden": 2056, "dtype": "bf16", "eps": 1e-6},
                      {"rows": 16, "hidden": 4096, "dtype": "fp16", "eps": 0.0}],
          "attention": [{"batch": 1, "heads": 2, "seq": 333, "head_dim": 64, "causal": True},
                        {"batch": 4, "heads": 8, "seq": 512, "head_dim": 128, "causal": False, "scale": 0.5}]}


# What a shipped thin spec says beyond its full form, written before it grew: attention's
# dtype field (fp16 where a shape names none) and its ABI code, passed before the stream to
# ablate_attention_fwd_dtype (the full form calls ablate_attention_fwd, FP16, still exported).
BEYOND = {"attention": {"field": {"dtype": "fp16"}, "argument": (ctypes.c_int, 0)}}


def beyond(name, values, which):
    """`values` (a full-form spec's argument types or arguments, or its validated shape) with
    what the thin spec adds."""
    extra = BEYOND.get(name, {}).get(which)
    if extra is None:
        return values
    if which == "field":
        return {**values, **extra}
    item = extra[0] if values and isinstance(values[0], type) else extra[1]
    return type(values)([*values[:-1], item, values[-1]])


@pytest.mark.parametrize("name", SHAPES)
def test_a_full_form_spec_loads_unchanged_and_says_what_the_thin_one_says(tmp_path, name):
    torch = pytest.importorskip("torch")
    full, new = with_full_spec(tmp_path, name).spec, plugins.load(name).spec
    assert "TENSORS" not in vars(full.module) and "TENSORS" in vars(new.module)
    assert beyond(name, full.ARGTYPES, "argument") == new.ARGTYPES
    assert full.OUTPUTS == new.OUTPUTS and full.INOUTS == new.INOUTS == ()
    assert (full.BOUND, full.WORK) == (new.BOUND, new.WORK) and full.prototype is None
    for raw in SHAPES[name]:
        shape = full.validate_shape(raw)
        assert new.validate_shape(raw) == beyond(name, shape, "field")
        assert list(new.validate_shape(raw)) == list(beyond(name, shape, "field"))
        ptrs = {n: 16 * (i + 1) for i, n in enumerate(full.make_inputs(shape, torch.Generator(), "meta"))}
        call = {**shape, **({"scale": raw["scale"]} if "scale" in raw else {})}
        assert new.arguments(ptrs, call, 7) == beyond(name, full.arguments(ptrs, call, 7), "argument")
        assert [type(a) for a in new.arguments(ptrs, call, 7)] == \
            [type(a) for a in beyond(name, full.arguments(ptrs, call, 7), "argument")]
        assert new.flops(shape) == full.flops(shape) and new.bytes_moved(shape) == full.bytes_moved(shape)
        assert new.tolerance(shape) == full.tolerance(shape)
        if name == "rmsnorm":  # small enough to compare the inputs and the reference
            a, b = (s.make_inputs(shape, torch.Generator().manual_seed(3), "cpu") for s in (new, full))
            assert list(a) == list(b) and all(torch.equal(a[n], b[n]) for n in ("x", "w"))
            assert torch.equal(new.reference(a, shape)["y"], full.reference(a, shape)["y"])


def test_a_full_form_spec_keeps_its_bound_check(tmp_path):
    folder = tmp_path / "rmsnorm"
    shutil.copytree(plugins.load("rmsnorm").dir, folder)
    (folder / "spec.py").write_text((FULL / "rmsnorm.py").read_text().replace('BOUND = "memory"', 'BOUND = "io"'))
    with pytest.raises(plugins.PluginError, match=r"spec.BOUND must be one of \['memory', 'compute'\], got 'io'"):
        plugins.load_dir(folder)
