import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.cli import main

RECIPES = Path(__file__).resolve().parents[1] / "recipes"


@pytest.fixture(autouse=True)
def _torch_threads_restored():
    """Commands run in-process (bench perf --threads) set torch's thread count; the next test gets it back,
    so its numbers do not depend on which tests ran before it."""
    import torch

    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _kron_eager(monkeypatch):
    """timm's Kron compiles its preconditioner updates (torch.compile): minutes per shape on a loaded 2-core CPU.
    Tests run them eagerly, bench's optimizer and the library's alike (the same functions); a subprocess run gets
    the same through tests/kron_eager.py."""
    monkeypatch.setattr("timm.optim.kron.has_dynamo", False)


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    """Generated datasets go to a per-test cache, never the user's."""
    monkeypatch.setenv("BENCH_CACHE", str(tmp_path / "cache"))


@pytest.fixture(scope="session")
def tiny_dataset(tmp_path_factory) -> Path:
    """A small generated ImageNet-layout folder: 4 classes, 40 train / 10 val images each."""
    root = tmp_path_factory.mktemp("data") / "tiny"
    assert (
        main(
            [
                "data",
                "synth",
                "--out",
                str(root),
                "--classes",
                "4",
                "--train-per-class",
                "40",
                "--val-per-class",
                "10",
                "--size",
                "40",
                "--seed",
                "3",
            ]
        )
        == 0
    )
    return root


def write_recipe(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`bench ARGS` in a subprocess, as a user runs it (exit code, stdout, stderr)."""
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    return subprocess.run([sys.executable, "-m", "bench", *args], capture_output=True, text=True, cwd=cwd, env=env)
