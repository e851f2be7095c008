"""CuTe DSL kernels (CUTLASS's Python DSL) built ahead of time, for a named GPU arch, without a GPU.

A CuTe DSL plugin's spec names, in `CUTE`, either a `@cute.jit` function (`base/file.py:name`,
relative to the plugin folder, or `package.module:name`) or a library's *compile function*:
a plain function that calls `cute.compile` itself and returns what it compiled (QuACK's
`quack.rmsnorm:_compile_rmsnorm_fwd`). `META` holds the base's compile-time parameters
(`cutlass.Constexpr` arguments, a library's configuration fields); a pathology overrides them
(`meta:`, as a Triton kernel's). Each instance of `INSTANCES = {name: a shape}` is compiled
once per variant: `spec.compile_args(shape, meta) -> (args, kwargs)` gives the call (a
compile function's own arguments; for a `@cute.jit` function its default makes CuTe's fake
tensors from TENSORS, a dimension of a STATIC field compiled in and every other dynamic,
`cute.sym_int()`, META as keyword arguments, and the stream TVM-FFI's environment stream, so
the launch follows torch's current stream), with `--enable-tvm-ffi` and the arch.

Each variant compiles in a process of its own (`build.jobs` at once), the DSL's settings in
its environment before `import cutlass` reads them (they are read once): `CUTE_DSL_ARCH` (the
arch, so that the DSL builds its engine and reads the arch it compiles for),
`CUTE_DSL_KEEP=ptx,cubin` with a dump folder of its own, `CUTE_DSL_COMPILER_OPT=remarks{ptx}`
(ptxas's `-v` report on stderr: the build log, each kernel's name replaced by its instance's,
so ablate/build/ptxas.py reads registers and spills), and the spec's `ENV` (QuACK's
`QUACK_CACHE_ENABLED=0`: a hit of its disk cache returns a function without its cubin). The
library is a manifest `<digest>.cute.json` beside `<digest>.cute/<instance>/`: the cubin (its
SASS: ablate/build/sass.py), the PTX, and the TVM-FFI object (`export_to_c`) that the GPU
loads (ablate/build/cute_launch.py), so the GPU runs the very cubin static mode read. Per
instance the manifest holds the kernels' threads (the PTX's `.reqntid`) and dynamic shared
memory (the constant the host code stores into the launch's `dynamicSmemBytes`, read off the
lowered host IR). The digest hashes the request (function, meta, instances, arch, ENV), the
plugin folder's Python, a library's package files, the DSL's, TVM-FFI's and Python's
versions and the DSL's CUDA libraries installed (the CUDA flavour changes the cubin), and
this file. `python -m ablate.build.cute_aot REQUEST.json` compiles one by hand.
"""
import functools
import hashlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ablate.build import manifests, triton_target
from ablate.build.triton_aot import effective_meta

SUFFIX = ".cute.json"
# the DSL's own distributions, whose versions (and which CUDA flavour of its libraries is
# installed: -cu12, -cu13) are in every digest
DSL_DISTS = ("nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-base", "nvidia-cutlass-dsl-libs-core",
             "nvidia-cutlass-dsl-libs-cu12", "nvidia-cutlass-dsl-libs-cu13", "apache-tvm-ffi")
# torch's dtype name -> cutlass's numeric type
DTYPES = {"float16": "Float16", "bfloat16": "BFloat16", "float32": "Float32", "float64": "Float64",
          "int8": "Int8", "uint8": "Uint8", "int16": "Int16", "int32": "Int32", "int64": "Int64",
          "float8_e4m3fn": "Float8E4M3FN", "float8_e5m2": "Float8E5M2", "bool": "Boolean"}


def is_cute(kernel) -> bool:
    """Whether a plugin (or its spec) is a CuTe DSL kernel: its spec names CUTE."""
    return getattr(getattr(kernel, "spec", kernel), "CUTE", None) is not None


def is_manifest(lib) -> bool:
    return str(lib).endswith(SUFFIX)


def split(text) -> tuple[str, str, str]:
    """("file", FILE.py, NAME) or ("module", package.module, NAME) of spec.CUTE."""
    try:
        return triton_target.split(text)
    except ValueError:
        raise ValueError(f"spec.CUTE must be 'FILE.py:FUNCTION' (relative to the plugin folder) or "
                         f"'package.module:FUNCTION' (an installed package's), got {text!r}") from None


def missing(target) -> str | None:
    """Why spec.CUTE cannot be imported here, in one line (the DSL, or the library, not
    installed), without importing it; None when it can be."""
    kind, where, _ = split(target)
    for module in ("cutlass", *([where.split(".")[0]] if kind == "module" else [])):
        if importlib.util.find_spec(module) is None:
            what = "the CuTe DSL (pip install nvidia-cutlass-dsl)" if module == "cutlass" else "its package"
            return f"spec.CUTE {target!r}: module {module!r} is not installed ({what})"
    return None


@functools.cache
def load(folder, target):
    """The object spec.CUTE names: a file's module imported by path with the plugin folder
    on sys.path, or an installed package's module."""
    kind, where, name = split(target)
    module, origin = triton_target.module_of(folder, kind, where, "ablate_cute")
    obj = getattr(module, name, None)
    if not callable(obj):
        raise ValueError(f"spec.CUTE: {origin} has no function {name!r}")
    return obj


def is_jit(obj) -> bool:
    """Whether obj is a @cute.jit function (compiled here by cute.compile), not a compile function."""
    return hasattr(obj, "_dsl_cls") and hasattr(obj, "_decorator_kind")


def is_stream(param) -> bool:
    """A parameter that takes the CUDA stream: named `stream`, or annotated a CUstream."""
    return param.name == "stream" or "CUstream" in str(param.annotation)


def runtime_params(fn, meta) -> list:
    """The parameters of a @cute.jit function that its compiled function takes, in order:
    neither compile-time (META's) nor the stream (TVM-FFI's environment stream)."""
    return [p for p in inspect.signature(fn).parameters.values() if p.name not in meta and not is_stream(p)]


def source_file(target, folder) -> Path:
    """The file holding the function: the plugin's own, or the installed module's."""
    kind, where, _ = split(target)
    if kind == "file":
        return Path(folder) / where
    # by the top package's folder: find_spec of a submodule would import the package (QuACK's
    # imports torch and the DSL: 5 s)
    top, *rest = where.split(".")
    path = Path(importlib.util.find_spec(top).origin).parent.joinpath(*rest)
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


@functools.cache
def package(target) -> dict:
    """{cute_module, cute_package ("name version"), cute_sources (a hash of every .py of the
    package the module lies in: a library's kernel spans its files)} of a module-path CUTE; {}
    for a file of the plugin (its own files are its sources)."""
    kind, where, name = split(target)
    if kind != "module":
        return {}
    top = where.split(".")[0]
    found = importlib.util.find_spec(top)
    dist = manifests.distribution(top)
    h = hashlib.sha256()
    folder = Path(found.origin).parent
    for path in sorted(folder.rglob("*.py")):
        if "__pycache__" not in path.parts:
            h.update(path.relative_to(folder).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return {"cute_module": f"{where}:{name}", "cute_package": dist, "cute_sources": h.hexdigest()[:16]}


def target_arch(arch: str) -> str:
    """The DSL's arch for a build arch: sm_90 -> sm_90a (clusters, TMA and wgmma need the
    arch-specific target, as Triton compiles capability 90 as sm_90a)."""
    m = re.match(r"^sm_(\d+)a?$", arch)
    if not m:
        raise ValueError(f"build.arch {arch!r} is no sm_XX")
    return f"sm_{m.group(1)}a" if int(m.group(1)) >= 90 else f"sm_{m.group(1)}"


def instance_key(spec, shape) -> tuple:
    """What tells instances apart: the STATIC fields' values and the tensors' dtypes."""
    return (tuple(shape.get(f) for f in spec.STATIC),
            tuple(t.dtype_name(shape) for t in spec.tensors.values()))


def instance_of(spec, shape) -> str | None:
    """The instance (of spec.INSTANCES) compiled for a shape's STATIC fields and dtypes, or None."""
    wanted = instance_key(spec, shape)
    return next((name for name, s in spec.INSTANCES.items()
                 if instance_key(spec, spec.validate_shape(dict(s))) == wanted), None)


# ---- the build (the parent side) --------------------------------------------------------------

def build(variants, build_dir: Path, jobs: int, kernel, root, arch: str, result):
    """{variant name: `result` (compile.BuildResult)} of a CuTe DSL plugin's variants, built in
    `build_dir` for `arch`, each compiled in a process of its own (`jobs` at once; 0: one per
    CPU) unless its manifest is there already (ablate/build/manifests.py)."""
    arch = target_arch(arch)
    return manifests.build(variants, build_dir, arch, result, suffix=SUFFIX, who="CuTe DSL",
                           plan=lambda variant: request_of(variant, kernel, arch),
                           digest=lambda request: digest_of(request, kernel),
                           compile_all=lambda todo: _compile(build_dir, todo, Path(root).resolve(),
                                                             jobs or os.cpu_count() or 1))


def request_of(variant, kernel, arch) -> dict:
    """What the compile process needs of a variant, as JSON: the effective meta and each
    instance's shape. ValueError naming a meta name that is none of META's."""
    spec = kernel.spec
    unknown = sorted(k for k in variant.meta if k not in spec.META)
    if unknown:
        raise ValueError(f"meta {unknown} of {', '.join(variant.pathologies)}: not among spec.META's names "
                         f"({', '.join(spec.META)}), the compile-time parameters of {spec.CUTE}")
    shapes = {}
    for name, shape in spec.INSTANCES.items():
        try:
            shapes[name] = describe(spec, spec.validate_shape(dict(shape)))
        except ValueError as e:
            raise ValueError(f"spec.INSTANCES[{name!r}]: {e}") from None
    return {"kernel_dir": str(Path(kernel.dir).resolve()), "kernel": kernel.name, "function": spec.CUTE,
            "arch": arch, "variant": variant.name, "pathologies": list(variant.pathologies),
            "meta": effective_meta(spec, variant), "instances": shapes,
            "env": {str(k): str(v) for k, v in (getattr(spec, "ENV", None) or {}).items()},
            **({"package": package(spec.CUTE)} if package(spec.CUTE) else {})}


def versions() -> str:
    """The DSL's distributions and their versions (the installed CUDA flavours among them),
    and Python's: in every digest."""
    found = []
    for dist in DSL_DISTS:
        try:
            found.append(f"{dist} {importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            pass
    return "; ".join(found) + f"; python {sys.version_info.major}.{sys.version_info.minor}"


def digest_of(request, kernel) -> str:
    return manifests.digest(request, kernel.dir, versions(), Path(__file__))


def environment(request, dump: Path) -> dict:
    """The compile process's environment: the DSL's settings, read once at `import cutlass`."""
    return {**os.environ, **request["env"], "CUTE_DSL_ARCH": request["arch"], "CUTE_DSL_KEEP": "ptx,cubin",
            "CUTE_DSL_DUMP_DIR": str(dump), "CUTE_DSL_COMPILER_OPT": "remarks{ptx}", "PYTHONUNBUFFERED": "1"}


def _compile(build_dir: Path, todo: dict, root: Path, jobs: int):
    """Each variant of `todo` ({digest: request}) compiled by a process of its own, `jobs` at
    once; on success its manifest and log are moved into place."""
    from concurrent.futures import ThreadPoolExecutor

    def one(digest, request):
        path = build_dir / f".{digest}.request.json"
        path.write_text(json.dumps({**request, "out": str(build_dir), "digest": digest}))
        with tempfile.TemporaryDirectory(prefix="cute-dump-") as dump:
            run = subprocess.run([sys.executable, "-m", "ablate.build.cute_aot", str(path)], cwd=root,
                                 capture_output=True, text=True, env=environment(request, Path(dump)), check=False)
        path.unlink(missing_ok=True)
        log = (f"python -m ablate.build.cute_aot ({request['variant']}: meta {request['meta']}, "
               f"arch {request['arch']})\n" + run.stdout + strip_colours(run.stderr))
        manifests.settle(build_dir, digest, SUFFIX, log, run.returncode, "CuTe DSL")

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for f in [pool.submit(one, d, r) for d, r in todo.items()]:
            f.result()


def strip_colours(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


# ---- the compile process ----------------------------------------------------------------------

def fake_args(fn, described, meta):
    """(args, kwargs) of cute.compile for a @cute.jit function at an instance (`described`:
    its tensors' dims and dtypes, a STATIC field's dimension a number and every other a
    formula, and its scalars): a tensor parameter a fake tensor, each formula's dimension a
    symbolic int (one per formula), META's as keyword arguments, the stream TVM-FFI's
    environment stream, a scalar its annotated type of the shape's value."""
    import cutlass
    import cutlass.cute as cute

    syms, args, kwargs = {}, [], {}
    for p in inspect.signature(fn).parameters.values():
        if p.name in meta:
            kwargs[p.name] = meta[p.name]
        elif is_stream(p):
            args.append(cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True))
        elif p.name in described["tensors"]:
            t = described["tensors"][p.name]
            dims = tuple(d if isinstance(d, int) else syms.setdefault(d, cute.sym_int()) for d in t["dims"])
            # row-major as torch makes it (the DSL's default order is the first mode fastest)
            args.append(cute.runtime.make_fake_compact_tensor(getattr(cutlass, DTYPES[t["dtype"]]), dims,
                                                              stride_order=tuple(reversed(range(len(dims)))),
                                                              assumed_align=16))
        elif p.name in described["scalars"]:
            value = described["scalars"][p.name]
            args.append(p.annotation(value) if p.annotation is not inspect.Parameter.empty else value)
        else:
            raise SystemExit(f"error: parameter {p.name!r} of {fn.__name__} is none of META, TENSORS, the "
                             "shape's fields or PARAMS, and not the stream")
    return args, kwargs


def describe(spec, shape) -> dict:
    """An instance as the compile process reads it: each tensor's dims (a STATIC field's as
    its value, any other as its formula) and dtype, and the scalars (the shape's fields, PARAMS)."""
    tensors = {}
    for name, t in spec.tensors.items():
        dims = [int(shape[d.strip()]) if isinstance(d, str) and d.strip() in spec.STATIC else
                (d.strip() if isinstance(d, str) else int(d)) for d in t.dims]
        tensors[name] = {"dims": dims, "dtype": t.dtype_name(shape)}
    return {"shape": shape, "tensors": tensors, "scalars": spec.scalars(shape)}


def compile_instance(obj, module, described, meta, arch):
    """The compiled function of one instance: cute.compile of a @cute.jit function, or what a
    compile function returns for the spec's compile_args (`module`: spec.py as it is)."""
    import cutlass.cute as cute

    if hasattr(module, "compile_args"):
        args, kwargs = module.compile_args(dict(described["shape"]), dict(meta))
    elif is_jit(obj):
        args, kwargs = fake_args(obj, described, meta)
    else:
        raise SystemExit(f"error: {module.CUTE} is no @cute.jit function, so the spec must say how to call it "
                         "(compile_args(shape, meta) -> (args, kwargs))")
    if is_jit(obj):
        return cute.compile(obj, *args, **kwargs, options=f"--enable-tvm-ffi --gpu-arch {arch}")
    return obj(*args, **kwargs)


def ptxas_report(text: str) -> str:
    """ptxas's `-v` lines out of the DSL's remarks (`remarks{ptx}`): each follows "ptxas output:",
    as printed, or, in a spill's remark, indented and wrapped at 100 columns, a record's
    continuation lines joined back to it."""
    records, inside = [], False
    for line in strip_colours(text).splitlines():
        s = line.strip()
        if "ptxas output:" in s:
            inside, s = True, s.split("ptxas output:", 1)[1].strip()
        if not inside or not s:
            continue
        if s.startswith(("suggestion:", "remark", "-->", "note:")):
            inside = False
        elif s.startswith("ptxas"):
            records.append(s)
        elif records:
            records[-1] += " " + s
    return "\n".join(records) + "\n"


_ENTRY = re.compile(r"^\s*\.(?:visible\s+)?\.entry\s+(\w+)\s*\(", re.M)


def kernels_of(ptx: str) -> dict:
    """{kernel name: threads per block} of a PTX module (its `.reqntid` or `.maxntid`, 0 where
    it declares neither)."""
    out = {}
    starts = [(m.group(1), m.end()) for m in _ENTRY.finditer(ptx)]
    for i, (name, at) in enumerate(starts):
        body = ptx[at:starts[i + 1][1] if i + 1 < len(starts) else len(ptx)]
        m = re.search(r"\.(?:reqntid|maxntid)\s+(\d+)(?:\s*,\s*(\d+))?(?:\s*,\s*(\d+))?", body.split("{", 1)[0])
        out[name] = (int(m.group(1)) * int(m.group(2) or 1) * int(m.group(3) or 1)) if m else 0
    return out


_LAUNCH_CONFIG = "!llvm.struct<(array<3 x i32>, array<3 x i32>, i64, ptr, ptr, i32)>"


def dynamic_smem(host_ir: str) -> list[int]:
    """The dynamic shared memory of each launch in the lowered host IR: the i64 constant
    stored into field 2 (dynamicSmemBytes) of cudaLaunchConfig_t; ValueError where a launch
    stores none (a size the host computes at run time)."""
    sizes = []
    for function in host_ir.split("llvm.func ")[1:]:
        geps = re.findall(r"(%\d+) = llvm\.getelementptr %\d+\[0, 2\] : \(!llvm\.ptr\) -> !llvm\.ptr, "
                          + re.escape(_LAUNCH_CONFIG), function)
        for gep in geps:
            stored = re.search(rf"llvm\.store (%\d+), {re.escape(gep)} : i64", function)
            value = stored and re.search(rf"{re.escape(stored.group(1))} = llvm\.mlir\.constant\((\d+) : i64\)",
                                         function)
            if not value:
                raise ValueError("a launch's dynamic shared memory is no constant of the host code")
            sizes.append(int(value.group(1)))
    return sizes


def compile_variant(request) -> None:
    """Compile every instance of one variant into <out>/<digest>.cute/<instance>/ and write
    <out>/<digest>.cute.json last. ptxas's report goes to stderr (the DSL's remarks), each
    kernel's name replaced by its instance's (<instance>, or <instance>.<i> for the i-th of
    several)."""
    import cutlass
    from cutlass.base_dsl.version_info import CUDA_VERSION

    folder = Path(request["kernel_dir"])
    module = _import_spec(request["kernel"], folder / "spec.py")
    obj = load(str(folder), request["function"])
    out = Path(request["out"]) / f"{request['digest']}.cute"
    shutil.rmtree(out, ignore_errors=True)
    instances, configs = {}, []
    for name, described in request["instances"].items():
        print(f"ptxas info    : instance {name}", file=sys.stderr, flush=True)
        with _stderr_caught() as caught:
            compiled = compile_instance(obj, module, described, request["meta"], request["arch"])
        cubin, ptx = compiled.artifacts.CUBIN, compiled.artifacts.PTX
        if not isinstance(cubin, bytes) or not isinstance(ptx, str) or not ptx.strip():
            raise SystemExit(f"error: instance {name}: the DSL kept no cubin and PTX (a cached compile "
                             "returns none: the library's own cache must be off, spec.ENV)")
        threads = kernels_of(ptx)
        smem = dynamic_smem(str(compiled.ir_module))
        names = {k: name if len(threads) == 1 else f"{name}.{i}" for i, k in enumerate(threads)}
        report = ptxas_report(caught())
        for mangled, readable in names.items():
            report = re.sub(rf"(entry function '|Function properties for ){re.escape(mangled)}\b",
                            rf"\g<1>{readable}", report)
        print(report, file=sys.stderr, flush=True)
        where = out / name
        where.mkdir(parents=True)
        (where / "kernel.cubin").write_bytes(cubin)
        (where / "kernel.ptx").write_text(ptx)
        compiled.export_to_c(object_file_path=str(where / "kernel.o"), function_name="func")
        files = {k: f"{out.name}/{name}/kernel.{k}" for k in ("cubin", "ptx", "o")}
        instances[name] = {"shape": described["shape"], "files": files, "kernels": names, "threads": max(threads.values()),
                           "smem_bytes": max(smem, default=0), "launches": len(smem)}
        configs.append({"name": name, "threads": max(threads.values()), "smem_bytes": max(smem, default=0)})
    manifest = {"function": request["function"], "arch": request["arch"], "meta": request["meta"],
                "cutlass": cutlass.__version__, "cuda": f"{CUDA_VERSION.major}.{CUDA_VERSION.minor}",
                "instances": instances, "info": {"pathologies": request["pathologies"], "configs": configs}}
    done = Path(request["out"]) / f"{request['digest']}{SUFFIX}"
    tmp = done.with_name(f".{done.name}.{os.getpid()}")
    tmp.write_text(json.dumps(manifest, indent=1))
    os.replace(tmp, done)


def _import_spec(name, path):
    loader = importlib.util.spec_from_file_location(f"ablate_kernel_{name}", path)
    module = importlib.util.module_from_spec(loader)
    sys.modules[loader.name] = module
    loader.loader.exec_module(module)
    return module


class _stderr_caught:
    """fd 2 caught while the DSL compiles (ptxas's remarks come from its C++ side)."""

    def __enter__(self):
        self.file = tempfile.TemporaryFile()
        sys.stderr.flush()
        self.saved = os.dup(2)
        os.dup2(self.file.fileno(), 2)
        return self.read

    def read(self):
        self.file.seek(0)
        return self.file.read().decode(errors="replace")

    def __exit__(self, *exc):
        sys.stderr.flush()
        os.dup2(self.saved, 2)
        os.close(self.saved)
        if exc[0] is not None:  # a failed compile: what it printed goes to the log
            sys.stderr.write(strip_colours(self.read()))


# ---- reading a built variant ------------------------------------------------------------------

def manifest(lib) -> dict:
    return json.loads(Path(lib).read_text())


def info(lib) -> dict:
    """The variant info: its pathologies and one config per instance ({name, threads,
    smem_bytes: the dynamic shared memory of its launch}); no seams (what changed is the meta)."""
    return manifest(lib)["info"]


def cubins(lib) -> dict[str, tuple[Path, dict]]:
    """{instance: (its cubin, {kernel's name in the cubin: the name ablate gives it})}."""
    folder = Path(lib).parent
    return {name: (folder / inst["files"]["cubin"], inst["kernels"]) for name, inst in manifest(lib)["instances"].items()}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m ablate.build.cute_aot REQUEST.json")
    compile_variant(json.loads(Path(sys.argv[1]).read_text()))
