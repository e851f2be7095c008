"""The timing protocol, the one place that times anything on the GPU.

Every candidate (base, variant, each of the kernel's peers) is a callable `launch(i)` that
runs the computation once on input set `i`. Per candidate, a CUDA graph holds enough launches, cycling
through the input sets, that one replay runs at least `bench.min_sample_us` (launch overhead
is then negligible). After a warm-up, each round replays every candidate's graph once, in an
order that is reversed every other round so that position effects (clock ramps, the previous
candidate's cache footprint) fall equally on all. A sample is one replay's time, measured by
its own pair of CUDA events, divided by the launches in it: microseconds per launch.

With `bench.l2 = cold` the input sets together exceed twice the L2 size, and one extra set
makes sure the set a launch reads was evicted since its last use, whatever came before.

A kernel with `inout` tensors (spec.INOUTS) changes its own input, so every launch of every
candidate (base, variant and peers alike) is followed, inside the captured graph, by a
device-to-device copy of its set's inout tensors from a pristine copy taken when the set was
made: each launch reads what the first one read. The copy is timed with the launch, the
same copy for every candidate, so it adds the same time to base and variant (their ratio
moves towards 1 by restore / base time); the restores alone are timed as one more candidate
(RESTORE) so that a job can say what they cost. After the launch rather than before it, so
that in cold mode the restored set is evicted again before its next use.

A job repeats that measurement in independent replicates (`replicates`): fresh input
allocations (the earlier replicates' stay allocated, so the new tensors lie elsewhere in
memory), fresh graph captures, the candidates in a new random order. It stops once the
slowdown's interval over the replicates is within `bench.precision`, or the replicates
reach `bench.max_replicates`, or the timing has taken `bench.budget_s`, at least
`bench.replicates` of them in any case, and says which stopped it.
"""
import math
import time

import numpy as np

# cudaEventElapsedTime's resolution, "around 0.5 microseconds" (CUDA Runtime API): a sample,
# one replay's interval divided by its launches, comes in steps of this over the launches.
EVENT_RESOLUTION_US = 0.5

# A replay longer than this many launches means the kernel is too fast to time sensibly.
MAX_LAUNCHES = 100_000
RESTORE = "inout_restore"  # the candidate that is the inout restores alone


def input_set_count(l2_mode, l2_bytes, bytes_per_set):
    """How many input sets to rotate over: 1 when warm; when cold, enough that all sets but
    the one being read exceed 2x L2."""
    if l2_mode == "warm":
        return 1
    if l2_mode == "cold":
        return math.ceil(2 * l2_bytes / bytes_per_set) + 1
    raise ValueError(f"bench.l2 must be cold or warm, got {l2_mode!r}")


def make_inputs(spec, shape, count, seed, device):
    """`count` independent input sets of the shape, from one seeded generator."""
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    return [spec.make_inputs(shape, gen, device) for _ in range(count)]


def first_line(error):
    text = str(error).strip()
    return text.splitlines()[0] if text else repr(error)


def restorer(spec, sets):
    """restore(i): input set i's inout tensors back to their contents as made (one
    device-to-device copy each, from a pristine copy of each set's taken now); None when the
    kernel has no inout tensor."""
    names = tuple(getattr(spec, "INOUTS", ()))
    if not names:
        return None
    pristine = [{name: s[name].clone() for name in names} for s in sets]

    def restore(i):
        for name in names:
            sets[i][name].copy_(pristine[i][name])
    return restore


def kernel_launcher(kernel, sets, shape, launches=1, restore=None):
    """launch(i): the kernel on input set i; with `launches` = k > 1 (a calibration's doing),
    on sets k*i, k*i + 1, ..., k*i + k - 1 of the rotation: the kernel then walks the sets in
    order as the base's launches do, each finding its set evicted since its last use. Each
    launch is followed by `restore` of its set (restorer) when there is one. A kernel
    launched on a stream of its own (green.OnStream: half_sms) lends the launcher that stream
    (`launch.stream`): its graphs are captured and replayed there."""
    def launch(i):
        for j in range(launches):
            k = (launches * i + j) % len(sets)
            kernel(sets[k], shape)
            if restore is not None:
                restore(k)
    launch.stream = getattr(kernel, "stream", None)
    return launch


def _on(launch):
    """The stream a candidate's graphs are captured and replayed on: its own, else the
    current one."""
    import torch

    return getattr(launch, "stream", None) or torch.cuda.current_stream()


def _replay(graph, stream):
    """One replay on `stream`, ordered after the current stream's work and before its next."""
    import torch

    current = torch.cuda.current_stream()
    if stream.cuda_stream == current.cuda_stream:
        graph.replay()
        return
    stream.wait_stream(current)
    with torch.cuda.stream(stream):
        graph.replay()
    current.wait_stream(stream)


def peer_launchers(spec, sets, shape, names, restore=None):
    """({peer: launch}, {peer: why skipped}) for the kernel's peers (spec.PEERS), each launch
    followed by `restore` of its set as the kernel's are. A peer that cannot run the shape
    (no kernel for it, a failed compile) is skipped, with its error as the reason: peers are
    the yardstick, never a reason for the job to fail."""
    import torch

    launchers, skipped = {}, {}
    for name in names:
        try:
            run = spec.PEERS[name](shape)

            def launch(i, run=run):
                run(sets[i])
                if restore is not None:
                    restore(i)

            launch(0)  # one-time work (a torch.compile) stays out of the timing
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 - "No available kernel", a compiler error...
            skipped[name] = first_line(e)
            continue
        launchers[name] = launch
    return launchers, skipped


def candidates(spec, sets, shape, kernels, peers=()):
    """(candidates, skipped, optional): {name: launch} of `kernels` ({name: (Kernel, launches
    per launch)}) and of the spec's `peers` on the input sets, every launch restoring its
    set's inout tensors, plus RESTORE (the restores alone) when there are any; {peer: why
    skipped}; the names whose failure to capture drops them rather than the measurement."""
    restore = restorer(spec, sets)
    out = {name: kernel_launcher(kernel, sets, shape, launches, restore)
           for name, (kernel, launches) in kernels.items()}
    launchers, skipped = peer_launchers(spec, sets, shape, peers, restore)
    out.update(launchers)
    if restore is not None:
        out[RESTORE] = restore
    return out, skipped, [*launchers, *([RESTORE] if restore else [])]


def _capture(launch, count, n_sets):
    import torch

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=getattr(launch, "stream", None)):
        for i in range(count):
            launch(i % n_sets)
    return graph


def _timed_replay(graph, stream):
    """(start, end) events around one replay, both recorded on the stream it runs on."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    current = torch.cuda.current_stream()
    own = stream.cuda_stream != current.cuda_stream
    if own:
        stream.wait_stream(current)
    with torch.cuda.stream(stream):
        start.record()
        graph.replay()
        end.record()
    if own:
        current.wait_stream(stream)
    return start, end


def _replay_us(graph, reps=3, stream=None):
    """Median time of a few back-to-back replays, after one untimed replay."""
    import torch

    stream = stream or torch.cuda.current_stream()
    _replay(graph, stream)
    times = []
    for _ in range(reps):
        start, end = _timed_replay(graph, stream)
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
        took = _replay_us(graph, stream=_on(launch))
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
    DictConfig): samples, warmup, min_sample_us. A candidate named in `optional` (the
    peers) whose graph cannot be captured is dropped, with its error, instead of
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
    streams = {name: _on(candidates[name]) for name in names}

    def rounds(n):
        for r in range(n):
            yield names if r % 2 == 0 else names[::-1]

    for order in rounds(bench["warmup"]):
        for name in order:
            _replay(graphs[name][0], streams[name])
    events = {name: [] for name in names}
    for order in rounds(bench["samples"]):
        for name in order:
            events[name].append(_timed_replay(graphs[name][0], streams[name]))
    torch.cuda.synchronize()
    times = {name: np.array([s.elapsed_time(e) * 1000.0 / graphs[name][1] for s, e in events[name]])
             for name in names}
    return times, {name: graphs[name][1] for name in names}, dropped


def replicates(take, bench, estimate, clock=time.monotonic):
    """Take replicates until the estimate is precise enough, the replicates run out, or the
    budget is spent, whichever comes first (at least bench.replicates of them).

    take(i) -> replicate i's measurement; estimate(measurements) -> a dict with
    `half_width` (stats.slowdown). Returns (measurements, stop reason: "precision",
    "max_replicates" or "budget", seconds taken)."""
    start = clock()
    taken = []
    while True:
        taken.append(take(len(taken)))
        if len(taken) < bench["replicates"]:
            continue
        if estimate(taken)["half_width"] <= bench["precision"]:
            reason = "precision"
        elif len(taken) >= bench["max_replicates"]:
            reason = "max_replicates"
        elif clock() - start >= bench["budget_s"]:
            reason = "budget"
        else:
            continue
        return taken, reason, clock() - start
