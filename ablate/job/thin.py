"""The thin spec: what a kernel's spec.py may leave out, and the defaults ablate fills in.

A spec says what is genuinely about its kernel: the source and the C function (SYMBOL), the
tensors with a role, a shape and a dtype (TENSORS), the shape's fields (SHAPE), the
reference, the tolerance, the work model (FLOPS, and BYTES when the tensors' own traffic is
not it) and the kind of work (WORK). Everything else is derived here, once, when the plugin
is loaded:

- ARGTYPES and `arguments` from the function's `extern "C"` prototype in the plugin's
  sources (ablate/build/abi.py): a pointer parameter is the tensor of its name, a scalar the
  shape field of its name (or PARAMS[name]: a formula of the shape), a `cudaStream_t` the
  stream;
- OUTPUTS and INOUTS from the roles, `make_inputs` from the declarations (in and inout:
  standard normal, out: uninitialized, unless an `init` says otherwise);
- `bytes_moved` from the declarations (each `in` read once, each `out` written once, each
  `inout` read and written), `flops` from FLOPS;
- `validate_shape` from SHAPE, `tolerance` from TOLERANCE, BOUND from WORK (and WORK from
  BOUND: `compute` is the FP16 tensor cores).

A Triton kernel's spec (TRITON = "FILE.py:FUNCTION" or "package.module:FUNCTION", its
@triton.jit function, bare or autotuned: ablate/build/triton_target.py) has no C ABI:
SOURCE and SYMBOL are that file (the module's) and function, and its launch is `args(inputs, shape)`, the
function's non-constexpr arguments by name, derived as the C ABI's are: a parameter named as
a tensor takes it, as a shape field its value, else PARAMS[name] (a formula); its constexprs
and compile options are META, its launch grid `grid(shape, meta)`, its compiled instances
INSTANCES ({name: a shape}), and each compiled instance is the config of its name
(ablate/build/triton_aot.py).

A spec that defines a name keeps its own: a spec written to the full form (every name of
plugins.SPEC) is used as it is, with INOUTS () and WORK from its BOUND. Formulas are Python
expressions over the shape's fields (`"2 * n"`, `"4 * rows * cols * k"`)
or functions of the shape. Nothing here imports torch at module level.
"""
import math
from dataclasses import dataclass

from ablate.build.abi import split_top
from ablate.job import candidates

ROLES = ("in", "out", "inout")
# The kinds of work a kernel's speed can be held to: the GPU's measured ceiling of each
# (ablate/gpu/peaks.py). `compute` in a BOUND means fp16_tensor.
WORKS = ("memory", "fp32_fma", "tf32", "fp16_tensor", "bf16_tensor", "fp8_tensor")
BOUNDS = ("memory", "compute")
# dtype names a declaration may use -> (torch's name, bytes per element)
DTYPES = {
    "fp16": ("float16", 2), "float16": ("float16", 2), "half": ("float16", 2),
    "bf16": ("bfloat16", 2), "bfloat16": ("bfloat16", 2),
    "fp32": ("float32", 4), "float32": ("float32", 4), "float": ("float32", 4),
    "fp64": ("float64", 8), "float64": ("float64", 8), "double": ("float64", 8),
    "fp8_e4m3": ("float8_e4m3fn", 1), "float8_e4m3fn": ("float8_e4m3fn", 1),
    "fp8_e5m2": ("float8_e5m2", 1), "float8_e5m2": ("float8_e5m2", 1),
    "int8": ("int8", 1), "uint8": ("uint8", 1), "int16": ("int16", 2),
    "int32": ("int32", 4), "int64": ("int64", 8), "bool": ("bool", 1),
}
INITS = ("randn", "rand", "zeros", "ones", "empty")
_FLOATING = {"float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2"}
_NAMESPACE = {"__builtins__": {}, "math": math, "min": min, "max": max, "abs": abs,
              "int": int, "float": float, "round": round}


class SpecError(ValueError):
    """A thin spec's declaration that cannot be used; the message names the entry."""


def formula(expr, shape, what="formula"):
    """A formula's value on a shape: a number as it is, a function called with the shape, a
    string evaluated with the shape's fields as names."""
    if callable(expr):
        return expr(shape)
    if isinstance(expr, str):
        try:
            return eval(expr, _NAMESPACE, dict(shape))  # noqa: S307 - the spec is the user's own code
        except Exception as e:  # noqa: BLE001 - a NameError for a field the shape lacks, ...
            raise ValueError(f"{what} {expr!r} on shape {shape}: {type(e).__name__}: {e}") from None
    return expr


@dataclass(frozen=True)
class Tensor:
    name: str
    role: str  # in | out | inout
    dims: tuple  # formulas of the shape
    dtype: object  # a DTYPES name, a shape field holding one, or a function of the shape
    init: object  # an INITS name, or init(shape, generator, device) -> the tensor

    def size(self, shape) -> tuple[int, ...]:
        return tuple(int(formula(d, shape, f"tensor {self.name!r}: dimension")) for d in self.dims)

    def dtype_name(self, shape) -> str:
        """torch's name of its dtype on a shape (float16, bfloat16, ...)."""
        name = self.dtype(shape) if callable(self.dtype) else self.dtype
        if name not in DTYPES and isinstance(name, str) and name in shape:
            name = shape[name]
        name = str(name).removeprefix("torch.")
        if name not in DTYPES:
            raise ValueError(f"tensor {self.name!r}: dtype {name!r} is none of {sorted(DTYPES)}")
        return DTYPES[name][0]

    def nbytes(self, shape) -> int:
        itemsize = next(size for torch_name, size in DTYPES.values() if torch_name == self.dtype_name(shape))
        return math.prod(self.size(shape)) * itemsize

    def make(self, shape, generator, device):
        import torch

        dims, dtype = self.size(shape), getattr(torch, self.dtype_name(shape))
        if callable(self.init):
            t = self.init(shape, generator, device)
            if tuple(t.shape) != dims or t.dtype != dtype:
                raise ValueError(f"tensor {self.name!r}: its init made {tuple(t.shape)} {t.dtype}, "
                                 f"the declaration says {dims} {dtype}")
            return t
        if self.init in ("zeros", "ones", "empty"):
            return getattr(torch, self.init)(dims, device=device, dtype=dtype)
        make = torch.randn if self.init == "randn" else torch.rand
        wide = dtype if dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64) else torch.float32
        return make(dims, generator=generator, device=device, dtype=wide).to(dtype)


def tensors_of(declared) -> dict[str, Tensor]:
    """TENSORS ({name: (role, shape, dtype[, init]) or {role, shape, dtype, init}}) checked."""
    out = {}
    for name, decl in declared.items():
        if isinstance(decl, dict):
            unknown = set(decl) - {"role", "shape", "dtype", "init"}
            if unknown:
                raise SpecError(f"TENSORS[{name!r}]: unknown keys {sorted(unknown)} (role, shape, dtype, init)")
            decl = (decl.get("role"), decl.get("shape"), decl.get("dtype"), decl.get("init"))
        if not isinstance(decl, (tuple, list)) or len(decl) not in (3, 4):
            raise SpecError(f"TENSORS[{name!r}] must be (role, shape, dtype[, init]), got {decl!r}")
        role, dims, dtype, init = (*decl, None)[:4]
        if role not in ROLES:
            raise SpecError(f"TENSORS[{name!r}]: role must be one of {list(ROLES)}, got {role!r}")
        if isinstance(dims, str):
            dims = tuple(d.strip() for d in split_top(dims, "([", ")]") if d.strip())
        elif isinstance(dims, (int, float)) or callable(dims):
            dims = (dims,)
        init = init or ("empty" if role == "out" else "randn")
        if not callable(init) and init not in INITS:
            raise SpecError(f"TENSORS[{name!r}]: init must be one of {list(INITS)} or a function "
                            f"(shape, generator, device) -> tensor, got {init!r}")
        if isinstance(dtype, str) and dtype in DTYPES and DTYPES[dtype][0] not in _FLOATING \
                and init in ("randn", "rand"):
            raise SpecError(f"TENSORS[{name!r}] is {dtype}: say how to fill it (init: zeros, ones, or a "
                            "function (shape, generator, device) -> tensor)")
        out[name] = Tensor(name, role, tuple(dims), dtype, init)
    return out


# ---- the shape: SHAPE's fields checked --------------------------------------------------------

def shape_validator(kernel, fields, c_params=None, defaults=None):
    """validate_shape(shape) from SHAPE = {field: kind}: `int` (>= 1), `float` (finite),
    `bool`, a tuple of choices, a `range` of integers, or a function value -> value (its
    ValueError is the message). An integer field passed to a C parameter of its name (or by a
    PARAMS formula that is the field) must also fit that parameter's type. A field of
    `defaults` (SHAPE_DEFAULTS: {field: value}) that a shape leaves out takes that value, so a
    field added to a kernel keeps its older shapes valid, and meaning what they meant."""
    c_params = c_params or {}
    stray = sorted(set(defaults or {}) - set(fields))
    if stray:
        raise SpecError(f"SHAPE_DEFAULTS {stray} are no field of SHAPE {list(fields)}")

    def validate_shape(shape):
        shape = {**(defaults or {}), **shape}
        missing = [k for k in fields if k not in shape]
        if missing:
            raise ValueError(f"missing {', '.join(missing)} (a {kernel} shape needs {', '.join(fields)})")
        out = {}
        for key, kind in fields.items():
            value, param = shape[key], c_params.get(key)
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if kind is bool:
                if not isinstance(value, bool):
                    raise ValueError(f"{key} must be true or false, got {value!r}")
            elif kind is int or isinstance(kind, range):
                if not isinstance(value, int) or isinstance(value, bool):
                    raise ValueError(f"{key} must be an integer, got {value!r}")
                if kind is int and value < 1:
                    raise ValueError(f"{key} must be >= 1, got {value}")
                if isinstance(kind, range) and value not in kind:
                    step = f", a multiple of {kind.step}" if kind.step > 1 else ""
                    raise ValueError(f"{key} must be an integer from {kind.start} to {kind[-1]}{step}, got {value}")
                if param is not None and not param.fits(value):
                    raise ValueError(f"{key} must fit the C parameter `{param.c_type} {param.name}`, got {value}")
            elif kind is float:
                if not number or not math.isfinite(value):
                    raise ValueError(f"{key} must be a finite number, got {value!r}")
                value = float(value)
            elif isinstance(kind, (tuple, list)):
                if value not in kind or isinstance(value, bool) != any(isinstance(c, bool) for c in kind):
                    raise ValueError(f"{key} must be one of {list(kind)}, got {value!r}")
            elif callable(kind):
                value = kind(value)
            else:
                raise SpecError(f"SHAPE[{key!r}] must be int, float, bool, a tuple of choices, a range or "
                                f"a function, got {kind!r}")
            out[key] = value
        return out
    return validate_shape


# ---- the spec, completed ---------------------------------------------------------------------

class Spec:
    """A plugin's spec module with the defaults it leaves out: every name the pipeline reads
    (plugins.SPEC) is an attribute, the module's own where it defines one."""

    def __init__(self, module, kernel, folder):
        self.module, self.kernel, self.folder = module, kernel, folder
        own = vars(module)
        self.LANGUAGE = "triton" if "TRITON" in own else "cute" if "CUTE" in own else "cuda"
        if self.LANGUAGE == "triton":
            self._triton(own)
        try:  # the configurations its base is the fastest of at a shape (ablate/job/candidates.py)
            self.CANDIDATE_SETS = candidates.declared(own, self.LANGUAGE, getattr(self, "META", None))
        except candidates.CandidateError as e:
            raise SpecError(str(e)) from None
        self.tensors = tensors_of(own["TENSORS"]) if "TENSORS" in own else None
        if self.LANGUAGE == "cute":
            self._cute(own)
        self._work()
        if self.tensors is not None:
            self.OUTPUTS = tuple(n for n, t in self.tensors.items() if t.role != "in")
            self.INOUTS = tuple(n for n, t in self.tensors.items() if t.role == "inout")
        elif "INOUTS" not in own:
            self.INOUTS = ()
        outputs = own.get("OUTPUTS", getattr(self, "OUTPUTS", ()))
        stray = [n for n in own.get("INOUTS", ()) if n not in outputs]
        if stray:
            raise SpecError(f"INOUTS {stray} are not OUTPUTS {list(outputs)}: an inout tensor is an output")
        self.prototype = None
        if "SYMBOL" in own and ("ARGTYPES" not in own or "arguments" not in own):
            from ablate.build.abi import read_prototype

            header = own.get("HEADER")
            try:
                self.prototype = read_prototype(folder, own["SYMBOL"], [header] if header else None)
            except ValueError as e:
                raise SpecError(str(e)) from None
            if "ARGTYPES" not in own:
                self.ARGTYPES = self.prototype.argtypes
                self.RESTYPE = self.prototype.restype
            if "arguments" not in own:
                self.arguments = self._arguments(own.get("PARAMS", {}))
        if "SHAPE" in own and "validate_shape" not in own:
            self.validate_shape = shape_validator(kernel, own["SHAPE"], self._field_params(own),
                                                  own.get("SHAPE_DEFAULTS"))
        if self.tensors is not None and "make_inputs" not in own:
            self.make_inputs = self._make_inputs
        self._work_model(own)
        if "TOLERANCE" in own and "tolerance" not in own:
            self.tolerance = lambda shape, t=own["TOLERANCE"]: formula(t, shape, "TOLERANCE")
        if "reference" in own:
            self.reference = self._reference(own["reference"])

    def __getattr__(self, name):
        return getattr(self.module, name)

    def __repr__(self):
        return f"<thin spec of {self.kernel} ({getattr(self.module, '__file__', '?')})>"

    def _triton(self, own):
        """SOURCE and SYMBOL from TRITON; args from the function's parameters; one config per
        compiled instance."""
        from ablate.build import triton_target

        try:
            kind, file, name = triton_target.split(own["TRITON"])
            if kind == "module":  # an installed package's function: its module's file is the source
                file = str(triton_target.source_file(own["TRITON"], self.folder))
            configs = triton_target.autotune_configs(triton_target.load(str(self.folder), own["TRITON"]))
        except ValueError as e:
            raise SpecError(str(e)) from None
        self.SOURCE, self.SYMBOL = own.get("SOURCE", file), own.get("SYMBOL", name)
        # An autotuned kernel: what its META does not declare of a config comes from the
        # autotuner, its first config where it cannot run (static mode); on a GPU, its pick for
        # the shape (ablate/build/triton_autotune.py). The declared META overrides either.
        self.META_DECLARED = dict(own.get("META") or {})
        self.META_FROM = "autotune" if configs and not set(configs[0]) <= set(self.META_DECLARED) else "spec.META"
        if self.META_FROM == "autotune":
            self.META = {**configs[0], **self.META_DECLARED}
        if configs and "TUNE_CONFIGS" not in own:  # the autotuner's list: the kernel's own neighbourhood (job/tunables.py)
            self.TUNE_CONFIGS = [{k: v for k, v in c.items() if k in self.META} for c in configs]
        for key in ("META", "INSTANCES"):
            value = self.META if key == "META" and configs else own.get(key)
            if not isinstance(value, dict) or not value:
                raise SpecError(f"spec.{key} must be a non-empty dict (a Triton kernel's "
                                f"{'base meta-parameters, unless @triton.autotune gives them' if key == 'META' else 'compiled instances: {name: shape}'})")
        if "TENSORS" not in own:
            raise SpecError("a Triton kernel's spec declares TENSORS (its inputs are made, and specialized, from them)")
        if "args" not in own:
            self.args = self._triton_args(own.get("PARAMS", {}))
            self._constexprs_given(own, configs)
        if "config_of" not in own:
            self.config_of = lambda name, configs: name if any(str(c["name"]) == name for c in configs) else None
        if "launched" not in own:
            self.launched = lambda name, shape, configs: name == self.instance_of(shape)

    def _cute(self, own):
        """SOURCE and SYMBOL from CUTE (without importing it: a missing DSL or library is one
        line naming the module); scalars from the shape and PARAMS; call_args from a @cute.jit
        function's parameters; one config per compiled instance (ablate/build/cute_aot.py)."""
        from ablate.build import cute_aot

        try:
            kind, file, name = cute_aot.split(own["CUTE"])
        except ValueError as e:
            raise SpecError(str(e)) from None
        if why := cute_aot.missing(own["CUTE"]):
            raise SpecError(why)
        self.SOURCE = own.get("SOURCE", str(cute_aot.source_file(own["CUTE"], self.folder)))
        self.SYMBOL = own.get("SYMBOL", name)
        for key, what in (("META", "the base's compile-time parameters: {name: value}"),
                          ("INSTANCES", "the compiled instances: {name: shape}")):
            if not isinstance(own.get(key), dict) or not own[key]:
                raise SpecError(f"spec.{key} must be a non-empty dict (a CuTe DSL kernel's {what})")
        if self.tensors is None:
            raise SpecError("a CuTe DSL kernel's spec declares TENSORS (its fake tensors are made from them)")
        self.STATIC = tuple(own.get("STATIC", ()))
        fields = set(own.get("SHAPE", {})) or None
        stray = [f for f in self.STATIC if fields is not None and f not in fields]
        if stray:
            raise SpecError(f"spec.STATIC {stray} are no field of SHAPE {sorted(fields)}")
        if "compile_args" in own and "call_args" not in own:
            raise SpecError(f"{own['CUTE']} is called through compile_args (a compile function): say its "
                            "compiled function's arguments too, call_args(inputs, shape) -> tuple")
        params = own.get("PARAMS", {})
        self.scalars = lambda shape: {**shape, **{k: formula(v, shape, f"PARAMS[{k!r}]") for k, v in params.items()}}
        if "call_args" not in own:
            self.call_args = self._cute_call_args
        if "instance_of" not in own:
            self.instance_of = lambda shape: cute_aot.instance_of(self, shape)
        if "config_of" not in own:
            self.config_of = lambda name, configs: next(
                (str(c["name"]) for c in configs if str(c["name"]) == name.split(".")[0]), None)
        if "launched" not in own:
            self.launched = lambda name, shape, configs: name.split(".")[0] == self.instance_of(shape)

    def _cute_call_args(self, inputs, shape):
        """The compiled function's arguments, in the @cute.jit function's order: its parameters
        neither of META nor the stream (TVM-FFI's environment stream, torch's current one), each
        the tensor of its name, else the shape field or PARAMS entry of its name."""
        from ablate.build import cute_aot

        fn = cute_aot.load(str(self.folder), self.CUTE)
        scalars = self.scalars(shape)
        out = []
        for p in cute_aot.runtime_params(fn, self.META):
            if p.name in inputs:
                out.append(inputs[p.name])
            elif p.name in scalars:
                out.append(scalars[p.name])
            else:
                raise ValueError(f"{self.CUTE}: parameter {p.name!r} is no tensor of TENSORS, no shape field "
                                 "and not in PARAMS")
        return tuple(out)

    def _constexprs_given(self, own, configs):
        """SpecError naming a constexpr of the function that nothing gives a value: not META,
        not its autotuner's configs, no @triton.heuristics, no shape field or PARAMS entry of
        its name, and no default (Triton would fail at the launch: `dynamic_func() missing 1
        required positional argument`)."""
        from ablate.build import triton_aot, triton_target

        if "SHAPE" not in own:  # a validate_shape of its own: the shape's fields are not known here
            return
        obj = triton_target.load(str(self.folder), own["TRITON"])
        fn = triton_aot.load_function(str(self.folder), own["TRITON"])
        given = (set(self.META) | {k for c in configs for k in c} | triton_target.heuristic_names(obj)
                 | set(own.get("PARAMS", {})) | set(own.get("SHAPE", {})))
        missing = [p.name for p in fn.params if p.is_constexpr and not p.has_default and p.name not in given]
        if missing:
            raise SpecError(f"{fn.__name__}: constexpr {', '.join(map(repr, missing))} has no value: give it in META "
                            f"(fixed by the library's launcher), as a shape field of its name, or in PARAMS "
                            f"({{{missing[0]!r}: a formula of the shape}})")

    def instance_of(self, shape):
        """The compiled instance (of INSTANCES) a shape runs: the one whose specialization its
        arguments take, as Triton's JIT would specialize them."""
        from ablate.build import triton_aot

        return triton_aot.instance_of(self, self.folder, shape)

    def _triton_args(self, params):
        """args(inputs, shape) -> {parameter: value}, what the library's launcher passes: the
        function's non-constexpr parameters (the tensor of its name, the shape field of its
        name, or PARAMS[name]), and the constexprs that come from the shape (a shape field of
        its name, or PARAMS[name]: DyT's `N`), unless META gives them or a @triton.heuristics
        computes them (those are meta-parameters: ablate/build/triton_aot.py)."""
        def args(inputs, shape):
            from ablate.build import triton_aot, triton_target

            fn = triton_aot.load_function(str(self.folder), self.TRITON)
            given = set(self.META) | triton_target.heuristic_names(triton_target.load(str(self.folder), self.TRITON))
            out = {}
            for p in fn.params:
                if p.is_constexpr:
                    target = params.get(p.name, p.name)
                    if p.name in given:
                        continue
                    if isinstance(target, str) and target in shape:
                        out[p.name] = shape[target]
                    elif p.name in params:
                        out[p.name] = formula(target, shape, f"PARAMS[{p.name!r}]")
                    continue
                target = params.get(p.name, p.name)
                if isinstance(target, str) and target in inputs:
                    out[p.name] = inputs[target]
                elif isinstance(target, str) and target in shape:
                    out[p.name] = shape[target]
                elif p.name in params:
                    out[p.name] = formula(target, shape, f"PARAMS[{p.name!r}]")
                elif not p.has_default:  # one with a default takes it (or spec.descriptors' value)
                    raise ValueError(f"{fn.__name__}: parameter {p.name!r} is no tensor of TENSORS, no shape "
                                     f"field and not in PARAMS")
            return out
        return args

    def _work(self):
        own = vars(self.module)
        work, bound = own.get("WORK"), own.get("BOUND")
        if work is None and bound is None:
            return  # plugins.load_dir names what is missing
        if work is not None and work not in WORKS:
            raise SpecError(f"spec.WORK must be one of {list(WORKS)}, got {work!r}")
        if bound is not None and bound not in BOUNDS:
            raise SpecError(f"spec.BOUND must be one of {list(BOUNDS)}, got {bound!r}")
        if work is not None and bound is not None and (work == "memory") != (bound == "memory"):
            raise SpecError(f"spec.WORK {work!r} and spec.BOUND {bound!r} disagree; WORK alone says both")
        self.WORK = work or ("memory" if bound == "memory" else "fp16_tensor")
        self.BOUND = bound or ("memory" if work == "memory" else "compute")

    def _work_model(self, own):
        if "FLOPS" in own and "flops" not in own:
            self.flops = lambda shape, f=own["FLOPS"]: formula(f, shape, "FLOPS")
        elif "flops" not in own and getattr(self, "WORK", None) == "memory":
            self.flops = lambda shape: 0
        if "BYTES" in own and "bytes_moved" not in own:
            self.bytes_moved = lambda shape, b=own["BYTES"]: formula(b, shape, "BYTES")
        elif "bytes_moved" not in own and self.tensors is not None:
            self.bytes_moved = self._bytes_moved

    def _bytes_moved(self, shape):
        """Each `in` read once, each `out` written once, each `inout` both."""
        return sum((2 if t.role == "inout" else 1) * t.nbytes(shape) for t in self.tensors.values())

    def _make_inputs(self, shape, generator, device):
        return {name: t.make(shape, generator, device) for name, t in self.tensors.items()}

    def _reference(self, reference):
        """The spec's reference, its answer as {output: tensor} (a lone tensor is the only output's)."""
        def wrapped(inputs, shape):
            out = reference(inputs, shape)
            if isinstance(out, dict):
                return out
            outputs = self.OUTPUTS
            if len(outputs) != 1:
                raise ValueError(f"reference returned one {type(out).__name__}; {self.kernel} has outputs "
                                 f"{list(outputs)}: return {{name: tensor}}")
            return {outputs[0]: out}
        return wrapped

    def _field_params(self, own):
        """{shape field: the C parameter it is passed to as it is}."""
        if self.prototype is None:
            return {}
        params = own.get("PARAMS", {})
        return {params.get(p.name, p.name): p for p in self.prototype.params
                if p.kind == "scalar" and isinstance(params.get(p.name, p.name), str)}

    def _arguments(self, params):
        proto, tensors = self.prototype, self.tensors
        for p in proto.params:
            target = params.get(p.name, p.name)
            if p.kind == "pointer" and tensors is not None and target not in tensors:
                raise SpecError(f"{proto.symbol}: pointer parameter {p.name!r} ({proto.where}) is no tensor of "
                                f"TENSORS {list(tensors)}; declare it, or map it in PARAMS")
        if tensors is not None:
            taken = {params.get(p.name, p.name) for p in proto.params if p.kind == "pointer"}
            unused = [n for n in tensors if n not in taken]
            if unused:
                raise SpecError(f"TENSORS {unused} are no pointer parameter of {proto}")
        fields = set(vars(self.module).get("SHAPE", {}))
        for p in proto.params:
            if fields and p.kind == "scalar" and p.name not in params and p.name not in fields:
                raise SpecError(f"{proto.symbol}: parameter {p.name!r} ({proto.where}) is no field of SHAPE "
                                f"{sorted(fields)}; give its value in PARAMS = {{{p.name!r}: formula}}")

        def arguments(ptrs, shape, stream):
            out = []
            for p in proto.params:
                target = params.get(p.name, p.name)
                if p.kind == "stream":
                    out.append(stream)
                elif p.kind == "pointer":
                    out.append(ptrs[target])
                else:
                    value = formula(target, shape, f"{proto.symbol} parameter {p.name!r}:")
                    if isinstance(value, bool):
                        value = int(value)
                    if not p.fits(value):
                        raise ValueError(f"{proto.symbol}: parameter {p.name!r} (`{p.c_type}`) cannot hold {value!r}")
                    out.append(value)
            return tuple(out)
        return arguments


def roles(spec) -> dict:
    """{tensor name: role} of the tensors a spec declares (a full-form spec: its OUTPUTS are
    out, or inout where INOUTS says so; the other tensors of make_inputs are in)."""
    tensors = getattr(spec, "tensors", None)
    if tensors is not None:
        return {n: t.role for n, t in tensors.items()}
    inouts = getattr(spec, "INOUTS", ())
    return {n: "inout" if n in inouts else "out" for n in spec.OUTPUTS}
