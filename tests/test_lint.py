"""The project's lint and format rules (pyproject.toml [tool.ruff]) hold: the README's test command, and so CI,
fails on a lint or format error."""

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUFF = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")


@pytest.mark.skipif(RUFF is None, reason="ruff is not installed (./setup.sh installs it with the test extra)")
@pytest.mark.parametrize("command", [["check"], ["format", "--check"]], ids=["lint", "format"])
def test_ruff(command):
    done = subprocess.run([RUFF, *command, "bench", "tests", "tools"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


# Imports go at the top of the module, except those of a heavy module, which stay in the function that needs them
# so that light commands (`bench --help`, `bench --version`, `bench table`) do not load torch and its like.
# A package is heavy when importing it costs a light command a noticeable time: cumulative
# `python -X importtime -c "import X"` on a 2-core machine (one thread), over ~20 ms; a bench module is heavy when
# its module-level imports reach one (computed below).
HEAVY = (
    "torch",  # 3.0 s
    "torchvision",  # 6.8 s (imports torch)
    "timm",  # 9.1 s (imports torch)
    "triton",  # 0.34 s
    "nvidia",  # nvidia.dali: 1.0 s
    "wandb",  # 1.4 s
    "sklearn",  # sklearn.datasets: 2.8 s
    "pandas",  # 1.1 s
    "matplotlib",  # matplotlib.pyplot: 1.2 s
    "scipy",  # 0.18 s; scipy.stats 1.8 s
    "pyarrow",  # pyarrow.parquet: 0.39 s
    "huggingface_hub",  # huggingface_hub.file_download (try_to_load_from_cache): 0.34 s
    "numpy",  # 0.14 s
    "tqdm",  # 0.13 s
    "pydantic",  # 0.11 s
    "PIL",  # PIL.Image: 35 ms
    "yaml",  # 21-29 ms
    "unittest",  # unittest.mock: 85 ms (it imports asyncio); the one standard-library module here
)
BENCH = ROOT / "bench"


def _module_name(path):
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(node, module, is_package):
    """The modules an Import/ImportFrom node names (a `from x import y` names x.y too: y may be a submodule)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - node.level + 1]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module
    return [source] + [f"{source}.{alias.name}" for alias in node.names]


def _targets(node, module, is_package, modules):
    """What each name of an import loads, a tuple of modules per name: `from bench import catalog` bench.catalog,
    `from x import f` x, and a name a bench module makes lazily (in its module `__getattr__`, as bench.data's
    `build`) the modules that `__getattr__` imports (bench.data.pipeline)."""
    source, *names = _imported(node, module, is_package)
    if isinstance(node, ast.Import):
        return [(name,) for name in [source, *names]]
    return [(name,) if name in modules else _lazy(source, name.rpartition(".")[2], modules) for name in names]


def _lazy(source, name, modules):
    """The modules `from source import name` loads: source, and where source's module `__getattr__` makes the name,
    the modules it imports."""
    if source not in modules:
        return (source,)
    tree, is_package = modules[source]
    getattr_ = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "__getattr__"), None)
    bound = {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    bound |= {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    bound |= {(a.asname or a.name).split(".")[0] for n in _top_level_imports(tree) for a in n.names}
    if getattr_ is None or name in bound:
        return (source,)
    made = [n for n in ast.walk(getattr_) if isinstance(n, (ast.Import, ast.ImportFrom))]
    return (source, *(t for n in made for targets in _targets(n, source, is_package, modules) for t in targets))


def _bench_modules():
    """{module name: (its ast, whether it is a package)} for every module of bench/."""
    return {_module_name(p): (ast.parse(p.read_text(), str(p)), p.name == "__init__.py") for p in BENCH.rglob("*.py")}


def _top_level_imports(tree):
    """The Import/ImportFrom nodes that run when the module is imported: outside functions and `if TYPE_CHECKING:`."""
    found = []

    def walk(node):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                walk(ast.Module(body=child.orelse, type_ignores=[]))
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append(child)
            walk(child)

    walk(tree)
    return found


def _heavy_modules(modules):
    """The bench modules whose import (their module-level imports and their packages', transitively) loads HEAVY."""

    def own(name):  # the bench modules and third-party packages importing `name` runs directly
        tree, is_package = modules[name]
        out = set()
        parents = name.split(".")
        out |= {".".join(parents[:i]) for i in range(1, len(parents))}
        for node in _top_level_imports(tree):
            for target in _imported(node, name, is_package):
                parts = target.split(".")
                out |= {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
        return {m for m in out if m in modules or m.split(".")[0] in HEAVY}

    direct = {name: own(name) for name in modules}
    heavy = set()
    changed = True
    while changed:
        changed = False
        for name, targets in direct.items():
            if name not in heavy and any(t in heavy or t.split(".")[0] in HEAVY for t in targets):
                heavy.add(name)
                changed = True
    return heavy


def test_imports_at_the_top_unless_heavy():
    """An import inside a function is of a heavy module (a HEAVY package, or a bench module that loads one): every
    other import is at the top of its module, where its dependency shows."""
    modules = _bench_modules()
    heavy = _heavy_modules(modules)
    assert "bench.engine.train" in heavy and "bench.errors" not in heavy  # the computation sees torch
    found = []
    for name, (tree, is_package) in sorted(modules.items()):
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                if not isinstance(node, (ast.Import, ast.ImportFrom)):
                    continue
                for targets in _targets(node, name, is_package, modules):
                    if not any(t in heavy or t.split(".")[0] in HEAVY for t in targets):
                        found.append(f"{name}:{node.lineno} {targets[0]} (in {function.name})")
    found = sorted(set(found))
    assert not found, "imports of light modules inside functions (move them to the top):\n" + "\n".join(found)
