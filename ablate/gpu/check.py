"""Correctness gate: a kernel's outputs against its spec's reference on fresh random inputs.

The inputs come from the spec (seeded), every `out` tensor is poisoned with NaN before the
launch (an element the kernel fails to write shows up), and the error is the spec's (by
default ||o - ref|| / ||ref|| in float32 or better), held against the tolerance.

An `inout` tensor (spec.INOUTS: C of D = alpha A B + beta C, a residual, a cache) is input
as much as output: it keeps the contents make_inputs gave it, a copy of them is taken before
the launch, and the reference runs on that copy, never on what the kernel left there.
"""


def relative_error(out, ref):
    """||o - ref|| / ||ref|| over the whole tensor, in the reference's precision."""
    import torch

    return float(torch.linalg.vector_norm(out.to(ref.dtype) - ref) / torch.linalg.vector_norm(ref))


def inouts(spec):
    """The names of the tensors the kernel reads and writes (none for a full-form spec that
    does not say)."""
    return tuple(getattr(spec, "INOUTS", ()))


def poisoned_inputs(spec, shape, seed, device):
    """One seeded set of the spec's inputs, its `out` tensors filled with NaN (its inout
    tensors keep their contents: the kernel reads them)."""
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    tensors = spec.make_inputs(shape, gen, device)
    for name in spec.OUTPUTS:
        if name not in inouts(spec):
            tensors[name].fill_(float("nan"))
    return tensors


def originals(spec, tensors):
    """{inout name: a copy of its contents}: what the reference reads, taken before a launch."""
    return {name: tensors[name].clone() for name in inouts(spec)}


def compare(spec, tensors, shape, tolerance, before=None):
    """The outputs in `tensors` against the reference: {"ok", "rel_err", "nan", "error"}, the
    error being the largest over the outputs. `before`: the inout tensors' contents before
    the launch (`originals`), which the reference reads in their place."""
    import torch

    error_of = getattr(spec, "error", relative_error)
    missing = [name for name in inouts(spec) if name not in (before or {})]
    if missing:
        raise ValueError(f"inout tensors {missing} need their contents from before the launch (originals())")
    ref = spec.reference({**tensors, **{n: t.clone() for n, t in (before or {}).items()}}, shape)
    nan = sum(int(torch.isnan(tensors[name]).sum()) for name in spec.OUTPUTS)
    total = sum(tensors[name].numel() for name in spec.OUTPUTS)
    rel_err = max(error_of(tensors[name], ref[name]) for name in spec.OUTPUTS)
    if nan:
        error = f"{nan} of {total} outputs are NaN (unwritten or non-finite)"
    elif not rel_err <= tolerance:
        error = f"rel_err {rel_err:.3g} exceeds tolerance {tolerance:g}"
    else:
        error = None
    return {"ok": error is None, "rel_err": rel_err, "nan": nan, "error": error}


def check(kernel, shape, tolerance=None, seed=0, device="cuda"):
    """Run `kernel` (an ablate.build.library.Kernel bound to its spec) once on fresh inputs and
    compare. `tolerance` None: the spec's for this shape."""
    import torch

    spec = kernel.spec
    tensors = poisoned_inputs(spec, shape, seed, device)
    before = originals(spec, tensors)
    kernel(tensors, shape)
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
    return compare(spec, tensors, shape, spec.tolerance(shape) if tolerance is None else tolerance, before)
