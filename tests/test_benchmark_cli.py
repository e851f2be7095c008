"""The benchmark's CPU side: argument checks with clear errors, and the table's arithmetic on
synthetic samples with known answers (the timing itself needs a GPU: benchmarks, not tests)."""
import numpy as np
import pytest

from ablate.tools import benchmark
from ablate.job import plugins

ATTENTION = plugins.load("attention")
RMSNORM = plugins.load("rmsnorm")
S512 = {"batch": 4, "heads": 8, "seq": 512, "head_dim": 64, "causal": False}
PEERS = ["sdpa_flash", "sdpa_cudnn"]
MATMUL = 600.0  # TFLOP/s: a ceiling for the arithmetic below


def rows_of(samples, shape=S512, plugin=ATTENTION, peers=PEERS, ceiling=MATMUL):
    return benchmark.candidate_rows(plugin, "s512", shape, samples, peers, ceiling)


def test_unknown_shape_names_the_choices():
    with pytest.raises(SystemExit, match=r"unknown shape 'nope' of kernel attention; choose from .*s512"):
        benchmark.load_shapes(ATTENTION, ["nope"])
    with pytest.raises(SystemExit, match=r"unknown shape 's512' of kernel rmsnorm; choose from .*r16k_h8k"):
        benchmark.load_shapes(RMSNORM, ["s512"])


def test_shapes_are_read_from_the_kernels_conf():
    assert benchmark.load_shapes(ATTENTION, ["s512", "s4k", "s4k_bf16"]) == {  # dtype: fp16 where none is named
        "s512": {**S512, "dtype": "fp16"},
        "s4k": {"batch": 2, "heads": 16, "seq": 4096, "head_dim": 64, "causal": False, "dtype": "fp16"},
        "s4k_bf16": {"batch": 2, "heads": 16, "seq": 4096, "head_dim": 64, "causal": False, "dtype": "bf16"}}
    assert benchmark.load_shapes(RMSNORM, ["r16_h4k"]) == {
        "r16_h4k": {"rows": 16, "hidden": 4096, "dtype": "fp16", "eps": 1e-6}}


def test_a_shape_the_spec_rejects_is_refused_with_its_message(tmp_path):
    (tmp_path / "conf" / "shape").mkdir(parents=True)
    (tmp_path / "conf" / "shape" / "odd.yaml").write_text(
        "batch: 1\nheads: 1\nseq: 64\nhead_dim: 96\ncausal: false\n")
    odd = plugins.Plugin("attention", tmp_path, ATTENTION.spec)
    with pytest.raises(SystemExit, match=r"odd\.yaml: shape: head_dim must be one of \[64, 128\], got 96"):
        benchmark.load_shapes(odd, ["odd"])


def test_rows_and_ratios():
    samples = {"base": np.full(50, 10.0), "sdpa_flash": np.full(50, 20.0), "sdpa_cudnn": np.full(50, 5.0)}
    rows = {r["candidate"]: r for r in rows_of(samples)}
    base = rows["base"]
    assert base["median"] == base["p10"] == base["p90"] == 10.0
    # 4*B*H*S^2*D flops in 10 us; q, k, v, o of 2 bytes each
    assert base["tflops"] == pytest.approx(4 * 4 * 8 * 512**2 * 64 / 10e-6 / 1e12)
    assert base["gbps"] == pytest.approx(4 * 4 * 8 * 512 * 64 * 2 / 10e-6 / 1e9)
    assert base["of_peak"] == pytest.approx(base["tflops"] / MATMUL)  # attention: compute-bound
    assert base["vs_sdpa_flash"] == pytest.approx(0.5)
    assert base["vs_sdpa_cudnn"] == pytest.approx(2.0)
    assert rows["sdpa_flash"]["vs_sdpa_flash"] == pytest.approx(1.0)


def test_a_memory_bound_kernel_is_held_to_the_copy_bandwidth():
    shape = {"rows": 16384, "hidden": 8192, "dtype": "fp16", "eps": 1e-6}
    row = rows_of({"base": [200.0]}, shape, RMSNORM, ["torch_eager"], ceiling=3000.0)[0]
    assert row["gbps"] == pytest.approx(2 * (2 * 16384 * 8192 + 8192) / 200e-6 / 1e9)
    assert row["of_peak"] == pytest.approx(row["gbps"] / 3000.0)
    assert row["vs_torch_eager"] is None  # not measured in this run


def test_causal_halves_the_flops():
    full = rows_of({"base": [10.0, 10.0]})[0]["tflops"]
    half = rows_of({"base": [10.0, 10.0]}, {**S512, "causal": True})[0]["tflops"]
    assert half == pytest.approx(full / 2)


def test_percentiles_come_from_the_samples():
    row = rows_of({"base": np.arange(1.0, 102.0)})[0]
    assert (row["p10"], row["median"], row["p90"]) == (11.0, 51.0, 91.0)


def test_markdown_marks_a_missing_peer():
    rows = rows_of({"base": [10.0], "sdpa_flash": [8.0]})
    text = benchmark.markdown(ATTENTION, rows, {"s512": S512}, PEERS, ["### header"], ["cudnn skipped: why"])
    lines = text.splitlines()
    assert "| time / sdpa_flash | time / sdpa_cudnn |" in text and "| of fp16_tensor |" in text
    base_row = next(line for line in lines if "| base |" in line)
    assert "B=4 H=8 S=512 D=64" in base_row
    assert base_row.rstrip().endswith("| 1.250 | n/a |")
    assert "- cudnn skipped: why" in lines


def test_bad_samples_are_an_error():
    with pytest.raises(ValueError, match="base"):
        rows_of({"base": [10.0, -1.0]})


def test_command_line_is_quoted():
    assert benchmark.command_line(["--shapes", "s512", "--override", "bench.l2=warm x"]) == \
        "python -m ablate.tools.benchmark --shapes s512 --override 'bench.l2=warm x'"


@pytest.mark.parametrize("argv, message", [
    (["--shapes", "s512,nope"], "unknown shape 'nope'"),
    (["--peers", "sdpa_flash,fast"], r"unknown peer\(s\) \['fast'\] of kernel attention"),
    (["--kernel", "rmsnorm", "--peers", "sdpa_flash"], r"unknown peer\(s\) \['sdpa_flash'\] of kernel rmsnorm"),
    (["--kernel", "nope"], "unknown kernel 'nope'"),
    (["--override", "bench.l2=lukewarm"], "bench.l2 must be cold or warm"),
    (["--override", "bench.nonsense=1"], "cannot compose the config"),
])
def test_cli_rejects_bad_arguments(argv, message):
    with pytest.raises(SystemExit, match=message):
        benchmark.main(argv)


def test_cli_without_gpu_says_so():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(SystemExit, match="no CUDA device"):
        benchmark.main(["--shapes", "s512"])
    with pytest.raises(SystemExit, match="no CUDA device"):
        benchmark.main(["--kernel", "rmsnorm"])
