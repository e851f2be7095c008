"""The package's structure as the data flows: ablate/ in packages by stage (job, build, gpu,
sweep, report, tools), with no import cycle between modules nor between stages, and a job
worked out in one place."""
import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ablate"
STAGES = ("job", "build", "gpu", "sweep", "report", "tools")


def module_of(path):
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports():
    """{module: the ablate modules it imports}, imports inside functions included."""
    modules = {module_of(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name.startswith("ablate")}
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ablate"):
                for a in node.names:  # `from ablate.job import plugins` imports the module ablate.job.plugins
                    sub = f"{node.module}.{a.name}"
                    found.add(sub if sub in modules else node.module)
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


def cycle(graph):
    """One cycle of the graph as a list of nodes, or None."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def stage(module):
    parts = module.split(".")
    return parts[1] if len(parts) > 2 and parts[1] in STAGES else module


def test_no_import_cycle_between_modules():
    assert cycle(imports()) is None, " -> ".join(cycle(imports()))


def test_no_import_cycle_between_stages():
    graph = {}
    for module, targets in imports().items():
        graph.setdefault(stage(module), set()).update(stage(t) for t in targets if stage(t) != stage(module))
    assert cycle(graph) is None, " -> ".join(cycle(graph))


def test_the_cycle_finder_finds_one():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None


def test_every_module_lies_in_a_stage():
    loose = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert loose == ["__init__.py", "__main__.py", "paths.py", "pipeline.py"], loose
    # ablate/workloads: models that users name by module path (in situ, ablate/gpu/insitu.py); no stage
    assert sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()) == sorted(
        (*STAGES, "workloads"))
    assert not any(t.startswith("ablate.") for m, ts in imports().items() if m.startswith("ablate.workloads")
                   for t in ts), "a workload is the user's model code: it imports nothing of ablate's stages"


def test_a_variant_is_made_from_config_in_one_place():
    """Stages receive the Job; none turns a pathology config into a variant again, nor finds
    a kernel's folder again, beyond job.py (and the plugin loader's own lookup)."""
    calls = {}
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        for name in ("variant_from_cfg", "load_dir"):
            n = len(re.findall(rf"(?<!def ){name}\(", text))
            if n:
                calls.setdefault(name, {})[module_of(path)] = n
    assert calls["variant_from_cfg"] == {"ablate.job.job": 1}
    assert calls["load_dir"] == {"ablate.job.job": 1, "ablate.job.plugins": 1}


def test_rank_is_the_reports_only_reader_of_the_store():
    """Reports read MLflow in one place (report/rank.py) and hand the rest what it read."""
    readers = sorted(module_of(p) for p in (PACKAGE / "report").glob("*.py") if "mlflow" in p.read_text())
    assert readers == ["ablate.report.rank"], readers


def test_the_readmes_virtual_environment_is_ignored():
    """The README suggests `python3 -m venv .venv` in the checkout: git must not see it."""
    import shutil
    import subprocess

    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    assert "python3 -m venv .venv" in (ROOT / "README.md").read_text()
    check = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", ".venv/bin/python"])
    assert check.returncode == 0
