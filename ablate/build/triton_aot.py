"""Triton kernels built ahead of time, for a named GPU target, without a GPU.

A Triton plugin's spec names its `@triton.jit` function (`TRITON = "base/file.py:function"`),
the base's meta-parameters (`META`: its constexprs and compile options such as num_warps and
num_stages), its launch grid (`grid(shape, meta)`) and its compiled instances (`INSTANCES =
{name: a shape}`: one kernel per distinct specialization, e.g. fp16 and bf16). A variant is
the base's META with its pathologies' `meta:` overrides (ablate/job/variant.py).

Each instance is specialized exactly as Triton's JIT would specialize it at launch: the
function's own binder (triton.runtime.jit.create_function_from_signature) reads arguments made
of the instance's shape (tensors on torch's `meta` device: dtype, and an address of 0, which is
16-byte aligned as every CUDA allocation is), then `triton.compile(ASTSource(...),
target=GPUTarget("cuda", capability, 32), options)`. The library of a variant is a manifest,
`<digest>.triton.json`, beside a folder `<digest>.triton/` holding each instance's cubin, PTX
and Triton metadata; the digest hashes the plugin's Python, the effective meta-parameters, the
instances, the target, Triton's version and this file. Each variant compiles in a process of
its own, several at once (build.jobs), forked by one process that imports torch and Triton
once (ablate/build/triton_forks.py); `python -m ablate.build.triton_aot REQUEST.json` compiles
one by hand.

ptxas's own report (`-v`, which Triton passes; knobs.nvidia.dump_ptxas_log prints it) is the
build log, with the function's name replaced by the instance's, so that ablate/build/ptxas.py
reads registers and spills per instance; the SASS is cuobjdump's of each cubin (sass.read).
A GPU loads the very cubins (ablate/build/triton_launch.py).
"""
import functools
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ablate.build import manifests, triton_target

SUFFIX = ".triton.json"
# Compile options a pathology may override besides the function's constexprs (Triton's CUDAOptions).
OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion", "launch_pdl")


def is_triton(kernel) -> bool:
    """Whether a plugin (or its spec) is a Triton kernel: its spec names TRITON."""
    spec = getattr(kernel, "spec", kernel)
    return getattr(spec, "TRITON", None) is not None


def is_manifest(lib) -> bool:
    return str(lib).endswith(SUFFIX)


def split_target(text) -> tuple[str, str]:
    """`base/matmul.py:matmul_kernel` -> (file, function), `package.module:function` ->
    (module, function); ValueError naming TRITON (triton_target.split)."""
    _, where, name = triton_target.split(text)
    return where, name


@functools.cache
def load_function(folder, target):
    """The @triton.jit function `target` names (FILE.py:NAME of the plugin in `folder`, its
    module imported by path with the folder on sys.path, or package.module:NAME), under its
    @triton.autotune and @triton.heuristics wrappers, if any (triton_target.unwrap)."""
    return triton_target.unwrap(triton_target.load(folder, target))


def full_meta(folder, target, args: dict, meta: dict) -> dict:
    """`meta` with the values of the function's @triton.heuristics for these arguments, as
    Triton computes them at a launch (triton_target.heuristic_values)."""
    return {**meta, **triton_target.heuristic_values(triton_target.load(folder, target), args, meta)}


def effective_meta(spec, variant) -> dict:
    """The base's META with the variant's overrides; {fraction_of_base: F} of an integer of the
    base's is int(F * it), at least 1. ValueError naming the parameter."""
    meta = dict(getattr(variant, "base_meta", None) or spec.META)
    for key, value in variant.meta.items():
        if isinstance(value, dict):
            base = meta.get(key)
            if isinstance(base, bool) or not isinstance(base, int):
                raise ValueError(f"meta.{key}: a fraction of the base's value needs an integer in spec.META, "
                                 f"got {base!r}")
            value = max(1, int(value["fraction_of_base"] * base))
        meta[key] = value
    return meta


def fake_inputs(spec, shape):
    """The spec's tensors for `shape` on torch's meta device: dtype and shape, no memory."""
    import torch

    return {n: torch.empty(t.size(shape), dtype=getattr(torch, t.dtype_name(shape)), device="meta")
            for n, t in spec.tensors.items()}


def with_descriptors(spec, args: dict, meta: dict) -> dict:
    """`args` with the host-side tensor descriptors the spec asks for under `meta`:
    `spec.descriptors(meta)` gives {parameter: (tensor argument, block shape) or None}; each is a
    Triton `TensorDescriptor` over that argument (its shape and strides), which the launcher
    turns into a CUtensorMap parameter of the kernel at each launch, so that the kernel makes no
    descriptor on the device; None where the configuration takes none (a constexpr None). A spec
    without `descriptors` passes `args` as they are."""
    wanted = getattr(spec, "descriptors", None)
    if wanted is None:
        return args
    from triton.tools.tensor_descriptor import TensorDescriptor

    out = dict(args)
    for param, what in wanted(meta).items():
        if what is None:
            out[param] = None
            continue
        name, block = what
        if name not in args:
            raise ValueError(f"spec.descriptors: {param} names {name!r}, which is not an argument ({', '.join(args)})")
        tensor = args[name]
        out[param] = TensorDescriptor(tensor, [int(d) for d in tensor.shape], [int(d) for d in tensor.stride()],
                                      [int(b) for b in block])
    return out


def binder_of(fn, capability):
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    target = GPUTarget("cuda", capability, 32)
    backend = make_backend(target)
    return target, backend, create_function_from_signature(fn.signature, fn.params, backend)


def specialization(fn, binder, args: dict, meta: dict):
    """(bound args, Triton's specialization of them as JSON-able lists, options)."""
    unknown = [k for k in args if k not in fn.arg_names]
    if unknown:
        raise ValueError(f"args: {unknown} are no parameters of {fn.__name__}{tuple(fn.arg_names)}")
    constexprs = {p.name for p in fn.params if p.is_constexpr}
    both = [k for k in args if k in meta and k not in constexprs]
    if both:
        raise ValueError(f"spec.META: {both} are given by args too")
    # a constexpr of the shape (DyT's N) that the meta sets too: a pathology's `meta:` wins
    args = {k: v for k, v in args.items() if k not in meta}
    bound, spec, options = binder(**args, **meta)
    return bound, json.loads(json.dumps([list(s) for s in spec])), options


def runtime_part(spec_list, fn):
    """The specialization of the non-constexpr parameters: what tells instances apart."""
    return [s for s, p in zip(spec_list, fn.params) if not p.is_constexpr]


def instance_of(spec, folder, shape, capability=90) -> str | None:
    """The instance (of spec.INSTANCES) whose specialization a shape's arguments take, or None."""
    fn = load_function(str(folder), spec.TRITON)
    _, _, binder = binder_of(fn, capability)
    constexprs = {p.name for p in fn.params if p.is_constexpr}

    def key(s):  # the runtime arguments' specialization, the constexprs of the shape and the heuristics' values
        args = spec.args(fake_inputs(spec, s), s)
        meta = full_meta(str(folder), spec.TRITON, args, dict(spec.META))
        args = with_descriptors(spec, args, meta)
        _, sp, _ = specialization(fn, binder, args, meta)
        return (runtime_part(sp, fn), sorted((k, v) for k, v in args.items() if k in constexprs),
                sorted((k, v) for k, v in meta.items() if k not in spec.META))

    wanted = key(shape)
    return next((name for name, s in spec.INSTANCES.items() if key(spec.validate_shape(dict(s))) == wanted), None)


# ---- the build (the parent side) --------------------------------------------------------------

def build(variants, build_dir: Path, jobs: int, kernel, root, arch: str, result):
    """{variant name: `result` (compile.BuildResult)} of a Triton plugin's variants, built in
    `build_dir` for `arch` (sm_90: Triton's capability 90), each compiled in a process of its own
    (`jobs` at once; 0: one per CPU) unless its manifest is there already (ablate/build/manifests.py)."""
    capability = int(re.match(r"^sm_(\d+)a?$", arch).group(1))
    return manifests.build(variants, build_dir, arch, result, suffix=SUFFIX, who="Triton",
                           plan=lambda variant: request_of(variant, kernel, capability),
                           digest=lambda request: digest_of(request, kernel),
                           compile_all=lambda todo: _compile(build_dir, todo, Path(root).resolve(),
                                                             jobs or os.cpu_count() or 1))


def request_of(variant, kernel, capability) -> dict:
    """What the compile process needs of a variant, as JSON: the effective meta-parameters and
    each instance's arguments (spec.args of its shape: a tensor as its dims and dtype)."""
    spec = kernel.spec
    meta = effective_meta(spec, variant)
    args = {}
    for name, shape in spec.INSTANCES.items():
        try:
            shape = spec.validate_shape(dict(shape))
        except ValueError as e:
            raise ValueError(f"spec.INSTANCES[{name!r}]: {e}") from None
        args[name] = {k: described(v) for k, v in
                      with_descriptors(spec, spec.args(fake_inputs(spec, shape), shape), meta).items()}
    # a library's function: its package's version and the function's hash are in the digest
    package = triton_target.package(spec.TRITON)
    return {"kernel_dir": str(Path(kernel.dir).resolve()), "function": spec.TRITON, "capability": capability,
            "variant": variant.name, "pathologies": list(variant.pathologies), "meta": meta, "args": args,
            **({"package": package} if package else {})}


def described(value):
    """An argument as JSON: a tensor as {"tensor": dims, "dtype": torch's name}, a host-side
    descriptor as {"descriptor": its tensor's, "block": its block shape}, else the value."""
    if hasattr(value, "block_shape") and hasattr(value, "base"):
        return {"descriptor": described(value.base), "block": list(value.block_shape)}
    if hasattr(value, "data_ptr"):
        return {"tensor": list(value.shape), "dtype": str(value.dtype).removeprefix("torch.")}
    if value is None or isinstance(value, (bool, int, float)):
        return value
    raise ValueError(f"args: {value!r} is neither a tensor, a descriptor nor a number")


def undescribed(value):
    import torch

    if isinstance(value, dict) and "descriptor" in value:
        from triton.tools.tensor_descriptor import TensorDescriptor

        return TensorDescriptor.from_tensor(undescribed(value["descriptor"]), value["block"])
    if isinstance(value, dict):
        return torch.empty(value["tensor"], dtype=getattr(torch, value["dtype"]), device="meta")
    return value


def versions() -> str:
    """Triton's version and the ptxas it runs (TRITON_PTXAS_PATH, where set): in every digest."""
    return f"triton {importlib.metadata.version('triton')} ptxas {os.environ.get('TRITON_PTXAS_PATH', 'bundled')}"


def digest_of(request, kernel) -> str:
    return manifests.digest(request, kernel.dir, versions(), Path(__file__))


def fork_outputs(request: Path) -> tuple[Path, Path, Path]:
    """Where the compile child of `request` writes its stdout, its stderr and its exit status
    (ablate/build/triton_forks.py)."""
    return tuple(request.with_name(f"{request.name}.{ext}") for ext in ("out", "err", "rc"))


def _compile(build_dir: Path, todo: dict, root: Path, jobs: int):
    """Each variant of `todo` ({digest: request}) compiled in a process of its own, `jobs` at
    once, forked by one process that imports torch and Triton once (ablate/build/triton_forks.py);
    on success its manifest and log are moved into place."""
    requests = {}
    for digest, request in todo.items():
        requests[digest] = build_dir / f".{digest}.request.json"
        requests[digest].write_text(json.dumps({**request, "out": str(build_dir), "digest": digest}))
    run = subprocess.run([sys.executable, "-m", "ablate.build.triton_forks", str(jobs),
                          *(str(r) for r in requests.values())], cwd=root, capture_output=True, text=True,
                         check=False)
    for digest, request in todo.items():
        files = fork_outputs(requests[digest])
        try:
            out, err, code = (f.read_text(errors="replace") for f in files)
            returncode = int(code)
        except (OSError, ValueError):  # the forking process ended before this variant's child did
            out, err, returncode = run.stdout, run.stderr, run.returncode or 1
        for f in (requests[digest], *files):
            f.unlink(missing_ok=True)
        log = f"python -m ablate.build.triton_aot ({request['variant']}: meta {request['meta']})\n" + out + err
        manifests.settle(build_dir, digest, SUFFIX, log, returncode, "Triton")


# ---- the compile process ----------------------------------------------------------------------

def compile_variant(request) -> None:
    """Compile every instance of one variant (the request `_compile` writes) into
    <out>/<digest>.triton/<instance>/ and write <out>/<digest>.triton.json last. ptxas's report
    of each goes to stdout, the function's name replaced by the instance's."""
    import triton
    from triton import knobs
    from triton.compiler import ASTSource

    folder = Path(request["kernel_dir"])
    fn = load_function(str(folder), request["function"])
    target, backend, binder = binder_of(fn, request["capability"])
    meta = request["meta"]
    known = set(fn.arg_names) | set(OPTIONS)
    unknown = sorted(k for k in meta if k not in known)
    if unknown:
        raise SystemExit(f"error: meta {unknown} is neither a parameter of {fn.__name__} nor a compile option "
                         f"({', '.join(OPTIONS)})")
    out = Path(request["out"]) / f"{request['digest']}.triton"
    shutil.rmtree(out, ignore_errors=True)
    knobs.nvidia.dump_ptxas_log = True
    instances, configs = {}, []
    for name, described_args in request["args"].items():
        args = {k: undescribed(v) for k, v in described_args.items()}
        meta_here = full_meta(str(folder), request["function"], args, meta)
        bound, spec_list, options = specialization(fn, binder, args, meta_here)
        options, signature, constexprs, attrs = fn._pack_args(backend, dict(meta_here), bound,
                                                              [tuple(s) for s in spec_list], options)
        print(f"ptxas info    : instance {name}", flush=True)
        # ptxas's report is printed by Triton; caught here from fd 1 to rename the function.
        with tempfile.TemporaryFile() as caught:
            saved = os.dup(1)
            os.dup2(caught.fileno(), 1)
            try:
                compiled = triton.compile(ASTSource(fn, signature, constexprs, attrs), target=target,
                                          options=options.__dict__)
            finally:
                sys.stdout.flush()
                os.dup2(saved, 1)
                os.close(saved)
            caught.seek(0)
            report = caught.read().decode(errors="replace")
        report = re.sub(rf"(entry function '|Function properties for ){re.escape(compiled.name)}\b",
                        rf"\g<1>{name}", report)
        print(report, flush=True)
        where = out / name
        where.mkdir(parents=True)
        files = {}
        for ext in ("json", "cubin", "ptx", "ttgir"):
            key = f"{compiled.name}.{ext}"
            path = next(Path(p) for c, p in compiled.metadata_group.items() if c == key)
            shutil.copyfile(path, where / key)
            files[key] = f"{out.name}/{name}/{key}"
        md = compiled.metadata
        threads = md.num_warps * 32 * md.num_ctas
        instances[name] = {"specialization": spec_list, "signature": signature,
                           "constexprs": [[list(k), v] for k, v in constexprs.items()],
                           "hash": compiled.hash, "files": files, "threads": threads, "shared": md.shared,
                           "heuristics": {k: v for k, v in meta_here.items() if k not in meta},
                           "global_scratch_size": md.global_scratch_size}
        configs.append({"name": name, "threads": threads, "smem_bytes": md.shared, "num_warps": md.num_warps,
                        "num_stages": meta_here.get("num_stages", options.num_stages)})
    manifest = {"function": request["function"], "triton": triton.__version__, "capability": request["capability"],
                "meta": meta, "instances": instances,
                "info": {"pathologies": request["pathologies"], "configs": configs}}
    done = Path(request["out"]) / f"{request['digest']}{SUFFIX}"
    tmp = done.with_name(f".{done.name}.{os.getpid()}")
    tmp.write_text(json.dumps(manifest, indent=1))
    os.replace(tmp, done)


# ---- reading a built variant ------------------------------------------------------------------

def manifest(lib) -> dict:
    return json.loads(Path(lib).read_text())


def info(lib) -> dict:
    """The variant info of a Triton library: its pathologies and one config per instance
    ({name, threads, smem_bytes (Triton's dynamic shared memory), num_warps, num_stages}); no
    seams: a pathology changes meta-parameters, which the manifest holds (`meta`)."""
    return manifest(lib)["info"]


def cubins(lib) -> dict[str, Path]:
    """{instance: its cubin}."""
    folder = Path(lib).parent
    return {name: folder / next(f for k, f in inst["files"].items() if k.endswith(".cubin"))
            for name, inst in manifest(lib)["instances"].items()}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m ablate.build.triton_aot REQUEST.json")
    compile_variant(json.loads(Path(sys.argv[1]).read_text()))
