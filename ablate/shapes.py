"""Validation of a shape config (conf/shape/*.yaml) before anything is built or launched."""

# The kernel takes B, H, S, D as C ints.
_INT_MAX = 2**31 - 1


def validate_shape(shape, head_dims):
    """Return the shape as a plain dict {batch, heads, seq, head_dim, causal}, or raise
    ValueError naming what is wrong. `head_dims` are the head dims compiled into the kernel."""
    keys = ("batch", "heads", "seq", "head_dim", "causal")
    missing = [k for k in keys if k not in shape]
    if missing:
        raise ValueError(f"shape: missing {', '.join(missing)} (a shape needs {', '.join(keys)})")
    out = {k: shape[k] for k in keys}
    for key in ("batch", "heads", "seq", "head_dim"):
        value = out[key]
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"shape: {key} must be an integer, got {value!r}")
        if not 1 <= value <= _INT_MAX:
            raise ValueError(f"shape: {key} must be >= 1 (and fit a C int), got {value}")
    built = list(head_dims)
    if out["head_dim"] not in built:
        raise ValueError(f"shape: head_dim={out['head_dim']} is not built; kernel.head_dims is {built}")
    if not isinstance(out["causal"], bool):
        raise ValueError(f"shape: causal must be true or false, got {out['causal']!r}")
    return out


def flops(shape):
    """Floating-point operations of one forward pass: 2 matmuls of 2*S*S*D per head, half of
    the score matrix skipped when causal."""
    f = 4 * shape["batch"] * shape["heads"] * shape["seq"] ** 2 * shape["head_dim"]
    return f / 2 if shape["causal"] else f


def bytes_moved(shape):
    """Global-memory bytes of one forward pass at best: q, k, v read once and o written once (FP16)."""
    return 4 * shape["batch"] * shape["heads"] * shape["seq"] * shape["head_dim"] * 2
