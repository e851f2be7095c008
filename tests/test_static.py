"""Static analysis without a GPU: the ptxas report, the SASS instruction mix, theoretical
occupancy and the static metrics, on known numbers and on the real kernel's binaries."""
import re

import pytest

from ablate.job import fingerprint

from ablate.build import occupancy, ptxas, sass, static
from ablate.job import plugins
from ablate.job.fingerprint import METRICS
from ablate.build.library import Kernel

PTXAS_LOG = """\
ptxas info    : 0 bytes gmem
ptxas info    : Function properties for _Z6helperv
    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Compiling entry function '_Z3fooILi64ELb1EEvPf' for 'sm_90'
ptxas info    : Function properties for _Z3fooILi64ELb1EEvPf
    24 bytes stack frame, 36 bytes spill stores, 40 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers, 2048 bytes smem, 24 bytes cumulative stack size
ptxas info    : Compile time = 364.463 ms
ptxas info    : Compiling entry function '_Z3barv' for 'sm_90'
ptxas info    : Function properties for _Z3barv
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 360 bytes cmem[0]
"""


def test_ptxas_report_on_known_numbers():
    report = ptxas.parse(PTXAS_LOG)
    assert report["kernels"] == {
        "void foo<64, true>(float*)": {"registers": 168, "barriers": 1, "smem_bytes": 2048,
                                      "stack_bytes": 24, "spill_store_bytes": 36,
                                      "spill_load_bytes": 40},
        "bar()": {"registers": 32, "barriers": 0, "smem_bytes": 0, "stack_bytes": 0,
                  "spill_store_bytes": 0, "spill_load_bytes": 0},
    }
    assert report["max_registers"] == 168
    assert report["spill_bytes"] == 36 + 40 + 4 + 12  # the device function's spills count
    assert list(ptxas.parse(PTXAS_LOG, demangle_names=False)["kernels"]) == [
        "_Z3fooILi64ELb1EEvPf", "_Z3barv"]


def test_ptxas_report_of_the_real_kernel(built):
    r = built.results["none"]
    report = r.ptxas
    names = sorted(report["kernels"])
    for dim in (64, 128):
        for causal in ("true", "false"):
            for dtype in ("Fp16", "Bf16"):
                assert sum(f"<{dim}>, {causal}, {dtype}>" in n for n in names) == 1, names
    assert report["max_registers"] == max(k["registers"] for k in report["kernels"].values())
    assert 0 < report["max_registers"] <= 255
    # Every kernel's line in the log is what the parser read.
    used = [int(n) for n in re.findall(r"Used (\d+) registers", r.log)]
    assert sorted(used) == sorted(k["registers"] for k in report["kernels"].values())


@pytest.mark.parametrize("instruction, cls", [
    ("HMMA.16816.F32 R4, R8, R12, R4", "hmma_f32"),
    ("HMMA.16816.F16 R4, R8, R12, R4", "hmma_f16"),
    ("HMMA.16816.F32.BF16 R4, R8, R12, R4", "hmma_f32"),
    ("@P0 LDG.E.128 R4, desc[UR6][R2.64]", "ldg_128"),
    ("LDG.E.128.CONSTANT R4, desc[UR6][R2.64]", "ldg_128"),
    ("LDG.E R4, desc[UR6][R2.64]", "ldg_32"),
    ("LDG.E.64 R4, desc[UR6][R2.64]", "ldg_64"),
    ("@!P1 LDG.E.U16 R4, desc[UR6][R2.64]", "ldg_16"),
    ("LDG.E.S8 R4, desc[UR6][R2.64]", "ldg_8"),
    ("STG.E.128 desc[UR6][R2.64], R4", "stg_128"),
    ("STG.E.U16 desc[UR6][R2.64], R4", "stg_16"),
    ("STG.E desc[UR6][R2.64], R4", "stg_32"),
    ("LDGSTS.E.BYPASS.LTC128B.128 [R3], desc[UR6][R4.64]", "ldgsts"),
    ("LDSM.16.MT88.4 R4, [R3]", "ldsm"),
    ("LDSM.16.M88.4 R4, [R3+0x800]", "ldsm"),
    ("LDS.128 R4, [R3]", "lds"),
    ("LDS.U.128 R4, [R3]", "lds"),
    ("STS [R3], R4", "sts"),
    ("BAR.SYNC.DEFER_BLOCKING 0x0", "bar"),
    ("MUFU.EX2 R4, R5", "mufu_ex2"),
    ("@!P0 BRA 0x120", "bra"),
    ("LDL.LU R4, [R1+0x10]", "ldl"),
    ("STL.64 [R1], R4", "stl"),
    ("LOP3.LUT R4, R5, 0x38, RZ, 0x3c, !PT", "lop3"),
    ("MUFU.RSQ R4, R5", "mufu_rsq"),
    ("SHFL.BFLY PT, R5, R4, 0x10, 0x1f", "shfl"),
    ("ATOMS.ADD.F32 RZ, [R3], R4", "atoms"),
    ("ATOMS.CAS R5, [R3], R4, R6", "atoms"),
    ("RED.E.ADD.F32.FTZ.RN.STRONG.GPU desc[UR6][R2.64], R4", "atom"),
    ("ATOMG.E.ADD.F32.FTZ.RN.STRONG.GPU PT, R5, desc[UR6][R2.64], R4", "atom"),
    ("DFMA R4, R6, R8, R4", "fp64"),
    ("DADD R4, R6, R8", "fp64"),
    ("DMUL R4, R6, R8", "fp64"),
    ("HGMMA.64x128x16.F32 R24, gdesc[UR8], RZ, !UPT", "hgmma"),
    ("UTMALDG.3D [UR8], [UR6]", "utmaldg"),
    ("UTMASTG.3D [UR8], [UR6]", "utmastg"),
    ("SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4+0x28000], R6", "syncs"),
    ("SYNCS.ARRIVE.TRANS64.A1T0 RZ, [UR4+0x28028], RZ", "syncs"),
    ("USETMAXREG.DEALLOC.CTAPOOL 0x18", "setmaxnreg"),
    ("WARPGROUP.DEPBAR.LE gsb0, 0x0", None),
    ("MUFU.RCP R4, R5", None),
    ("LDGDEPBAR", None),
    ("ULOP3.LUT UR4, UR5, 0x38, URZ, 0xc0, !UPT", None),
    ("IMAD.WIDE R2, R5, 0x2, R2", None),
    ("BSSY B0, 0x950", None),
])
def test_sass_instruction_classes(instruction, cls):
    assert sass.classify(instruction) == cls


@pytest.mark.parametrize("instruction, classes", [
    ("FFMA R4, R5, R6, R4", ("ffma",)),
    ("@P0 FFMA.FTZ R4, R5, R6, R4", ("ffma",)),
    ("FFMA32I R4, R5, 0x3f800000, R4", ("ffma",)),
    ("FMUL.FTZ R4, R5, R6", ("fmul",)),
    ("FMUL32I R4, R5, 0.5", ("fmul",)),
    ("FADD R4, R5, -R6", ("fadd",)),
    ("FADD.FTZ.RZ R4, R5, R6", ("fadd",)),
    ("HFMA2.MMA R5, -RZ, RZ, 0, 0", ()),  # the compiler's move of a constant
    ("LDS R4, [R3]", ("lds", "lds_32")),
    ("LDS.64 R4, [R3+0x10]", ("lds", "lds_64")),
    ("LDS.U.128 R4, [R3]", ("lds", "lds_128")),
    ("LDS.U16 R4, [R3]", ("lds", "lds_16")),
    ("LDS.S8 R4, [R3]", ("lds", "lds_8")),
    ("STS [R3], R4", ("sts", "sts_32")),
    ("@!P0 STS.128 [R3], R4", ("sts", "sts_128")),
    ("STS.U16 [R3], R4", ("sts", "sts_16")),
    ("LDSM.16.MT88.4 R4, [R3]", ("ldsm",)),  # ldmatrix: no width class of its own
    ("DFMA R4, R6, R8, R4", ("fp64",)),
    ("IMAD R4, R5, R6, R4", ()),
])
def test_fp32_arithmetic_and_shared_memory_by_width(instruction, classes):
    """The classes a user's kernel needs: FP32 FMA/MUL/ADD, and LDS/STS by width (counted
    beside lds/sts), so `sass.ffma: decreases` or `sass.lds_128: zero` can be a fingerprint."""
    assert sass.classes(instruction) == classes
    counts = sass.mix([instruction, "NOP"])
    assert {c for c in sass.CLASSES if counts[c] and c != "instructions"} == set(classes)
    assert all(f"sass.{c}" in fingerprint.METRICS for c in classes)


CUOBJDUMP = """
Fatbin elf code:
================
arch = sm_90

	code for sm_90
		Function : _Z3bazv
	.headerflags	@"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;          /* 0x00000a00ff017b82 */
                                                                   /* 0x000fe20000000800 */
        /*0010*/              @P0 LDG.E.128 R4, desc[UR6][R2.64] ;  /* 0x0000000602047981 */
                                                                   /* 0x000ea2000c1e1d00 */
        /*0020*/                   HMMA.16816.F16 R4, R8, R12, R4 ;  /* 0x0000000c0804723c */
                                                                   /* 0x000fe20000000804 */
        /*0030*/                   BRA 0x30;                       /* 0xfffffffc00fc7947 */
                                                                   /* 0x000fc0000383ffff */
        /*0040*/                   NOP;                            /* 0x0000000000007918 */
                                                                   /* 0x000fc00000000000 */
		..........
"""


def test_sass_parse_and_mix_on_known_text():
    functions = sass.parse(CUOBJDUMP + CUOBJDUMP)  # a second fatbin section repeats it
    assert functions == {"_Z3bazv": ["LDC R1, c[0x0][0x28]", "@P0 LDG.E.128 R4, desc[UR6][R2.64]",
                                     "HMMA.16816.F16 R4, R8, R12, R4", "BRA 0x30", "NOP"]}
    counts = sass.mix(functions["_Z3bazv"])
    assert counts["ldg_128"] == counts["hmma_f16"] == counts["bra"] == 1
    assert counts["instructions"] == 4  # NOP padding is not counted
    assert sum(counts[c] for c in sass.CLASSES if c != "instructions") == 3
    text = sass.normalise(functions)
    assert text.startswith("Function : _Z3bazv\n  LDC R1, c[0x0][0x28]\n")
    assert "/*" not in text


def test_sass_of_the_real_kernel(built):
    base = built.sass("none")
    assert set(base["kernels"]) == set(built.results["none"].ptxas["kernels"])
    for cls in sass.CLASSES:
        assert base["totals"][cls] == sum(k[cls] for k in base["kernels"].values())
    # What the base is made of (issue 2): tensor cores, ldmatrix, cp.async, exp2, 16-B stores.
    for cls in ("hmma_f16", "hmma_f32", "ldsm", "ldgsts", "mufu_ex2", "stg_128", "bar"):
        assert base["totals"][cls] > 0, cls
    assert base["totals"]["ldg_16"] == 0
    text = base["text"]
    assert text.count("Function : ") == 8  # D x causal x dtype
    assert not re.search(r"/\*[0-9a-f]{4}\*/", text)  # no addresses left
    assert sass.read(built.results["none"].lib)["text"] == text  # the same every time


def test_a_librarys_sass_is_read_once_and_again_when_it_changes(built, tmp_path):
    """The report is kept beside the library and used while the library is the same file;
    a library rebuilt in place (another mtime) is disassembled again."""
    import json
    import os
    import shutil

    lib = tmp_path / "x.so"
    shutil.copy(built.results["none"].lib, lib)
    first = sass.read(lib)
    cache = tmp_path / "x.so.sass.json"
    saved = json.loads(cache.read_text())
    assert saved["report"] == first
    saved["report"]["text"] = "planted"
    cache.write_text(json.dumps(saved))
    assert sass.read(lib)["text"] == "planted"  # the kept report, not cuobjdump's
    st = lib.stat()
    os.utime(lib, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert sass.read(lib)["text"] == first["text"]  # changed: disassembled again


def test_sass_of_something_not_a_library_is_a_clear_error(tmp_path):
    junk = tmp_path / "junk.so"
    junk.write_text("not an ELF file")
    with pytest.raises(sass.SassError, match="junk.so"):
        sass.read(junk)


def test_cuobjdump_and_nvdisasm_are_found():
    for tool in ("cuobjdump", "nvdisasm"):
        assert sass.find_tool(tool).is_file()


@pytest.mark.parametrize("arch, threads, regs, smem, blocks, warps, limit", [
    # 255 registers round up to 8192 a warp: 2 warps per sub-partition, 8 per SM.
    ("sm_90", 128, 255, 49152, 2, 8, "registers"),
    ("sm_90", 128, 128, 65536, 3, 12, "shared_memory"),  # (64 KB + 1 KB) x 3 <= 228 KB
    ("sm_90", 128, 64, 16384, 8, 32, "registers"),  # 65536 / (64*32) = 32 warps
    ("sm_90", 32, 32, 0, 32, 32, "blocks"),  # one warp a block: capped at 32 blocks
    ("sm_90", 1024, 16, 0, 2, 64, "warps"),
    ("sm_90", 128, 32, 228 * 1024, 0, 0, "shared_memory"),  # more than a block may have
    ("sm_80", 128, 64, 48 * 1024, 3, 12, "shared_memory"),  # 164 KB / 50 KB
    ("sm_86", 256, 32, 0, 6, 48, "warps"),  # 48 warps an SM
    ("sm_89", 32, 16, 0, 24, 24, "blocks"),
    ("sm_90a", 96, 40, 0, 16, 48, "registers"),  # 40 regs -> 1280 a warp: 12 per sub-part.
])
def test_occupancy_on_known_numbers(arch, threads, regs, smem, blocks, warps, limit):
    result = occupancy.occupancy(arch, threads, regs, smem)
    assert (result["blocks"], result["warps"], result["limited_by"]) == (blocks, warps, limit)


def test_occupancy_of_an_unknown_arch_is_an_error():
    with pytest.raises(ValueError, match="sm_70"):
        occupancy.occupancy("sm_70", 128, 32, 0)


def test_static_metrics_of_the_base(built):
    r = built.results["none"]
    info = Kernel(r.lib).info()
    report = built.sass("none")
    spec = built.plugin.spec
    metrics = static.static_metrics(r, spec, info, report)
    assert static.static_metrics(r, spec) == metrics  # reads the info and the SASS itself
    names = ("d64", "d128", "d64_bf16", "d128_bf16")  # per head dim and dtype
    assert [c["name"] for c in info["configs"]] == list(names)
    for name in METRICS:
        for key in (name, *(f"{c}.{name}" for c in names)):
            assert isinstance(metrics[key], int), key
    assert metrics["regs"] == r.ptxas["max_registers"]
    assert metrics["spill_bytes"] == r.ptxas["spill_bytes"]
    configs = {c["name"]: c for c in info["configs"]}
    for name, config in configs.items():
        dtype = "Bf16" if config["dtype"] == "bf16" else "Fp16"
        kernels = {n: k for n, k in r.ptxas["kernels"].items()
                   if f"<{config['head_dim']}>" in n and f", {dtype}>" in n}
        assert len(kernels) == 2
        regs = max(k["registers"] for k in kernels.values())
        smem = config["smem_bytes"] + max(k["smem_bytes"] for k in kernels.values())
        occ = occupancy.occupancy("sm_90", config["threads"], regs, smem)
        assert metrics[f"{name}.regs"] == regs
        assert metrics[f"{name}.smem_bytes"] == smem
        assert metrics[f"{name}.threads_per_block"] == config["threads"]
        assert metrics[f"{name}.occupancy_warps"] == occ["warps"] > 0
        assert metrics[f"{name}.sass.hmma_f16"] == sum(
            report["kernels"][n]["hmma_f16"] for n in kernels)
    assert metrics["threads_per_block"] == max(c["threads"] for c in configs.values())
    assert metrics["occupancy_warps"] == min(metrics[f"{c}.occupancy_warps"] for c in names)
    for cls in sass.CLASSES:
        assert metrics[f"sass.{cls}"] == report["totals"][cls]
        assert metrics[f"sass.{cls}"] == sum(metrics[f"{c}.sass.{cls}"] for c in names)


def test_static_metrics_of_a_failed_build_is_an_error(built):
    with pytest.raises(ValueError, match="broken_build.*build_failed"):
        static.static_metrics(built.results["broken_build"], built.plugin.spec, {"configs": []})


@pytest.mark.parametrize("name, dim", [
    ("void attention_fwd_kernel<BaseTile<64>, true>(Params)", 64),
    ("void attention_fwd_kernel<TinyTile<128>, false>(Params)", 128),
    ("void attention_fwd_kernel<Sm80Tile<64>, false>(Params)", 64),
    ("void attention_fwd_kernel<Tile<64, 128, 4>, false>(Params)", None),  # 64 and 128
    ("void kernel(Params)", None),
])
def test_head_dim_of_a_kernel_name(name, dim):
    spec = plugins.load("attention").spec
    assert spec.head_dim_of(name, {64: {}, 128: {}}) == dim
    configs = [{"name": "d64", "head_dim": 64}, {"name": "d128", "head_dim": 128}]
    assert spec.config_of(name, configs) == (None if dim is None else f"d{dim}")


RMS_CONFIGS = [{"name": f"{d}_h{h}{'_few' if few else ''}", "dtype": d, "max_hidden": n, "few_rows": few,
                "threads": t, "rows_per_block": r,
                "kernel": f"void rmsnorm_fwd_kernel<{ty}, {n}, {str(few).lower()}>"}
               for d, ty in (("fp16", "__half"), ("bf16", "__nv_bfloat16"))
               for h, n in (("1k", 1024), ("8k", 8192))
               for few, t, r in ((False, 256, 8 if n == 1024 else 1), (True, n // 8, 1))]


@pytest.mark.parametrize("rows, hidden, dtype, wanted", [
    (16, 4096, "fp16", None),               # no bucket of 4096 in this list: the 8k one
    (16, 1000, "bf16", "bf16_h1k_few"),     # every row in one wave: the few-rows instance
    (2112, 1024, "fp16", "fp16_h1k_few"),   # 132 SMs x 16 blocks of 128 threads x 1 row
    (2113, 1024, "fp16", "fp16_h1k"),       # one row more: the many-rows instance
    (264, 8192, "fp16", "fp16_h8k_few"),    # 132 x 2 blocks of 1024 threads
    (16384, 8192, "bf16", "bf16_h8k"),
    (1, 16384, "fp16", "none"),             # no instance holds the row
])
def test_rmsnorm_instances_a_shape_runs(rows, hidden, dtype, wanted):
    spec = plugins.load("rmsnorm").spec
    wanted = {None: f"{dtype}_h8k_few"}.get(wanted, wanted)
    shape = {"rows": rows, "hidden": hidden, "dtype": dtype, "eps": 1e-6}
    runs = [c["name"] for c in RMS_CONFIGS if static.launched(spec, c["kernel"] + "(Params)", shape, RMS_CONFIGS)]
    assert runs == ([] if wanted == "none" else [wanted])
    for c in RMS_CONFIGS:
        assert static.config_of(spec, c["kernel"] + "(Params)", RMS_CONFIGS) == c["name"]


def test_a_sweep_disassembles_ahead_what_its_jobs_will_read(built, tmp_path):
    """The callback reads at once the SASS its jobs read one after another: the base's and a
    generic pathology's (whether it applies); not a timed hand-written pathology's."""
    import shutil
    from types import SimpleNamespace as NS

    from ablate.sweep.callbacks import read_sass_ahead

    results = {}
    for name in ("none", "no_unroll", "no_swizzle"):
        lib = tmp_path / f"{name}.so"
        shutil.copy(built.results["none"].lib, lib)
        results[name] = NS(lib=lib, ok=True)
    variants = [NS(name="none", generic=(), is_base=True), NS(name="no_unroll", generic=("no_unroll",), is_base=False),
                NS(name="no_swizzle", generic=(), is_base=False)]
    read_sass_ahead([NS(mode="gpu")], variants, results)
    kept = {p.name for p in tmp_path.glob("*.sass.json")}
    assert kept == {"none.so.sass.json", "no_unroll.so.sass.json"}
    read_sass_ahead([NS(mode="static")], variants, results)
    assert (tmp_path / "no_swizzle.so.sass.json").exists()
