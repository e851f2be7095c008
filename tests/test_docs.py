"""The README a newcomer reads in five minutes, and the guide behind it: the README short, its
set-up commands CI's, every link of it to a file or a heading that exists; the site (mkdocs.yml,
docs/) built strict where MkDocs is installed, its output git-ignored; the README's figure drawn
from figures the history still records."""
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import tool

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def github_slug(heading):
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_the_readme_is_short():
    lines = README.read_text().splitlines()
    assert len(lines) < 250, f"README.md has {len(lines)} lines: the detail belongs in docs/guide/"


def test_the_readmes_set_up_commands_are_the_ones_ci_runs():
    text = README.read_text()
    block = re.search(r"```sh\n(make install[^\n]*\nmake test[^\n]*)\n```", text)
    assert block, "the README's set-up block is `make install` then `make test`"
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^make install$", ci, re.M) and re.search(r"^make test ", ci, re.M)
    # and its first sweep without a GPU, as it prints it
    assert "`make static rank`" in text and re.search(r"^make static rank ", ci, re.M)
    # what the README says make install installs is what the Makefile runs
    extras = re.search(r"pip install -e '(\.\[[^\]]+\])'", block[1])[1]
    assert f"pip install -e '{extras}'" in (ROOT / "Makefile").read_text()


def test_every_link_of_the_readme_resolves():
    text = README.read_text()
    headings = {github_slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, re.M)}
    for target in LINK.findall(text):
        if re.match(r"[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        if not path:
            assert anchor in headings, f"README.md links to #{anchor}, which is no heading of it"
            continue
        assert (ROOT / path).exists(), f"README.md links to {path}, which does not exist"


def test_the_readme_reaches_the_five_things_on_its_first_screen():
    """What ablate does, how to install it, the first sweep, how to read it, your own kernel:
    each linked from the first 30 lines."""
    first = "\n".join(README.read_text().splitlines()[:30])
    for anchor in ("#install-two-commands", "#the-first-sweep", "#reading-the-result", "#bring-your-own-kernel"):
        assert f"({anchor})" in first, anchor


def test_the_sites_output_is_ignored():
    site = re.search(r"^site_dir:\s*(\S+)", (ROOT / "mkdocs.yml").read_text(), re.M)[1]
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    check = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", f"{site}/index.html"])
    assert check.returncode == 0, f"{site}/ is not git-ignored"


def test_the_site_builds_strict(tmp_path):
    """`make docs` as CI runs it: a broken link, a missing anchor or a page left out of the nav
    is a warning, and strict mode fails on it (.ci/run builds it too)."""
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        pytest.skip("MkDocs and its Material theme are not installed (pip install -e '.[docs]')")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "site" / "index.html").exists()


def test_the_readmes_figure_is_drawn_from_recorded_figures():
    """tools/plot_recorded_sweep.py draws the README's figure from the history's figures: each
    must still be there, word for word (the script refuses otherwise)."""
    assert (ROOT / "docs" / "img" / "attention-s512-h100.png").exists()
    module = tool("plot_recorded_sweep")
    ranked = module.ranked_table()
    assert len(ranked) == 13 and set(ranked["significant"]) == {"yes", "no"}
    assert ranked.loc[ranked["pathology"] == "none", "significant"].item() == "no"


def test_the_tools_point_to_pages_that_exist():
    """`ablate --help` and `ablate new-kernel` name guide pages: they must be there."""
    from ablate.tools import new_kernel

    assert all(g.is_file() for g in new_kernel.GUIDES.values())
    text = (ROOT / "conf" / "config.yaml").read_text()
    for page in re.findall(r"docs/[\w/-]+\.md", text):
        assert (ROOT / page).is_file(), page

