"""The install: DALI as one extra per CUDA flavour, and setup.sh choosing exactly one from the driver or BENCH_CUDA."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib", reason="Python 3.11's tomllib reads pyproject.toml")

ROOT = Path(__file__).parents[1]


def test_the_metadata_offers_dali_for_cuda_12_and_13_and_installs_neither_by_itself():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert extras["dali-cuda12"] == ["nvidia-dali-cuda120>=1.40"]
    assert extras["dali-cuda13"] == ["nvidia-dali-cuda130>=1.40"]
    dali = [
        (where, dep)
        for where, deps in [("dependencies", project["dependencies"]), *extras.items()]
        for dep in deps
        if dep.startswith("nvidia-dali")
    ]
    assert dali == [("dali-cuda12", extras["dali-cuda12"][0]), ("dali-cuda13", extras["dali-cuda13"][0])]


@pytest.mark.parametrize(
    "cuda,driver,dali,torch_index",
    [
        (None, None, "dali-cuda13", False),  # no GPU (this machine): as before the choice existed
        (None, "12.4", "dali-cuda12", True),
        (None, "13.0", "dali-cuda13", False),
        ("12", "13.0", "dali-cuda12", True),  # the variable wins over the driver
        ("cpu", None, "dali-cuda13", False),
    ],
)
def test_setup_installs_one_dali_for_the_driver_or_bench_cuda(tmp_path, cuda, driver, dali, torch_index):
    """setup.sh in a copy, with a stand-in python that logs what pip is asked, and nvidia-smi reporting `driver`."""
    shutil.copy(ROOT / "setup.sh", tmp_path / "setup.sh")
    bin_ = tmp_path / "bin"
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    bin_.mkdir()
    python = tmp_path / ".venv" / "bin" / "python"
    python.write_text(f'#!/bin/sh\necho "$*" >> {tmp_path}/pip.log\n')
    if driver:
        (bin_ / "nvidia-smi").write_text(
            f'#!/bin/sh\necho "| NVIDIA-SMI 580.65  Driver Version: 580.65  CUDA Version: {driver}  |"\n'
        )
    for tool in (python, *bin_.iterdir()):
        tool.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "BENCH_CUDA"} | {"PATH": f"{bin_}:/usr/bin:/bin"}
    env |= {"BENCH_CUDA": cuda} if cuda else {}
    done = subprocess.run(["bash", str(tmp_path / "setup.sh")], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    installs = [line for line in (tmp_path / "pip.log").read_text().splitlines() if "torch==" in line]
    assert sum("dali-cuda" in line for line in installs) == 1 and f",{dali}]" in installs[-1]
    assert all("torch==2.14.1 torchvision==0.29.1" in line for line in installs)
    assert ("download.pytorch.org/whl/cu12" in installs[0]) == torch_index
    assert "fused.prebuild()" in (tmp_path / "pip.log").read_text()  # the CPU kernels built at setup
    steps = [line for line in done.stdout.splitlines() if line.startswith("setup.sh: ")]  # what the quiet minutes do
    assert [line.split()[1] for line in steps] == ["CUDA", "installing", "compiling", "ready:"]


def test_setup_refuses_a_cuda_it_does_not_build_for(tmp_path):
    shutil.copy(ROOT / "setup.sh", tmp_path / "setup.sh")
    done = subprocess.run(
        ["bash", str(tmp_path / "setup.sh")], env={**os.environ, "BENCH_CUDA": "11"}, capture_output=True, text=True
    )
    assert done.returncode == 2 and "bench installs 12, 13 or cpu builds" in done.stderr
    assert not (tmp_path / ".venv").exists()
