"""A kernel's seams, declared once in its base and read from there.

A base declares each seam where it gives the base's choice:

    #ifndef ABLATE_SEAM_SMEM_LAYOUT     // shared-memory addressing
    #define ABLATE_SEAM_SMEM_LAYOUT SwizzledLayout
    #endif

and a patch replaces it by defining the macro first (ablate/job/variant.py reads which). From
the declarations, `header` writes ABLATE_SEAMS_JSON, force-included ahead of everything in
every build of the kernel: the variant info's `"seams"` object, each seam's macro expanded
where the base uses it (`ablate_variant_info()`), after patches and defaults have had their
say. So the library reports what was compiled, and static mode holds each pathology's patch
to the seam it says it replaces (ablate/pipeline.py).
"""
import hashlib
import re
from pathlib import Path

DECLARE = re.compile(r"^[ \t]*#[ \t]*ifndef[ \t]+ABLATE_SEAM_([A-Z0-9_]+)\b[^\n]*\n"
                     r"[ \t]*#[ \t]*define[ \t]+ABLATE_SEAM_\1\b", re.M)
SUFFIXES = (".cu", ".cuh", ".h", ".hpp")


def declared(kernel) -> list[str]:
    """The seams a kernel's base declares, lower-case, in the order of its sources (the
    translation unit first)."""
    source = Path(kernel.source).resolve()
    base = Path(kernel.dir).resolve() / "base"
    files = [source, *sorted(p for p in base.rglob("*") if p.suffix in SUFFIXES and p.resolve() != source)]
    names = []
    for path in files:
        for name in DECLARE.findall(path.read_text(errors="replace")):
            if name.lower() not in names:
                names.append(name.lower())
    return names


def header(names) -> str:
    """The text of the generated header for these seams."""
    fields = ' ", " '.join(f'"\\"{n}\\": \\"" ABLATE_SEAM_STR(ABLATE_SEAM_{n.upper()}) "\\""' for n in names)
    return ("// Written by ablate.build.seams from the seams the base declares; rewritten on every build.\n"
            "#pragma once\n"
            "#define ABLATE_SEAM_STR_(...) #__VA_ARGS__\n"
            "#define ABLATE_SEAM_STR(...) ABLATE_SEAM_STR_(__VA_ARGS__)\n"
            f"#define ABLATE_SEAMS_JSON \"{{\" {fields} \"}}\"\n")


def write_header(kernel, folder: Path) -> Path | None:
    """The kernel's generated header in `folder` (written when its text changed), or None
    when the base declares no seam."""
    names = declared(kernel)
    if not names:
        return None
    text = header(names)
    # Named by its text too: checkouts sharing a build folder (the build cache) may hold
    # different versions of a kernel, each compiled with its own header.
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    path = Path(folder) / "seams" / f"{getattr(kernel, 'name', Path(kernel.dir).name)}-{digest}.h"
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text)
        tmp.replace(path)
    return path


def changed(base_info: dict, variant_info: dict) -> set[str] | None:
    """The seams whose type differs between two libraries' variant info, or None when
    either does not report its seams."""
    a, b = base_info.get("seams"), variant_info.get("seams")
    if not isinstance(a, dict) or not isinstance(b, dict):
        return None
    return {s for s in set(a) | set(b) if a.get(s) != b.get(s)}
