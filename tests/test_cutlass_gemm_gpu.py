"""The CUTLASS GEMM plugin's correctness on a GPU (an sm_90 one: the kernel is sm_90a code):
the base and every pathology of its own against the spec's reference, outputs poisoned with
NaN before every launch, both dtypes, m, n, k off every tile size (odd m; n and k multiples
of 8, as TMA requires), every configuration of the table (base/choice.def, spec.configurations:
each case says which it runs); launches on a side
stream and in a CUDA graph; and the refusals: n or k not a multiple of 8, by the shape's validation (naming the field) and by
the ABI (cudaErrorInvalidValue, nothing written)."""
import zlib

import pytest

torch = pytest.importorskip("torch")

from ablate.job import plugins  # noqa: E402
from ablate.gpu.check import compare, poisoned_inputs  # noqa: E402
from ablate.build.library import KernelError  # noqa: E402

from conftest import loaded_pathologies  # noqa: E402
GEMM = plugins.load("cutlass_gemm")
SPEC = GEMM.spec
# Its own pathologies (the generic ones are tested for every kernel in test_generic_gpu).
PATHOLOGIES = ["none"] + sorted(p for p in GEMM.options("pathology")
                                if (GEMM.dir / "conf" / "pathology" / f"{p}.yaml").exists())
# (m, n, k), by the configuration the table runs them on (SPEC.choice; test below).
CASES = [(1, 8, 8), (16, 4096, 4096), (5, 1000, 1000), (24, 14336, 1032),  # swap_n32_4x1 (m <= 24 but at 46-55%)
         (100, 1000, 72), (128, 1024, 328), (65, 520, 2056),  # swap_n32_4x1 (m 65-128, n <= 1024: 2-4 column tiles)
         (9, 8200, 1032), (16, 8192, 1000), (21, 9296, 2056),  # skinny_n128 (m <= 16 at 46-55%; m 17-24 past n = 9000)
         (21, 8200, 2056),  # skinny (m 17-24 at 46-55%, n <= 9000)
         (128, 4104, 1000), (254, 2056, 320),  # skinny (m = 128 up to 25%, rows off lines; m 225-256 up to 25%, rows on lines)
         (384, 1024, 4096), (257, 1000, 320),  # skinny (m 257-448, n <= 1024, rows on lines)
         # the swapped ones (d^T = b a^T: m along the tile's N, one or more tiles of it; the 4x1
         # and 4x2 clusters' grids padded where n / 64 is not a multiple of 4):
         (37, 200, 1032), (64, 4096, 4096), (100, 2040, 1000), (128, 1032, 8),  # swap_n64 (m 25-64; m 65-128 to n = 2048)
         (150, 1000, 1000), (245, 1000, 320), (200, 1000, 2048),  # swap_n64 (m 129-256, n <= 1024: 3-4 column tiles)
         (83, 2072, 328), (72, 3000, 1000), (128, 3072, 4104), (65, 2056, 8), (128, 3208, 4104), (96, 3584, 2760),  # swap_n64_4x2 (m 65-128, n 2049-3584)
         (96, 4096, 4096), (77, 3720, 320), (65, 4000, 64),  # swap_n48_1x2 (m 65-96, n 3585-4096, rows on lines)
         (128, 4096, 4096), (113, 4040, 320), (97, 3600, 2048),  # swap_n64_1x2 (m 97-128, n 3585-4096, rows on lines)
         (72, 4000, 1000), (96, 4104, 2048), (181, 4112, 1000),  # swap_n96 (m 65-96; m 161-192, rows off lines)
         (146, 1880, 1216), (161, 3000, 2048), (133, 1352, 1032),  # swap_n96 (m 129-192, n 1025-3072)
         (127, 4000, 72), (100, 8200, 1000), (200, 2200, 328), (213, 10120, 1000), (204, 4728, 3000),
         (219, 9000, 2048), (200, 2040, 2048), (240, 3072, 2048),  # swap_n128 (m 97-127 but at 46-55% on lines; m 193-256 rows off lines or n <= 3072; on lines past half a wave to m = 224)
         (129, 3080, 8), (160, 7680, 1000), (133, 4104, 1032), (136, 16384, 328),  # swap_n160 (m 129-160 to n = 7680, past 15360)
         (137, 8712, 1000), (144, 14336, 320), (129, 15360, 72),  # swap128_n144 (m 129-144, n 7681-15360: tiles 128 rows tall)
         (150, 8000, 1000), (150, 8192, 2048), (160, 14336, 4096), (153, 7752, 328),  # swap128_n160 (m 145-160 there)
         # the same tall tile past the 64-row tiles' one wave: m 25-64 at n 7681-15360, m 97-128 past half a
         # wave (n > 8448) to 15360 with rows on lines
         (33, 7688, 1000), (64, 15360, 328), (50, 10000, 2056), (25, 12296, 72),  # swap128_n64
         (97, 8584, 320), (127, 15352, 1024), (128, 14336, 64), (113, 11000, 2048), (100, 11000, 1024),  # swap128_n128
         (128, 9000, 1000), (100, 8200, 1024), (72, 8192, 4096), (128, 6144, 2048),  # n128_2x1 (rows on lines: m 65-127 at 46-50%; m = 128 to 50%, and past it where rows are off lines)
         (170, 8192, 2048), (200, 4104, 320), (256, 4096, 576),  # skinny_n128 (rows on lines: m 161-192; m 193-256 up to half a wave)
         (512, 1000, 1088), (800, 1000, 1088),  # skinny_n128 (m 449-512 and past 768, n <= 1024, rows on lines)
         (331, 1000, 1000), (448, 640, 2056),  # skinny_n128 (m 257-448, n <= 1024, rows off lines)
         (448, 2048, 2048), (400, 1032, 4096),  # skinny_n128 (m 257-448, n 1025-2048, rows on lines)
         (331, 1416, 1000), (300, 2048, 1000), (448, 2040, 328),  # swap_n128 (m 257-448, n 1025-2048, rows off lines)
         # m 449-768 up to half a wave: skinny on lines where its 64x64 tiles make one wave (n <= 872,
         # fewer as m grows), the last tile of m and of n partly outside
         (745, 584, 1984), (684, 568, 3968), (576, 872, 1024), (640, 832, 2048),  # skinny
         # beyond it the narrowest swapped tile (96, 128, 160 columns of m) whose clusters of four fit
         # one wave; m tiled by 5-8 of them, the last one partly outside m
         (613, 1000, 1032), (600, 640, 2056), (456, 1280, 2048), (768, 768, 2048),  # swap_n96
         (600, 1504, 2048), (736, 1280, 1024), (640, 1024, 2048), (497, 1728, 1000),  # swap_n128 (and m 577-672, n <= 1024 on lines)
         (705, 1288, 328), (592, 1608, 2048), (456, 2048, 1000),  # swap_n160
         (512, 2040, 328), (498, 1824, 3024),  # n128_2x1 (m 481-512, n 1793-2048: no swapped tile fits)
         (224, 8192, 4096), (200, 6000, 2048),  # large (m 193-224 past half a wave, one wave of its tiles, rows on lines)
         (769, 1000, 1000), (1000, 1000, 1000), (1023, 520, 328),  # n128_2x1 (m 769-1024, n <= 1024, rows off lines)
         (1289, 1416, 320), (800, 1104, 2048),  # large (rows off 128-byte lines, or on)
         (250, 6000, 4096),  # large (m 225-256 over half a wave, rows on lines: the wave model's pick, as below)
         (250, 9000, 320), (256, 14336, 320),  # n160_coop, n224 (the same rows, the wave model's pick)
         # past half a wave at m > 256, the wave model's pick (base/choice.def's fastest):
         (601, 2504, 328), (999, 1032, 2056), (1400, 1400, 1000),  # large
         (641, 2824, 328), (1500, 1496, 1000), (900, 2504, 320),  # n160_coop
         (777, 5000, 1000), (2049, 4104, 520),  # n320
         (777, 4000, 1000), (1200, 3000, 1000),  # wide
         (1677, 1288, 328), (2058, 1304, 1000), (3995, 1736, 4104),  # n224
         (2049, 4104, 512), (1665, 1288, 320)]  # n192_1x2 (rows on lines)

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="session")
def kernels():
    """name -> Kernel: the base and every pathology built once, in one ninja run."""
    from ablate.build.compile import unavailable

    if why := unavailable(GEMM):
        pytest.skip(why)
    return loaded_pathologies("cutlass_gemm", PATHOLOGIES)


def seed_of(request):
    return zlib.crc32(request.node.nodeid.encode())


def run_case(kernel, m, n, k, dtype, seed):
    shape = SPEC.validate_shape({"m": m, "n": n, "k": k, "dtype": dtype})
    tensors = poisoned_inputs(SPEC, shape, seed, "cuda")
    kernel(tensors, shape)
    torch.cuda.synchronize()
    return compare(SPEC, tensors, shape, SPEC.tolerance(shape)), tensors


def test_the_cases_reach_every_configuration_of_the_table():
    assert {SPEC.choice({"m": m, "n": n, "k": k}) for m, n, k in CASES} == set(SPEC.configurations())


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("name", PATHOLOGIES)
def test_matches_reference(kernels, request, name, dtype):
    for m, n, k in CASES:
        result, tensors = run_case(kernels[name], m, n, k, dtype, seed_of(request) + m * n + k)
        assert result["ok"], f"{name} {dtype} {m}x{n}x{k}: {result['error']}"
        # Row by row too: one wrong row (a tile edge) is too small a share to move the global error.
        ref = SPEC.reference(tensors, {})["d"]
        row_err = (tensors["d"].double() - ref).norm(dim=-1) / ref.norm(dim=-1)
        assert float(row_err.max()) < 4 * SPEC.tolerance({"dtype": dtype}), \
            f"{name} {dtype} {m}x{n}x{k}: row {int(row_err.argmax())} has rel err {float(row_err.max()):.3g}"


@pytest.mark.parametrize("name", PATHOLOGIES)
def test_side_stream_and_graph(kernels, request, name):
    """On a non-default stream, and captured in a CUDA graph after an uncaptured launch of
    the shape (stream-K's workspace is allocated then: allocation is illegal in a capture)."""
    # swap_n32_4x1, swap_n64, swap_n64_4x2 (a cluster of eight), swap_n128, skinny_n128, large
    for m, n in ((1, 4096), (64, 520), (83, 2072), (200, 2200), (333, 520), (1289, 1416)):
        shape = SPEC.validate_shape({"m": m, "n": n, "k": 1032, "dtype": "fp16"})
        tensors = poisoned_inputs(SPEC, shape, seed_of(request) + m, "cuda")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            kernels[name](tensors, shape)
        side.synchronize()
        assert compare(SPEC, tensors, shape, SPEC.tolerance(shape))["ok"], f"{name} m={m} on a side stream"
        tensors["d"].fill_(float("nan"))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            kernels[name](tensors, shape)
        graph.replay()
        torch.cuda.synchronize()
        assert compare(SPEC, tensors, shape, SPEC.tolerance(shape))["ok"], f"{name} m={m} replayed from a graph"


@pytest.mark.parametrize("field", ["n", "k"])
def test_unaligned_n_or_k_is_refused_naming_the_field(kernels, field):
    shape = {"m": 64, "n": 1000, "k": 1000, "dtype": "fp16"}
    shape[field] = 1001
    with pytest.raises(ValueError, match=rf"^{field}=1001: must be a multiple of 8"):
        SPEC.validate_shape(shape)
    # The ABI refuses it too, writing nothing.
    good = SPEC.validate_shape({"m": 64, "n": 1000, "k": 1000, "dtype": "fp16"})
    tensors = SPEC.make_inputs(good, torch.Generator(device="cuda").manual_seed(0), "cuda")
    tensors["d"].fill_(7)
    with pytest.raises(KernelError, match=r"ablate_cutlass_gemm returned cudaErrorInvalidValue \(1\)"):
        kernels["none"](tensors, shape)
    torch.cuda.synchronize()
    assert bool((tensors["d"] == 7).all())
