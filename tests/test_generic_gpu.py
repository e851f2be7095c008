"""half_sms on a GPU: a kernel launched through ablate's green-context stream runs on the SMs
of that context only, eagerly and from a graph captured and replayed there as the timing
does (ablate/gpu/green.py, ablate/gpu/timing.py). The proof is the launch's own SM ids: a
probe kernel writes %smid per block. Skips without a GPU or without green contexts."""
import ctypes
import shutil
import subprocess

import pytest

from ablate.gpu import green

pytestmark = pytest.mark.gpu

PROBE = r"""
#include <cuda_runtime.h>
__global__ void probe(int* smids) {
  unsigned smid;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
  if (threadIdx.x == 0) smids[blockIdx.x] = (int)smid;
  // long enough that blocks spread over every SM the launch may use
  for (volatile int i = 0; i < 20000; ++i) {}
}
extern "C" int run_probe(int* smids, int blocks, cudaStream_t stream) {
  probe<<<blocks, 128, 0, stream>>>(smids);
  return (int)cudaGetLastError();
}
"""


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    if why := green.unsupported():
        pytest.skip(why)
    if shutil.which("nvcc") is None:
        pytest.skip("no nvcc")
    folder = tmp_path_factory.mktemp("probe")
    (folder / "probe.cu").write_text(PROBE)
    major, minor = torch.cuda.get_device_capability()
    subprocess.run(["nvcc", "-O2", "-shared", "-Xcompiler", "-fPIC", f"-arch=sm_{major}{minor}",
                    str(folder / "probe.cu"), "-o", str(folder / "probe.so")], check=True)
    lib = ctypes.CDLL(str(folder / "probe.so"))
    lib.run_probe.argtypes, lib.run_probe.restype = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p], ctypes.c_int
    return torch, lib


class Probe:
    """A kernel as ablate.build.library.Kernel is called: (tensors, shape) on the current stream."""

    def __init__(self, torch, lib):
        self.torch, self.lib = torch, lib

    def __call__(self, tensors, shape):
        smids = tensors["smids"]
        stream = self.torch.cuda.current_stream().cuda_stream
        assert self.lib.run_probe(smids.data_ptr(), smids.numel(), stream) == 0


def test_half_sms_runs_on_half_the_sms(probe):
    torch, lib = probe
    device = torch.cuda.current_device()
    total = torch.cuda.get_device_properties(device).multi_processor_count
    blocks = 8 * total
    smids = torch.full((blocks,), -1, dtype=torch.int32, device="cuda")
    Probe(torch, lib)({"smids": smids}, {})
    torch.cuda.synchronize()
    assert len(set(smids.tolist())) == total  # the probe reaches every SM of the whole GPU

    kernel, sms = green.on_green_stream(Probe(torch, lib), device, 0.5)
    assert sms["sm_total"] == total and 0 < sms["sm_count"] <= total // 2
    smids.fill_(-1)
    kernel({"smids": smids}, {})  # eager, ordered with the current stream
    torch.cuda.synchronize()
    eager = set(smids.tolist())
    assert -1 not in eager and len(eager) <= sms["sm_count"], (len(eager), sms)

    from ablate.gpu import timing

    launch = timing.kernel_launcher(kernel, [{"smids": smids}], {})
    assert launch.stream is kernel.stream
    smids.fill_(-1)
    graph = timing._capture(launch, 1, 1)  # captured on the green stream, as measure does
    timing._replay(graph, launch.stream)
    torch.cuda.synchronize()
    replayed = set(smids.tolist())
    assert -1 not in replayed and len(replayed) <= sms["sm_count"], (len(replayed), sms)
    print(f"half_sms: {len(eager)} SMs eager, {len(replayed)} from a graph, of {total}; green context {sms}")
