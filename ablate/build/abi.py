"""A kernel's C ABI read from its own source: the `extern "C"` prototype of spec.SYMBOL.

A thin spec repeats no ctypes list: the parameters' types and names are the header's, and a
parameter is bound by its name (ablate/job/thin.py): a pointer names a tensor, a scalar a
shape field (or a formula of the spec's PARAMS), and a `cudaStream_t` (or a pointer named
`stream`) is the stream ablate launches on. What ctypes cannot pass by value (a struct, a
`__half`, a reference) is an AbiError naming the parameter.

Only declarations are read, never preprocessed: a prototype behind a macro is not found,
and the spec then names its ARGTYPES itself. Needs no torch and no GPU.
"""
import ctypes
import re
from dataclasses import dataclass
from pathlib import Path

# Scalar C types ctypes passes by value, by their words (qualifiers and `signed` dropped).
SCALARS = {
    "int": ctypes.c_int, "unsigned": ctypes.c_uint, "unsigned int": ctypes.c_uint,
    "short": ctypes.c_short, "unsigned short": ctypes.c_ushort,
    "long": ctypes.c_long, "long int": ctypes.c_long, "unsigned long": ctypes.c_ulong,
    "long long": ctypes.c_longlong, "long long int": ctypes.c_longlong,
    "unsigned long long": ctypes.c_ulonglong,
    "int32_t": ctypes.c_int32, "uint32_t": ctypes.c_uint32, "int64_t": ctypes.c_int64,
    "uint64_t": ctypes.c_uint64, "size_t": ctypes.c_size_t, "ptrdiff_t": ctypes.c_ssize_t,
    "ssize_t": ctypes.c_ssize_t, "float": ctypes.c_float, "double": ctypes.c_double,
    "bool": ctypes.c_bool, "_Bool": ctypes.c_bool, "char": ctypes.c_char,
}
STREAMS = ("cudaStream_t", "CUstream")
RETURNS = {"int": ctypes.c_int, "cudaError_t": ctypes.c_int, "void": None}
SOURCES = ("*.h", "*.hpp", "*.cuh", "*.cu", "*.cpp", "*.cc")
_QUALIFIERS = re.compile(r"\b(const|volatile|signed|__restrict__|__restrict|restrict|struct)\b")


class AbiError(ValueError):
    """A prototype that is missing, or that ctypes cannot call: the message names the
    parameter (or the files looked in)."""


@dataclass(frozen=True)
class Param:
    name: str
    c_type: str  # its type as written, qualifiers and all
    kind: str  # "pointer" | "scalar" | "stream"
    ctype: type  # its ctypes type

    def fits(self, value) -> bool:
        """Whether a Python value is what this parameter holds, without truncation."""
        if self.kind != "scalar" or self.ctype in (ctypes.c_float, ctypes.c_double, ctypes.c_bool):
            return True
        if self.ctype is ctypes.c_char:
            return isinstance(value, (bytes, int))
        bits = 8 * ctypes.sizeof(self.ctype)
        signed = self.ctype(-1).value == -1
        lo, hi = (-(1 << bits - 1), (1 << bits - 1) - 1) if signed else (0, (1 << bits) - 1)
        return isinstance(value, int) and lo <= value <= hi


@dataclass(frozen=True)
class Prototype:
    symbol: str
    restype: object  # ctypes.c_int (an int or cudaError_t), or None (void)
    params: tuple[Param, ...]
    where: str  # the file it was read from

    @property
    def argtypes(self) -> list:
        return [p.ctype for p in self.params]

    def __str__(self):
        return f"{self.symbol}({', '.join(f'{p.c_type} {p.name}' for p in self.params)}) in {self.where}"


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def _extern_c_spans(text):
    """(start, end) of every `extern "C" { ... }` block of a comment-free text."""
    spans = []
    for m in re.finditer(r'extern\s+"C"\s*\{', text):
        depth, i = 1, m.end()
        while depth and i < len(text):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        spans.append((m.start(), i))
    return spans


def find_declaration(text: str, symbol: str):
    """(return type, parameter text) of `symbol`'s extern "C" declaration or definition in a
    comment-free text, or None."""
    spans = _extern_c_spans(text)
    pattern = re.compile(r'((?:extern\s+"C"\s+)?)([A-Za-z_][\w\s]*?)\s*\b' + re.escape(symbol) + r"\s*\(")
    for m in pattern.finditer(text):
        depth, i = 1, m.end()
        while depth and i < len(text):
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        if not (m.group(1) or any(a <= m.start() < b for a, b in spans)):
            continue
        words = [w for w in m.group(2).split() if w not in ("static", "inline", "__host__", "extern")]
        return " ".join(words[-1:]) if words else "", text[m.end():i - 1]
    return None


def parse_params(symbol: str, text: str, where: str = "") -> tuple[Param, ...]:
    """The parameters of a prototype's parameter text; AbiError naming one ctypes cannot pass."""
    text = text.strip()
    if text in ("", "void"):
        return ()
    params = []
    for i, raw in enumerate(split_top(text)):
        decl = raw.split("=", 1)[0].strip()  # a C++ default argument
        if "&" in decl or "..." in decl:
            raise AbiError(f"{symbol}: parameter {i + 1} `{raw.strip()}` ({where}): references and "
                           "varargs cannot be called through ctypes; take a pointer")
        array = decl.endswith("]")
        decl = re.sub(r"\[[^\]]*\]\s*$", "", decl).strip()
        m = re.match(r"^(.*?)([A-Za-z_]\w*)$", decl)
        type_text = m.group(1) if m else ""
        if not m or not type_text.replace("*", "").strip():
            raise AbiError(f"{symbol}: parameter {i + 1} `{raw.strip()}` ({where}) has no name; "
                           "ablate binds parameters by name: name it in the prototype")
        name = m.group(2)
        pointer = array or "*" in type_text
        c_type = " ".join(type_text.split()) + ("*" if array else "")
        base = " ".join(_QUALIFIERS.sub(" ", type_text.replace("*", " ")).split())
        if pointer:
            params.append(Param(name, c_type, "stream" if name == "stream" else "pointer", ctypes.c_void_p))
        elif base in STREAMS:
            params.append(Param(name, c_type, "stream", ctypes.c_void_p))
        elif base in SCALARS:
            params.append(Param(name, c_type, "scalar", SCALARS[base]))
        else:
            raise AbiError(f"{symbol}: parameter {name!r} has type `{base}` ({where}), which ctypes "
                           f"cannot pass by value; supported: pointers, {', '.join(STREAMS)}, "
                           f"{', '.join(sorted(SCALARS))} (or name spec.ARGTYPES and arguments)")
    return tuple(params)


def split_top(text, opening="([<", closing=")]>"):
    """Split at the commas outside parentheses, brackets and (by default) template angles."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        depth += c in opening
        depth -= c in closing
        if c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return [*parts, text[start:]]


def read_prototype(folder, symbol: str, files=None) -> Prototype:
    """`symbol`'s extern "C" prototype from the plugin's sources: `files` (relative to
    `folder`) when given, else every C/C++/CUDA source under the folder, headers first.
    AbiError when none declares it, or it is not a function ctypes can call."""
    folder = Path(folder)
    if files:
        paths = [folder / f for f in files]
    else:
        paths = [p for pattern in SOURCES for p in sorted(folder.rglob(pattern))]
    for path in paths:
        if not path.is_file():
            raise AbiError(f"{symbol}: {path} is not a file")
        found = find_declaration(strip_comments(path.read_text(errors="replace")), symbol)
        if found is None:
            continue
        ret, params = found
        where = str(path.relative_to(folder)) if path.is_relative_to(folder) else str(path)
        if ret not in RETURNS:
            raise AbiError(f"{symbol} returns `{ret}` ({where}); ablate calls a function returning "
                           "int or cudaError_t (the launch's error), or void")
        return Prototype(symbol, RETURNS[ret], parse_params(symbol, params, where), where)
    looked = ", ".join(str(p.relative_to(folder)) for p in paths) or f"no source under {folder}"
    raise AbiError(f'no extern "C" prototype of {symbol} in {looked}: declare it '
                   f'(extern "C" int {symbol}(...);) or name spec.ARGTYPES and arguments')
