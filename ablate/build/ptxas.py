"""Parse nvcc's `-Xptxas -v` report: registers, shared memory, stack and spills per kernel.

ptxas prints, for each entry function:

    ptxas info    : Compiling entry function '_Z...' for 'sm_90'
    ptxas info    : Function properties for _Z...
        24 bytes stack frame, 36 bytes spill stores, 40 bytes spill loads
    ptxas info    : Used 255 registers, used 1 barriers, 2048 bytes smem, ...

The fields of the last line vary with the CUDA version, so each is read by its own pattern.
"""
import re
import shutil
import subprocess

_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PROPERTIES = re.compile(r"Function properties for (\S+)")
_FIELDS = {
    "registers": re.compile(r"Used (\d+) registers"),
    "barriers": re.compile(r"used (\d+) barriers"),
    "smem_bytes": re.compile(r"(\d+) bytes smem"),
    "stack_bytes": re.compile(r"(\d+) bytes stack frame"),
    "spill_store_bytes": re.compile(r"(\d+) bytes spill stores"),
    "spill_load_bytes": re.compile(r"(\d+) bytes spill loads"),
}


def parse(log: str, demangle_names: bool = True) -> dict:
    """`{"kernels": {name: {registers, barriers, smem_bytes, stack_bytes, spill_store_bytes,
    spill_load_bytes}}, "max_registers": int, "spill_bytes": int}` from a compiler log.

    Only entry functions (kernels) are listed; ptxas reports a non-inlined device function
    under its own name, and its spills count in `spill_bytes` too. Names are demangled when
    c++filt is available."""
    kernels: dict[str, dict[str, int]] = {}
    device_functions: dict[str, dict[str, int]] = {}
    current = None  # the fields the next property lines belong to
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            current = kernels.setdefault(m.group(1), dict.fromkeys(_FIELDS, 0))
        elif m := _PROPERTIES.search(line):
            name = m.group(1)
            current = kernels.get(name) or device_functions.setdefault(
                name, dict.fromkeys(_FIELDS, 0))
        elif current is not None:
            for key, pattern in _FIELDS.items():
                if m := pattern.search(line):
                    current[key] = int(m.group(1))

    if demangle_names:
        readable = demangle(list(kernels))
        kernels = {readable[name]: fields for name, fields in kernels.items()}
    functions = list(kernels.values()) + list(device_functions.values())
    return {
        "kernels": kernels,
        "max_registers": max((k["registers"] for k in kernels.values()), default=0),
        "spill_bytes": sum(f["spill_store_bytes"] + f["spill_load_bytes"] for f in functions),
    }


def demangle(names: list[str]) -> dict[str, str]:
    """Mangled -> readable C++ names, one c++filt call for all; names kept when it's absent."""
    tool = shutil.which("c++filt")
    if not names or tool is None:
        return {name: name for name in names}
    out = subprocess.run([tool], input="\n".join(names) + "\n", capture_output=True,
                         text=True, check=False).stdout.splitlines()
    if len(out) != len(names):
        return {name: name for name in names}
    return dict(zip(names, out))
