"""The SASS of a built library (`cuobjdump -sass`): instruction mix and a normalised text.

cuobjdump comes from the CUDA toolkit when present, else from the PyPI packages
nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm (cuobjdump hands the disassembly to
nvdisasm, and without it prints nothing but a "fatal" line while exiting 0).
"""
import contextlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

from ablate.build import cute_aot, triton_aot
from ablate.build.ptxas import demangle

# Instruction classes counted, each reported as `sass.<class>`: those of docs/design.md
# ("Fingerprints"), plus ldg_8/stg_8, lop3 (LOP3: logic such as the swizzle's XOR), shfl
# (warp shuffles), atoms (shared-memory atomics), atom (global atomics and reductions:
# ATOM, ATOMG, RED), fp64 (DADD, DMUL, DFMA), mufu_rsq (reciprocal square root) and
# instructions (every instruction but NOP); and Hopper's: hgmma (warpgroup MMA, wgmma), utmaldg
# and utmastg (bulk tensor copies, TMA), utmacctl (the TMA descriptor cache's control: a
# descriptor made on the device), syncs (mbarrier operations), setmaxnreg, and acqbulk and
# preexit (the dependent launch's wait and early release). FP32
# arithmetic: ffma, fmul, fadd (immediate forms included; no FP16x2 class: the compiler
# moves constants with HFMA2.MMA, so its count says little). Shared memory by width:
# lds_<bits> and sts_<bits>, counted besides lds and sts (every width), so an instruction may
# count in two classes (`classes`).
WIDTHS = (8, 16, 32, 64, 128)
CLASSES = (
    ("hmma_f16", "hmma_f32", "ldsm", "ldgsts")
    + tuple(f"ldg_{w}" for w in WIDTHS)
    + tuple(f"stg_{w}" for w in WIDTHS)
    + ("lds", "sts")
    + tuple(f"lds_{w}" for w in WIDTHS)
    + tuple(f"sts_{w}" for w in WIDTHS)
    + ("bar", "ldl", "stl", "mufu_ex2", "mufu_rsq", "bra", "lop3", "shfl", "atoms",
       "atom", "fp64", "ffma", "fmul", "fadd", "call", "ldg_nc", "ldg_strong",
       "hgmma", "utmaldg", "utmastg", "syncs", "setmaxnreg", "acqbulk", "preexit", "utmacctl",
       "instructions")
)

_FUNCTION = re.compile(r"^\s*Function : (\S+)")
# `/*0a30*/  @!P0 LDG.E.128 R4, desc[UR6][R2.64] ;  /* 0x... */` -> the instruction text
_INSTRUCTION = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(.*?)\s*;")
_PREDICATE = re.compile(r"^@!?U?P\w+\s+")


class SassError(RuntimeError):
    """cuobjdump is missing or could not disassemble a library."""


def read(lib: Path) -> dict:
    """`{"kernels": {name: {class: count}}, "totals": {class: count}, "text": str}` for the
    library `lib`; `text` is the normalised SASS (see `normalise`). A Triton variant's
    manifest (ablate/build/triton_aot.py) reads each instance's cubin, its function named after
    the instance; a CuTe DSL one's (ablate/build/cute_aot.py) likewise.

    Kept beside the library as `<lib>.sass.json`, valid while the library's size and mtime
    and the disassembler are those it was read from: cuobjdump and nvdisasm took ~1.6 s per
    library of the README sweep's kernel on the H100's host, and a warm sweep read 8 of them again."""
    lib = Path(lib)
    cache, key = lib.with_name(lib.name + ".sass.json"), _cache_key(lib)
    try:
        saved = json.loads(cache.read_text())
        if saved.get("key") == key:
            return saved["report"]
    except (OSError, ValueError, AttributeError):
        pass
    if triton_aot.is_manifest(lib):
        functions = {}
        for name, cubin in triton_aot.cubins(lib).items():
            code = parse(disassemble(cubin))
            if len(code) != 1:
                raise SassError(f"{cubin}: {len(code)} functions, expected one kernel")
            functions[name] = next(iter(code.values()))
    elif cute_aot.is_manifest(lib):  # each instance's cubin, its kernels named as the manifest says
        functions = {}
        for name, (cubin, names) in cute_aot.cubins(lib).items():
            code = parse(disassemble(cubin))
            if set(code) != set(names):
                raise SassError(f"{cubin}: functions {sorted(code)}, the manifest says {sorted(names)}")
            functions.update({names[k]: v for k, v in code.items()})
    else:
        functions = parse(disassemble(lib))
    readable = demangle(list(functions))
    kernels = {readable[name]: mix(code) for name, code in functions.items()}
    totals = {c: sum(k[c] for k in kernels.values()) for c in CLASSES}
    report = {"kernels": kernels, "totals": totals, "text": normalise(functions)}
    with contextlib.suppress(OSError):  # a read-only build folder: read again next time
        tmp = cache.with_name(f".{cache.name}.{os.getpid()}")
        tmp.write_text(json.dumps({"key": key, "report": report}))
        os.replace(tmp, cache)
    return report


def _cache_key(lib: Path) -> list:
    st, tool = lib.stat(), find_tool("cuobjdump")
    return [st.st_size, st.st_mtime_ns, str(tool), tool.stat().st_mtime_ns, list(CLASSES)]  # as JSON reads it back


def disassemble(lib: Path) -> str:
    """cuobjdump -sass of `lib`, raising SassError when it shows no function."""
    cuobjdump, nvdisasm = find_tool("cuobjdump"), find_tool("nvdisasm")
    env = dict(os.environ, PATH=f"{nvdisasm.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    run = subprocess.run([str(cuobjdump), "-sass", str(lib)], capture_output=True, text=True,
                         env=env, check=False)
    if run.returncode != 0 or "fatal" in run.stderr:
        raise SassError(f"{cuobjdump} -sass {lib} failed (exit {run.returncode}): "
                        f"{run.stderr.strip()}")
    if not any(_FUNCTION.match(line) for line in run.stdout.splitlines()):
        raise SassError(f"cuobjdump found no device function in {lib}")
    return run.stdout


def find_tool(name: str) -> Path:
    """`cuobjdump` or `nvdisasm`: the CUDA toolkit's (CUDA_HOME, CUDA_PATH, beside nvcc,
    /usr/local/cuda), then PATH, then the PyPI package nvidia-cuda-<name>."""
    dirs = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    dirs = [Path(d) / "bin" for d in dirs if d]
    nvcc = shutil.which("nvcc")
    if nvcc:
        dirs.append(Path(nvcc).resolve().parent)
    dirs.append(Path("/usr/local/cuda/bin"))
    for d in dirs:
        if (d / name).is_file() and os.access(d / name, os.X_OK):
            return d / name
    if found := shutil.which(name):
        return Path(found)
    package = f"nvidia-cuda-{name}"
    try:
        files = importlib.metadata.distribution(package).files or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    for f in files:
        if f.name == name and f.parent.name == "bin":
            return Path(f.locate()).resolve()
    raise SassError(f"{name} not found in the CUDA toolkit, on PATH or from the PyPI package "
                    f"{package}: install one of them (`pip install {package}`)")


def parse(text: str) -> dict[str, list[str]]:
    """Mangled function name -> its instructions, as text without addresses or encodings.
    A function that appears in several fatbin sections (one per arch) keeps the first."""
    functions: dict[str, list[str]] = {}
    code = None
    for line in text.splitlines():
        if m := _FUNCTION.match(line):
            name = m.group(1)
            code = None if name in functions else functions.setdefault(name, [])
        elif code is not None and (m := _INSTRUCTION.match(line)):
            code.append(m.group(1))
    return functions


def normalise(functions: dict[str, list[str]]) -> str:
    """One text for the whole library, functions in name order, so two libraries' SASS can
    be compared for equality (addresses and encodings are already gone)."""
    return "".join(f"Function : {name}\n" + "".join(f"  {i}\n" for i in functions[name])
                   for name in sorted(functions))


def mix(instructions: list[str]) -> dict[str, int]:
    """Counts of each class in CLASSES for one function's instructions."""
    counts = Counter(dict.fromkeys(CLASSES, 0))
    for text in instructions:
        for cls in classes(text):
            counts[cls] += 1
        mnemonic = _mnemonic(text)
        if not mnemonic.startswith("NOP"):
            counts["instructions"] += 1
        if mnemonic.startswith("LDG."):  # counted besides its width class
            mods = mnemonic.split(".")[1:]
            counts["ldg_nc"] += "CONSTANT" in mods
            counts["ldg_strong"] += "STRONG" in mods
    return dict(counts)


def classes(instruction: str) -> tuple[str, ...]:
    """Every class one instruction counts in: its class (`classify`), and for a shared-memory
    load or store its width's too (`LDS.U.128 R4, [R3]` -> ("lds", "lds_128"))."""
    cls = classify(instruction)
    if cls is None:
        return ()
    if cls in ("lds", "sts"):
        return cls, f"{cls}_{_width(_mnemonic(instruction).split('.')[1:])}"
    return (cls,)


def classify(instruction: str) -> str | None:
    """The class of one instruction (`@P0 LDG.E.128 R4, [R2.64]` -> "ldg_128"), or None."""
    op, *mods = _mnemonic(instruction).split(".")
    if op == "HMMA":
        # HMMA.16816.F32 accumulates in FP32, HMMA.16816.F16 in FP16 (input type may follow).
        acc = next((m for m in mods if m in ("F16", "F32")), None)
        return {"F16": "hmma_f16", "F32": "hmma_f32"}.get(acc)
    if op in ("LDG", "STG"):
        return f"{op.lower()}_{_width(mods)}"
    if op == "MUFU":
        return {"EX2": "mufu_ex2", "RSQ": "mufu_rsq"}.get(mods[0] if mods else None)
    return {"LDSM": "ldsm", "LDGSTS": "ldgsts", "LDS": "lds", "STS": "sts", "BAR": "bar",
            "LDL": "ldl", "STL": "stl", "BRA": "bra", "LOP3": "lop3", "SHFL": "shfl",
            "ATOMS": "atoms", "ATOM": "atom", "ATOMG": "atom", "RED": "atom", "DADD": "fp64",
            "DMUL": "fp64", "DFMA": "fp64", "FFMA": "ffma", "FFMA32I": "ffma", "FMUL": "fmul",
            "FMUL32I": "fmul", "FADD": "fadd", "FADD32I": "fadd", "CALL": "call",
            "HGMMA": "hgmma", "UTMALDG": "utmaldg",
            "UTMASTG": "utmastg", "SYNCS": "syncs", "USETMAXREG": "setmaxnreg",
            # programmatic dependent launch: griddepcontrol.wait and .launch_dependents
            "ACQBULK": "acqbulk", "PREEXIT": "preexit",
            "UTMACCTL": "utmacctl"}.get(op)


def _mnemonic(instruction: str) -> str:
    return _PREDICATE.sub("", instruction.strip()).split(" ", 1)[0]


def _width(mods: list[str]) -> int:
    """Access width in bits from the modifiers: .128, .64, .U16/.S16, .U8/.S8, else 32."""
    for mod in mods:
        if mod in ("128", "64"):
            return int(mod)
        if mod in ("U16", "S16", "16"):
            return 16
        if mod in ("U8", "S8", "8"):
            return 8
    return 32
