"""The benchmark's CPU side: argument checks with clear errors, and the table's arithmetic on
synthetic samples with known answers (the timing itself needs a GPU: benchmarks, not tests)."""
import numpy as np
import pytest

from ablate import benchmark

S512 = {"batch": 4, "heads": 8, "seq": 512, "head_dim": 64, "causal": False}


def test_unknown_shape_names_the_choices():
    with pytest.raises(SystemExit, match=r"unknown shape 'nope'; choose from .*s512"):
        benchmark.load_shapes(["nope"], [64, 128])


def test_shapes_are_read_from_conf():
    assert benchmark.load_shapes(["s512", "s4k"], [64, 128]) == {
        "s512": S512,
        "s4k": {"batch": 2, "heads": 16, "seq": 4096, "head_dim": 64, "causal": False}}


def test_shape_with_unbuilt_head_dim_is_refused(tmp_path):
    (tmp_path / "shape").mkdir()
    (tmp_path / "shape" / "odd.yaml").write_text(
        "batch: 1\nheads: 1\nseq: 64\nhead_dim: 96\ncausal: false\n")
    with pytest.raises(SystemExit, match=r"odd\.yaml: .*head_dim=96 is not built"):
        benchmark.load_shapes(["odd"], [64, 128], conf_dir=tmp_path)


def test_rows_and_ratios():
    samples = {"base": np.full(50, 10.0), "sdpa_flash": np.full(50, 20.0),
               "sdpa_cudnn": np.full(50, 5.0)}
    rows = {r["candidate"]: r for r in benchmark.candidate_rows("s512", S512, samples)}
    base = rows["base"]
    assert base["median"] == base["p10"] == base["p90"] == 10.0
    # 4*B*H*S^2*D flops in 10 us
    assert base["tflops"] == pytest.approx(4 * 4 * 8 * 512**2 * 64 / 10e-6 / 1e12)
    assert base["vs_flash"] == pytest.approx(0.5)
    assert base["vs_cudnn"] == pytest.approx(2.0)
    assert rows["sdpa_flash"]["vs_flash"] == pytest.approx(1.0)


def test_causal_halves_the_flops():
    causal = {**S512, "causal": True}
    full = benchmark.candidate_rows("a", S512, {"base": [10.0, 10.0]})[0]["tflops"]
    half = benchmark.candidate_rows("b", causal, {"base": [10.0, 10.0]})[0]["tflops"]
    assert half == pytest.approx(full / 2)


def test_percentiles_come_from_the_samples():
    row = benchmark.candidate_rows("s512", S512, {"base": np.arange(1.0, 102.0)})[0]
    assert (row["p10"], row["median"], row["p90"]) == (11.0, 51.0, 91.0)


def test_markdown_marks_a_missing_backend():
    rows = benchmark.candidate_rows("s512", S512, {"base": [10.0], "sdpa_flash": [8.0]})
    text = benchmark.markdown(rows, {"s512": S512}, ["### header"], ["cudnn skipped: why"])
    lines = text.splitlines()
    base_row = next(line for line in lines if "| base |" in line)
    assert "B=4 H=8 S=512 D=64" in base_row
    assert base_row.rstrip().endswith("| 1.250 | n/a |")
    assert "- cudnn skipped: why" in lines


def test_bad_samples_are_an_error():
    with pytest.raises(ValueError, match="base"):
        benchmark.candidate_rows("s512", S512, {"base": [10.0, -1.0]})


def test_command_line_is_quoted():
    assert benchmark.command_line(["--shapes", "s512", "--override", "bench.l2=warm x"]) == \
        "python -m ablate.benchmark --shapes s512 --override 'bench.l2=warm x'"


@pytest.mark.parametrize("argv, message", [
    (["--shapes", "s512,nope"], "unknown shape 'nope'"),
    (["--backends", "flash,fast"], r"unknown SDPA backend\(s\) \['fast'\]"),
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
