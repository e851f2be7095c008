"""Correctness gate: a kernel's output against a float32 reference on fresh random inputs."""
import math


def reference(q, k, v, causal, scale):
    """float32 attention, computed on q's device a few heads at a time (the S x S scores of
    all heads at once would not fit for long sequences)."""
    import torch

    B, H, S, D = q.shape
    q32, k32, v32 = (t.float().reshape(B * H, S, D) for t in (q, k, v))
    out = torch.empty_like(q32)
    mask = torch.triu(torch.ones(S, S, dtype=torch.bool, device=q.device), diagonal=1) if causal else None
    step = max(1, (1 << 28) // (S * S))  # ~1 GiB of float32 scores per chunk
    precision = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")  # a TF32 reference would not be float32
    try:
        for i in range(0, B * H, step):
            scores = q32[i:i + step] @ k32[i:i + step].transpose(1, 2) * scale
            if mask is not None:
                scores.masked_fill_(mask, float("-inf"))
            out[i:i + step] = torch.softmax(scores, dim=-1) @ v32[i:i + step]
    finally:
        torch.set_float32_matmul_precision(precision)
    return out.reshape(B, H, S, D)


def check(kernel, shape, tolerance, seed=0, device="cuda"):
    """Run `kernel` once on fresh inputs with a NaN-poisoned output and compare it with the
    float32 reference. Returns {"ok", "rel_err", "nan", "error"}."""
    import torch

    B, H, S, D = shape["batch"], shape["heads"], shape["seq"], shape["head_dim"]
    scale = 1.0 / math.sqrt(D)
    gen = torch.Generator(device=device).manual_seed(seed)
    q, k, v = (torch.randn(B, H, S, D, generator=gen, device=device, dtype=torch.float16) for _ in range(3))
    # Poisoned: any element the kernel fails to write shows up as NaN.
    o = torch.full_like(q, float("nan"))
    kernel.forward(q, k, v, o, shape["causal"], scale)
    torch.cuda.synchronize(device)
    ref = reference(q, k, v, shape["causal"], scale)
    nan = int(torch.isnan(o).sum())
    rel_err = float(torch.linalg.vector_norm(o.float() - ref) / torch.linalg.vector_norm(ref))
    if nan:
        error = f"{nan} of {o.numel()} outputs are NaN (unwritten or non-finite)"
    elif not rel_err <= tolerance:
        error = f"rel_err {rel_err:.3g} exceeds tolerance {tolerance:g}"
    else:
        error = None
    return {"ok": error is None, "rel_err": rel_err, "nan": nan, "error": error}
