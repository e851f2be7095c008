"""Llama-shaped workloads with random weights from a transformers config (nothing downloaded;
the optional extra `[insitu]` brings transformers):

    insitu.workload=ablate.workloads.llama:train     forward, backward and AdamW's step
    insitu.workload=ablate.workloads.llama:prefill   the forward pass over whole prompts, the
                                                     last position's logits (as serving does)

The model is Llama-2-7B's layer (hidden 4096, FFN 11008, 32 heads of 128, multi-head: as many
key/value heads as query heads), `layers` of them, in BF16, batch x seq random tokens.
Options (insitu.options): layers, batch, seq, dtype, seed; `liger` (train's default true):
Liger-Kernel's RMSNorm in place of the model's (apply_liger_kernel_to_llama, RMSNorm only), so
that a liger_rmsnorm job's variant runs in the model; `attention` (prefill): `sdpa`, the
model's own, or the name of an attention plugin (attention_hopper): the model's attention is
then torch.ops.ablate.<plugin> (ablate/gpu/swap.py), registered through transformers' own
AttentionInterface, and `reference` is the same step with SDPA, so that the job checks the
kernel inside the model against it.
"""
import json

LLAMA2_7B = {"hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32, "num_key_value_heads": 32,
             "vocab_size": 32000, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6}
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def _transformers():
    try:
        import transformers
    except ImportError:
        raise RuntimeError("ablate.workloads.llama needs transformers: pip install -e '.[insitu]'") from None
    return transformers


def _model(device, layers, dtype, seed, liger, attention="sdpa", **dims):
    import torch

    transformers = _transformers()
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {list(DTYPES)}, got {dtype!r}")
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(**{**LLAMA2_7B, **dims}, num_hidden_layers=int(layers))
    config._attn_implementation = attention
    with torch.device(device):
        model = transformers.LlamaForCausalLM(config).to(getattr(torch, DTYPES[dtype]))
    if liger:
        from liger_kernel.transformers import apply_liger_kernel_to_llama

        apply_liger_kernel_to_llama(rope=False, swiglu=False, cross_entropy=False, fused_linear_cross_entropy=False,
                                    rms_norm=True, model=model)
    return model


def _tokens(model, batch, seq, seed, device):
    import torch

    gen = torch.Generator(device=device).manual_seed(seed + 1)
    return torch.randint(0, model.config.vocab_size, (int(batch), int(seq)), generator=gen, device=device)


def train(device="cuda", layers=2, batch=4, seq=2048, dtype="bf16", seed=0, liger=True, **dims):
    """One training step: the loss of next-token prediction on random tokens, its backward,
    AdamW's step (lr 1e-5). `reset` puts the weights back and clears AdamW's state."""
    import torch

    model = _model(device, layers, dtype, seed, liger, **dims).train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-5, foreach=True)
    ids = _tokens(model, batch, seq, seed, device)
    snapshot = [p.detach().clone() for p in params]

    def step():
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    def reset():
        with torch.no_grad():
            for p, saved in zip(params, snapshot):
                p.copy_(saved)
        opt.state.clear()

    return {"step": step, "reset": reset, "graphs": False}


def _plugin_attention(op):
    """transformers' attention function computing by torch.ops.ablate.<op>: causal, the
    model's (B, H, S, D) query, key and value, contiguous; returns (B, S, H, D), as SDPA's."""
    def attend(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        import torch

        if query.dtype not in (torch.float16, torch.bfloat16):
            raise ValueError(f"attention {op}: the kernel takes FP16 or BF16, the model is {query.dtype} "
                             "(insitu.options.dtype)")
        q, k, v = (t.contiguous() for t in (query, key, value))
        o = torch.empty_like(q)
        batch, heads, seq, head_dim = q.shape
        if scaling is not None and abs(scaling - head_dim ** -0.5) > 1e-6:
            raise ValueError(f"attention {op}: the kernel scales by 1/sqrt(head_dim), the model by {scaling}")
        shape = {"batch": batch, "heads": heads, "seq": seq, "head_dim": head_dim, "causal": True,
                 "dtype": "bf16" if q.dtype == torch.bfloat16 else "fp16"}
        getattr(torch.ops.ablate, op)(q, k, v, o, json.dumps(shape))
        return o.transpose(1, 2), None
    return attend


def prefill(device="cuda", layers=2, batch=4, seq=2048, dtype="bf16", seed=0, liger=False, attention="sdpa", **dims):
    """The forward pass over `batch` prompts of `seq` tokens, no cache, the last position's
    logits (logits_to_keep=1); captured in a CUDA graph when timed."""
    import torch

    transformers = _transformers()
    name = attention
    if attention != "sdpa":  # an ablate plugin's op as the model's attention
        name = f"ablate_{attention}"
        transformers.AttentionInterface.register(name, _plugin_attention(attention))
    model = _model(device, layers, dtype, seed, liger, attention=name, **dims).eval()
    ids = _tokens(model, batch, seq, seed, device)

    @torch.no_grad()
    def step():
        return model(input_ids=ids, use_cache=False, logits_to_keep=1).logits

    def reference():
        model.config._attn_implementation = "sdpa"
        try:
            return step()
        finally:
            model.config._attn_implementation = name

    return {"step": step, "graphs": True, "reference": reference if attention != "sdpa" else None}
