"""What a job's composed config means, checked before anything is built: the kernel's
plugin, the shape as the kernel's spec validates it, the variant, the peers to time.
Bad input is a ValueError whose message names the problem (the app prints it as
`ablate: ...`)."""
from omegaconf import OmegaConf

MODES = ("gpu", "static")


def checked(cfg):
    """(plugin, shape dict, Variant, peer names) of a composed config."""
    from ablate.job import plugins
    from ablate.gpu.timing import peer_names, validate_bench
    from ablate.job.variant import variant_from_cfg

    if cfg.mode not in MODES:
        raise ValueError(f"mode must be one of {list(MODES)}, got {cfg.mode!r}")
    plugin = plugins.of(cfg)
    shape = shape_of(plugin, cfg.shape)
    validate_bench(cfg.bench)
    peers = peer_names(cfg.bench, plugin.spec, plugin.name)
    variant = variant_from_cfg(cfg.pathology, plugin.dir)
    check_counters(cfg, plugin, shape, variant)
    return plugin, shape, variant, peers


def check_counters(cfg, plugin, shape, variant):
    """The profile settings, the kernel's default ncu metrics and the shape fields that
    counter rules name (the rules themselves are checked with the variant)."""
    from ablate.job import counters
    from ablate.gpu import profile

    profile.validate(cfg.bench)
    profile.metric_set(OmegaConf.select(cfg, "kernel.counters", default=None), {})
    for name in variant.pathologies:
        counters.check_when(variant.specs[name].get("counters"), list(shape), f"pathology '{name}'")


def shape_of(plugin, shape_cfg):
    """The shape as the kernel's spec validates it; ValueError with the spec's message."""
    try:
        return plugin.spec.validate_shape(OmegaConf.to_container(shape_cfg, resolve=True))
    except ValueError as e:
        raise ValueError(f"shape: {e}") from None
