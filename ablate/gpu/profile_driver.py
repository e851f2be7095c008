"""The process Nsight Compute profiles: one launch of the base and one of the variant.

    ncu --profile-from-start off ... python -m ablate.gpu.profile_driver SPEC.json

The GPU child of a sweep (ablate/gpu/child.py) holds its own CUDA context for the whole sweep,
so the counters are read in a process of their own, started under ncu by ablate/gpu/profile.py.
SPEC.json: {"kernel_dir", "base_so", "variant_so", "shape", "seed", "launches"}; or, in place
of the two libraries, "sides": [{"name", "so"} or {"name", "peer"}, ...], each a library or one
of the spec's PEERS, run in that order (tools/gemm_candidates.py --counters: each candidate
configuration and cuBLAS).

For each of base and variant (or each side), in that order: the kernel's inputs are made as
the timing's first replicate makes its first input set (the spec's make_inputs, seed + 1), the
kernel (or peer) runs once untimed (module loading, lazy initialization), then once more between
cudaProfilerStart and cudaProfilerStop, on a CUDA stream of its own: ncu profiles only
what runs in that range, and the stream tells the base's launches from the variant's in its
report (profile.py groups the rows by stream, in launch order). The variant runs
`launches` times there (a calibration's 2); a variant with `sm_fraction` (half_sms) runs on
its green context's stream (ablate/gpu/green.py). A kernel with inout tensors gets, for each
launch, its own copy of them as made (taken before the range): no launch reads another's
output. Nothing is written to stdout but ncu's report.
"""
import json
import sys


def main(argv):
    if len(argv) != 1:
        sys.exit("usage: python -m ablate.gpu.profile_driver SPEC.json")
    spec = json.loads(open(argv[0]).read())
    sys.stdout = sys.stderr  # stdout carries ncu's CSV only

    import torch

    from ablate.build.library import load
    from ablate.gpu import timing
    from ablate.gpu.check import originals
    from ablate.job.job import from_wire

    plugin, spec = from_wire(spec)
    kspec = plugin.spec
    shape, device = spec["shape"], torch.device("cuda", torch.cuda.current_device())
    for side in sides_of(spec):
        launches = int(side.get("launches", 1))
        kernel = load(side["so"], kspec) if "so" in side else peer_kernel(kspec, side["peer"], shape)
        inputs = timing.make_inputs(kspec, shape, 1, spec["seed"] + 1, device)[0]
        # One set per launch, its inout tensors fresh copies made before the profiled range:
        # every launch reads the contents as made, and no copy runs between the launches.
        runs = [{**inputs, **originals(kspec, inputs)} for _ in range(1 + launches)]
        stream = torch.cuda.Stream(device)
        if side.get("sm_fraction"):  # half_sms: its green context's stream
            from ablate.gpu import green

            handle, _, _ = green.stream(device.index, float(side["sm_fraction"]))
            stream = torch.cuda.ExternalStream(handle, device=device)
        with torch.cuda.stream(stream):
            kernel(runs[0], shape)  # untimed: first-launch costs stay out of the counters
            stream.synchronize()
            torch.cuda.profiler.start()
            for run in runs[1:]:
                kernel(run, shape)
            stream.synchronize()
            torch.cuda.profiler.stop()
        del inputs, runs
    return 0


def peer_kernel(kspec, name, shape):
    """The spec's peer `name` at `shape`, called as a loaded kernel is: (inputs, shape)."""
    run = kspec.PEERS[name](shape)
    return lambda inputs, _shape: run(inputs)


def sides_of(spec) -> list[dict]:
    """What the driver launches, in order: the wire's "sides", else a job's base (once) and its
    variant (`launches` times, on its green context's share of the SMs where it has one)."""
    if "sides" in spec:
        return spec["sides"]
    return [{"name": "base", "so": spec["base_so"]},
            {"name": "variant", "so": spec["variant_so"], "launches": int(spec.get("launches", 1)),
             "sm_fraction": spec.get("sm_fraction")}]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
