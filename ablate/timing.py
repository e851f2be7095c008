"""The timing protocol, the one place that times anything on the GPU.

Every candidate (base, variant, each SDPA backend) is a callable `launch(i)` that runs the
attention once on input set `i`. Per candidate, a CUDA graph holds enough launches, cycling
through the input sets, that one replay runs at least `bench.min_sample_us` (launch overhead
is then negligible). After a warm-up, each round replays every candidate's graph once, in an
order that is reversed every other round so that position effects (clock ramps, the previous
candidate's cache footprint) fall equally on all. A sample is one replay's time, measured by
its own pair of CUDA events, divided by the launches in it: microseconds per launch.

With `bench.l2 = cold` the input sets together exceed twice the L2 size, and one extra set
makes sure the set a launch reads was evicted since its last use, whatever came before.
"""
import math

import numpy as np

# bench.sdpa_backends name -> torch.nn.attention.SDPBackend member.
SDPA_BACKENDS = {
    "flash": "FLASH_ATTENTION",
    "cudnn": "CUDNN_ATTENTION",
    "efficient": "EFFICIENT_ATTENTION",
    "math": "MATH",
}
# A replay longer than this many launches means the kernel is too fast to time sensibly.
MAX_LAUNCHES = 100_000


def validate_bench(bench):
    """Raise ValueError naming the first bad bench setting (run before anything is built)."""
    if bench["l2"] not in ("cold", "warm"):
        raise ValueError(f"bench.l2 must be cold or warm, got {bench['l2']!r}")
    for key, least, kinds in (("samples", 2, int), ("warmup", 0, int), ("bootstrap", 100, int),
                              ("seed", 0, int), ("min_sample_us", 1, (int, float)),
                              ("timeout_s", 1, (int, float))):
        value = bench[key]
        if isinstance(value, bool) or not isinstance(value, kinds) or value < least:
            raise ValueError(f"bench.{key} must be a number >= {least}, got {value!r}")
    for key in ("tolerance", "min_effect"):
        value = bench[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
            raise ValueError(f"bench.{key} must be a number in [0, 1), got {value!r}")
    unknown = [b for b in bench["sdpa_backends"] if b not in SDPA_BACKENDS]
    if unknown:
        raise ValueError(f"bench.sdpa_backends: unknown {unknown}; choose from {list(SDPA_BACKENDS)}")


def input_set_count(l2_mode, l2_bytes, bytes_per_set):
    """How many (q, k, v, o) sets to rotate over: 1 when warm; when cold, enough that all
    sets but the one being read exceed 2x L2."""
    if l2_mode == "warm":
        return 1
    if l2_mode == "cold":
        return math.ceil(2 * l2_bytes / bytes_per_set) + 1
    raise ValueError(f"bench.l2 must be cold or warm, got {l2_mode!r}")


def make_inputs(shape, count, seed, device):
    """`count` independent (q, k, v, o) FP16 sets of the shape."""
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    dims = (shape["batch"], shape["heads"], shape["seq"], shape["head_dim"])
    return [tuple(torch.randn(dims, generator=gen, device=device, dtype=torch.float16) for _ in range(4))
            for _ in range(count)]


def first_line(error):
    text = str(error).strip()
    return text.splitlines()[0] if text else repr(error)


def kernel_launcher(kernel, sets, causal):
    def launch(i):
        q, k, v, o = sets[i]
        kernel.forward(q, k, v, o, causal)
    return launch


def sdpa_launchers(sets, causal, backends):
    """({backend: launch}, {backend: why skipped}) for PyTorch SDPA pinned to each backend.
    A backend that cannot run the shape is skipped, with its error as the reason."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    launchers, skipped = {}, {}
    for name in backends:
        backend = getattr(SDPBackend, SDPA_BACKENDS[name])

        def launch(i, backend=backend):
            q, k, v, _ = sets[i]
            with sdpa_kernel(backend):
                F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        try:
            launch(0)
            torch.cuda.synchronize()
        except RuntimeError as e:  # "No available kernel" and friends
            skipped[name] = first_line(e)
            continue
        launchers[name] = launch
    return launchers, skipped


def _capture(launch, count, n_sets):
    import torch

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(count):
            launch(i % n_sets)
    return graph


def _replay_us(graph, reps=3):
    """Median time of a few back-to-back replays, after one untimed replay."""
    import torch

    graph.replay()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0)
    return float(np.median(times))


def calibrated_graph(launch, n_sets, min_sample_us):
    """(graph, launches): a graph of enough launches that one replay takes >= min_sample_us."""
    import torch

    for i in range(n_sets):  # eager first: one-time setup stays out of the capture
        launch(i)
    torch.cuda.synchronize()
    count = n_sets
    while True:
        graph = _capture(launch, count, n_sets)
        took = _replay_us(graph)
        if took >= min_sample_us:
            return graph, count
        if count >= MAX_LAUNCHES:
            raise RuntimeError(f"{count} launches take only {took:.1f} us, below "
                               f"bench.min_sample_us={min_sample_us}")
        # Aim 20% above the target so launch-to-launch noise does not fall short again.
        count = min(MAX_LAUNCHES, max(2 * count, math.ceil(count * 1.2 * min_sample_us / took)))
        del graph


def measure(candidates, n_sets, bench, optional=()):
    """Time every candidate under the protocol above.

    candidates: {name: launch}. bench: the bench config, read by key (a dict or a
    DictConfig): samples, warmup, min_sample_us. A candidate named in `optional` (the SDPA
    references) whose graph cannot be captured is dropped, with its error, instead of
    failing the measurement.
    Returns ({name: samples in us per launch, a numpy array}, {name: launches per sample},
    {dropped name: why}).
    """
    import torch

    graphs, dropped = {}, {}
    for name, launch in candidates.items():
        try:
            graphs[name] = calibrated_graph(launch, n_sets, bench["min_sample_us"])
        except RuntimeError as e:
            if name not in optional:
                raise
            dropped[name] = f"graph capture failed: {first_line(e)}"
            torch.cuda.synchronize()
    names = list(graphs)

    def rounds(n):
        for r in range(n):
            yield names if r % 2 == 0 else names[::-1]

    for order in rounds(bench["warmup"]):
        for name in order:
            graphs[name][0].replay()
    events = {name: [] for name in names}
    for order in rounds(bench["samples"]):
        for name in order:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graphs[name][0].replay()
            end.record()
            events[name].append((start, end))
    torch.cuda.synchronize()
    times = {name: np.array([s.elapsed_time(e) * 1000.0 / graphs[name][1] for s, e in events[name]])
             for name in names}
    return times, {name: graphs[name][1] for name in names}, dropped
