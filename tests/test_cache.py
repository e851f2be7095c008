"""The build cache every checkout shares (ablate/build/cache.py): where it lies, that two
checkouts of the same code (or two copies of a plugin) name a variant alike and find each
other's libraries instead of compiling them again, and `ablate cache` / `ablate cache clear`."""
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from omegaconf import OmegaConf

from ablate.build import cache, seams, triton_aot
from ablate.build.compile import build_dir_of, build, library_path
from ablate.job import plugins
from ablate.job.variant import variant_from_cfg
from conftest import kept_build_dir
from test_build import stand_in

ROOT = Path(__file__).resolve().parents[1]

def checkout(root: Path, build_dir: Path):
    """test_build's stand-in project under `root` (a kernel folder whose patch includes a
    header of the project outside it), built into `build_dir`: a checkout of the same code
    wherever `root` is."""
    p = stand_in(root)
    p.build_cfg.dir = str(build_dir)
    return SimpleNamespace(root=root, cfg=p.build_cfg, kernel=p.kernel, variants=[p.base, p.patched])


def test_the_cache_lies_in_the_users_cache_folder_unless_build_dir_says(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.root() == tmp_path / "xdg" / "ablate"
    assert build_dir_of(OmegaConf.create({"dir": None}), ROOT) == tmp_path / "xdg" / "ablate" / "build"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert build_dir_of(OmegaConf.create({"dir": None}), ROOT) == tmp_path / "home" / ".cache" / "ablate" / "build"
    assert build_dir_of(OmegaConf.create({"dir": "runs/build"}), ROOT) == ROOT / "runs" / "build"
    # the app's default is the cache
    assert OmegaConf.load(ROOT / "conf" / "config.yaml").build.dir is None


def test_a_second_checkout_finds_the_firsts_libraries_and_compiles_nothing(tmp_path, monkeypatch):
    shared = tmp_path / "cache"
    a = checkout(tmp_path / "a", shared)
    first = build(a.variants, a.cfg, a.kernel, a.root)
    assert all(r.ok and not r.cached for r in first.values()), first
    b = checkout(tmp_path / "b", shared)  # the same code, written later: its files are newer than a's libraries
    ran = []
    real = subprocess.run
    monkeypatch.setattr(subprocess, "run", lambda cmd, *a, **k: ran.append(cmd) or real(cmd, *a, **k))
    second = build(b.variants, b.cfg, b.kernel, b.root)
    assert all(r.ok and r.cached for r in second.values()), second
    assert {n: r.lib for n, r in second.items()} == {n: r.lib for n, r in first.items()}
    assert not [c for c in ran if "ninja" in str(c[0])], ran  # no ninja, so no nvcc
    # With one new variant beside them, ninja compiles it alone (by mtimes it would compile
    # every library whose sources this checkout has newer).
    mtimes = {n: r.lib.stat().st_mtime_ns for n, r in first.items()}
    new = variant_from_cfg({"q": {"macros": {"ABLATE_Q": 1}}}, b.kernel.dir)
    more = build([*b.variants, new], b.cfg, b.kernel, b.root)
    assert not more["q"].cached and all(more[n].cached for n in mtimes)
    assert {n: more[n].lib.stat().st_mtime_ns for n in mtimes} == mtimes
    # Another content is another library, built beside the first.
    (b.kernel.dir / "base" / "value.cuh").write_text("#define VALUE 2.0f\n")
    third = build(b.variants[:1], b.cfg, b.kernel, b.root)
    assert not third["none"].cached and third["none"].lib != first["none"].lib and first["none"].lib.exists()


def test_a_header_outside_what_is_hashed_still_rebuilds_when_it_changes(tmp_path):
    """The kept depfile holds what the name does not (here a header of the project outside the
    kernel's folder): its mtime still says when a library is stale, in any checkout."""
    p = checkout(tmp_path / "a", tmp_path / "cache")
    first = build(p.variants, p.cfg, p.kernel, p.root)
    deps = (tmp_path / "cache" / f"{first['p'].digest}.deps").read_text()
    assert "other/inner.h" in deps.split() and "value.cuh" not in deps and "tiny.cu" not in deps
    # Another checkout's copy of it: found when the same, compiled again when not.
    q = checkout(tmp_path / "b", tmp_path / "cache")
    assert all(r.cached for r in build(q.variants, q.cfg, q.kernel, q.root).values())
    (q.root / "other" / "inner.h").write_text("#define INNER 2\n")
    again = build(q.variants, q.cfg, q.kernel, q.root)
    assert again["none"].cached and not again["p"].cached
    # and the first checkout's, the library now the second's, is compiled again too
    assert not build(p.variants, p.cfg, p.kernel, p.root)["p"].cached


def test_two_copies_of_a_plugin_outside_the_checkout_share_their_libraries(tmp_path):
    from ablate.tools import new_kernel

    names = []
    for where in ("x", "y"):
        new_kernel.write("tiny_axpy", tmp_path / where)
        plugin = plugins.load("tiny_axpy", [tmp_path / where])
        cfg = OmegaConf.merge(OmegaConf.load(ROOT / "conf" / "config.yaml").build,
                              {"dir": str(tmp_path / "cache"), "arch": "sm_90"})
        names.append(library_path(variant_from_cfg({"none": None}, plugin.dir), cfg, plugin, ROOT))
    assert names[0] == names[1]


def test_the_generated_seams_header_is_named_by_its_text(tmp_path):
    """Checkouts sharing a build folder may hold two versions of a kernel: each compiles
    with its own seams header."""
    kernels = []
    for seam in ("A", "B"):
        folder = tmp_path / seam / "k"
        (folder / "base").mkdir(parents=True)
        (folder / "base" / "k.cu").write_text(f"#ifndef ABLATE_SEAM_{seam}\n#define ABLATE_SEAM_{seam} x\n#endif\n")
        kernels.append(SimpleNamespace(name="k", dir=folder, source=folder / "base" / "k.cu"))
    if not seams.declared(kernels[0]):
        kernels = [SimpleNamespace(**{**vars(k), "dir": k.dir}) for k in kernels]
    paths = [seams.write_header(k, tmp_path / "build") for k in kernels]
    assert None not in paths and paths[0] != paths[1], paths
    assert [p.read_text() for p in paths] == [seams.header(seams.declared(k)) for k in kernels]


def test_a_triton_builds_name_holds_the_plugins_content_not_its_folder(tmp_path):
    src = plugins.load("matmul_triton").dir
    digests = []
    for where in ("x", "y"):
        shutil.copytree(src, tmp_path / where / "matmul_triton", ignore=shutil.ignore_patterns("__pycache__"))
        kernel = SimpleNamespace(dir=tmp_path / where / "matmul_triton")
        digests.append(triton_aot.digest_of({"kernel_dir": str(kernel.dir), "meta": {"A": 1}}, kernel))
    assert digests[0] == digests[1]
    (tmp_path / "y" / "matmul_triton" / "spec.py").write_text("# changed\n", encoding="utf-8")
    assert triton_aot.digest_of({"kernel_dir": "y", "meta": {"A": 1}}, SimpleNamespace(dir=tmp_path / "y" / "matmul_triton")) != digests[0]


def test_ablate_cache_shows_its_size_and_clear_empties_it_keeping_the_locks(tmp_path, monkeypatch, capsys):
    from ablate.build.cache import main

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    folder = tmp_path / "ablate" / "build"
    (folder / "seams").mkdir(parents=True)
    (folder / "0123456789abcdef.so").write_bytes(b"x" * 2**20)
    (folder / "seams" / "k-0.h").write_text("h")
    (folder / ".lock").touch()
    assert main([]) == 0
    assert capsys.readouterr().out.strip() == f"{tmp_path / 'ablate'}: 1.0 MiB, 1 libraries"
    assert main(["clear"]) == 0
    assert "1.0 MiB freed" in capsys.readouterr().out
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")) == [".lock"]


def tracked_copy(dest: Path) -> Path:
    """The checkout's tracked files as they are now, copied under `dest` with new mtimes: a
    fresh clone of this tree."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        if (ROOT / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / rel, dest / rel)
    return dest


def static_sweep(root: Path, tmp_path: Path, cache_home: Path):
    env = {**os.environ, "XDG_CACHE_HOME": str(cache_home), "PYTHONPATH": str(root), "CUDA_VISIBLE_DEVICES": "",
           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    return subprocess.run([sys.executable, "-m", "ablate", "-m", "kernel=rmsnorm", "pathology=none,scalar_loads",
                           "mode=static", f"hydra.sweep.dir={tmp_path / 'multirun'}"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=1200)


def test_a_static_sweep_in_a_fresh_clone_finds_its_variants_in_the_cache(tmp_path):
    """The README's promise: a kernel built in one checkout is not compiled again in another."""
    cache_home = kept_build_dir("cache_home")  # the build cache of both, through XDG_CACHE_HOME
    here = static_sweep(ROOT, tmp_path / "here", cache_home)
    assert here.returncode == 0, here.stdout + here.stderr
    clone = tracked_copy(tmp_path / "clone")
    there = static_sweep(clone, tmp_path / "there", cache_home)
    out = there.stdout + there.stderr
    assert there.returncode == 0, out
    assert f"built 2 variants in" in out and f"(2 found in {cache_home / 'ablate' / 'build'}, 0 compiled)" in out, out


def test_make_clean_deletes_this_checkouts_builds_and_leaves_the_shared_cache(tmp_path):
    project = tmp_path / "checkout"
    (project / "runs" / "build").mkdir(parents=True)
    (project / "runs" / "build" / "0123456789abcdef.so").write_bytes(b"x")
    (project / "runs" / "mlflow.db").write_bytes(b"store")
    shutil.copy(ROOT / "Makefile", project / "Makefile")
    shared = tmp_path / "xdg" / "ablate" / "build" / "0123456789abcdef.so"
    shared.parent.mkdir(parents=True)
    shared.write_bytes(b"x")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    subprocess.run(["make", "-s", "clean"], cwd=project, env=env, check=True, capture_output=True)
    assert not (project / "runs" / "build").exists() and (project / "runs" / "mlflow.db").exists()
    assert shared.exists()
