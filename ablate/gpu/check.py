"""Correctness gate: a kernel's outputs against its spec's reference on fresh random inputs.

The inputs come from the spec (seeded), every output is poisoned with NaN before the launch
(an element the kernel fails to write shows up), and the error is the spec's (by default
||o - ref|| / ||ref|| in float32 or better), held against the tolerance.
"""


def relative_error(out, ref):
    """||o - ref|| / ||ref|| over the whole tensor, in the reference's precision."""
    import torch

    return float(torch.linalg.vector_norm(out.to(ref.dtype) - ref) / torch.linalg.vector_norm(ref))


def poisoned_inputs(spec, shape, seed, device):
    """One seeded set of the spec's inputs, its outputs filled with NaN."""
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    tensors = spec.make_inputs(shape, gen, device)
    for name in spec.OUTPUTS:
        tensors[name].fill_(float("nan"))
    return tensors


def compare(spec, tensors, shape, tolerance):
    """The outputs in `tensors` against the reference: {"ok", "rel_err", "nan", "error"}, the
    error being the largest over the outputs."""
    import torch

    error_of = getattr(spec, "error", relative_error)
    ref = spec.reference(tensors, shape)
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
    kernel(tensors, shape)
    torch.cuda.synchronize(device)
    return compare(spec, tensors, shape, spec.tolerance(shape) if tolerance is None else tolerance)
