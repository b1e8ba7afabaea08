"""The layers docs/extending.md describes ("Where things live") hold in the code. The analysis knows nothing about
torch: it reads records (bench.rundir) and the catalog, never the engine, the optimizers, the data, the models or
the sweep that make runs, nor the commands above it. The run directory's module and the catalog stay below both
engine and analysis.

Each rule is checked on the source (every import, at the top of a module or inside a function, and every
importlib.import_module of a constant name) and, for the analysis, in a fresh interpreter that imports every one
of its modules (what they import in turn)."""

import ast
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import bench

ROOT = Path(bench.__file__).parent
TORCH = ("torch", "torchvision", "timm", "nvidia.dali", "triton")
RUNNER = ("bench.engine", "bench.optim", "bench.data", "bench.models", "bench.sweep", "bench.suite")
COMMANDS = ("bench.cli", "bench.commands", "bench.api", "bench.perf")
# file or folder under bench/ -> the modules it may not import
RULES = {
    "analysis": TORCH + RUNNER + COMMANDS,
    "rundir.py": ("bench.engine", "bench.analysis", "bench.sweep", "bench.suite") + COMMANDS,
    "catalog.py": TORCH + RUNNER + ("bench.analysis", "bench.rundir") + COMMANDS,
}


def _module(path: Path, top: Path) -> str:
    parts = path.relative_to(top).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, top: Path = ROOT.parent) -> dict[str, int]:
    """The modules a source file under `top` imports (name -> line), wherever the import stands: `from a import b`
    counts as a and a.b (b may be a module); relative imports are resolved."""
    module = _module(path, top)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = {}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update({alias.name: node.lineno for alias in node.names})
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            found[base] = node.lineno
            found.update({f"{base}.{alias.name}": node.lineno for alias in node.names})
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) in ("import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found[node.args[0].value] = node.lineno
    return found


def _within(name: str, packages) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def _sources(place: str) -> list[Path]:
    path = ROOT / place
    return sorted(path.rglob("*.py")) if path.is_dir() else [path]


@pytest.mark.parametrize("place", sorted(RULES))
def test_no_module_imports_across_its_layer(place):
    crossings = [
        f"{path.relative_to(ROOT.parent)}:{line} imports {name}"
        for path in _sources(place)
        for name, line in imported(path).items()
        if _within(name, RULES[place])
    ]
    assert crossings == []


def test_the_scan_sees_imports_inside_functions_and_relative_ones(tmp_path):
    """The rule's own check: a lazy import, a relative one and an import_module are each found."""
    source = tmp_path / "bench" / "analysis" / "probe.py"
    source.parent.mkdir(parents=True)
    source.write_text(
        "import importlib\n"
        "def f():\n    from bench.engine import checkpoint\n"
        "def g():\n    from ..optim import factory\n"
        "def h():\n    return importlib.import_module('torch')\n"
    )
    names = imported(source, tmp_path)
    assert {"bench.engine.checkpoint", "bench.optim.factory", "torch"} <= set(names)


FRESH = """
import importlib, json, pkgutil, sys
import bench.analysis
for info in pkgutil.walk_packages(bench.analysis.__path__, "bench.analysis."):
    importlib.import_module(info.name)
print(json.dumps(sorted(sys.modules)))
"""


def test_importing_every_analysis_module_loads_nothing_of_the_runner_side():
    modules = [info.name for info in pkgutil.walk_packages([str(ROOT / "analysis")], "bench.analysis.")]
    assert len(modules) > 10  # every module of the package, not none
    done = subprocess.run([sys.executable, "-c", FRESH], capture_output=True, text=True, cwd=ROOT.parent)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.splitlines()[-1])
    assert set(modules) <= set(loaded)
    assert [m for m in loaded if _within(m, TORCH + RUNNER + COMMANDS)] == []
