"""`python -m ablate.tools.new_kernel NAME [DIR]`: write a minimal kernel plugin that sweeps as it is.

    python -m ablate.tools.new_kernel my_kernel              # kernels/my_kernel/ of this project
    python -m ablate.tools.new_kernel my_kernel ~/kernels    # ~/kernels/my_kernel/, then
    python -m ablate -m kernel=my_kernel kernel_path=[~/kernels] 'pathology=glob(*)'
    python -m ablate.tools.new_kernel my_kernel --kind cute  # the same kernel in CuTe DSL

The plugin (the layout of ablate/job/plugins.py) holds an elementwise kernel, out = a * x + y in
FP32 with 16-byte loads, one pathology (scalar_loads: 4-byte loads) and one shape, from the
templates in ablate/tools/scaffold/ with @NAME@ replaced (`--kind cute`: a CuTe DSL kernel, a
@cute.jit function whose vector width is a Constexpr the pathology overrides, from
ablate/tools/scaffold_cute/). It refuses to overwrite anything.
"""
import argparse
import re
import sys
from pathlib import Path

from ablate.job import plugins
from ablate.paths import ROOT

TEMPLATES = {"cuda": Path(__file__).resolve().parent / "scaffold",
             "cute": Path(__file__).resolve().parent / "scaffold_cute"}
NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
GUIDES = {"cuda": ROOT / "docs" / "guide" / "own-kernel" / "index.md",  # making the scaffold yours, step by step
          "cute": ROOT / "docs" / "guide" / "own-kernel" / "cute.md"}


def write(name: str, parent: Path, kind: str = "cuda") -> Path:
    """Write the plugin `name` under `parent` and return its folder; ValueError when the name
    is not a plain identifier, is taken, or the folder exists."""
    if not NAME_RE.match(name):
        raise ValueError(f"kernel name {name!r} must match {NAME_RE.pattern} (it names a C function)")
    folder = parent.expanduser().resolve() / name
    if folder.exists():
        raise ValueError(f"{folder} already exists; nothing was written")
    taken = plugins.available([parent.expanduser()] if parent.expanduser().is_dir() else [])
    if name in taken:
        raise ValueError(f"a kernel {name!r} already exists at {taken[name]}; nothing was written")
    if kind not in TEMPLATES:
        raise ValueError(f"kind {kind!r} must be one of {', '.join(TEMPLATES)}")
    for template in sorted(TEMPLATES[kind].rglob("*.in")):
        target = folder / template.relative_to(TEMPLATES[kind]).with_suffix("")
        target = target.with_name(target.name.replace("@NAME@", name))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(template.read_text().replace("@NAME@", name))
    return folder


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m ablate.tools.new_kernel", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", help="the kernel's name: lower case, digits and _ (a C identifier)")
    p.add_argument("dir", nargs="?", default=str(plugins.KERNELS),
                   help="the folder to write the plugin in (default: this project's kernels/)")
    p.add_argument("--kind", choices=sorted(TEMPLATES), default="cuda",
                   help="cuda (default: a .cu file behind a C ABI) or cute (a CuTe DSL @cute.jit function)")
    args = p.parse_args(argv)
    try:
        folder = write(args.name, Path(args.dir), args.kind)
    except ValueError as e:
        print(f"new_kernel: {e}", file=sys.stderr)
        return 1
    where = "" if folder.parent == plugins.KERNELS else f" kernel_path=[{folder.parent}]"
    print(f"wrote {folder}:\n" + "\n".join(f"  {p.relative_to(folder)}" for p in sorted(folder.rglob("*")) if p.is_file()))
    print(f"\nsweep it:  python -m ablate -m kernel={args.name}{where} 'pathology=glob(*)'"
          f"\n(or without a GPU, add mode=static); then: make rank"
          f"\nmake it yours (the base, seams, spec, pathologies, shapes): {GUIDES[args.kind]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
