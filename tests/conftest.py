"""Shared fixtures, and what keeps tests apart when pytest-xdist runs them in parallel workers (pyproject.toml's
addopts: `-n auto`; `-n 0` runs them in this process, for pdb):

- each worker has its own temporary directories (xdist's basetemp per worker) and BENCH_CACHE per test;
- each worker's torch and bench runs get their share of the cores (OMP_NUM_THREADS), not all of them each;
- TCP ports for process groups come from each worker's own range (free_port);
- a module- or class-scoped fixture (a reference run, a dataset, tests/test_slurm.py's SLURM cluster on ports of
  its own) is made once on each worker that runs the module's tests, so a module's tests spread over the workers.
"""

import collections
import contextlib
import io
import itertools
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from bench.cli import main
from bench.engine.threads import usable_cores

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "recipes"
WORKER = os.environ.get("PYTEST_XDIST_WORKER")  # gw0, gw1, ... under xdist; None in one process
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if WORKER and "OMP_NUM_THREADS" not in os.environ:  # before torch is imported: its default thread count
    os.environ["OMP_NUM_THREADS"] = str(max(1, usable_cores() // WORKERS))


def pytest_collection_modifyitems(items):
    """The modules with the most slow tests first, each module's tests together (its fixtures are made once):
    xdist hands tests out in this order, so the suite ends on short tests on every worker, not one long test on one."""
    module = [item.nodeid.split("::")[0] for item in items]
    slow = collections.Counter(name for name, item in zip(module, items) if item.get_closest_marker("slow"))
    first = {name: i for i, name in enumerate(dict.fromkeys(module))}
    order = sorted(range(len(items)), key=lambda i: (-slow[module[i]], first[module[i]], i))
    items[:] = [items[i] for i in order]


PORTS_PER_WORKER = 300
_ports = itertools.count()


def free_port() -> int:
    """A TCP port free now, from this worker's own range (20000 + 300 x worker number): two workers starting
    process groups at the same moment never pick the same one (a kernel-chosen port could be handed out twice
    between its probe and its use)."""
    base = 20000 + PORTS_PER_WORKER * int((WORKER or "gw0")[2:])
    import socket

    for _ in range(PORTS_PER_WORKER):
        port = base + next(_ports) % PORTS_PER_WORKER
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:  # another program holds it
                continue
            return port
    raise RuntimeError(f"no free port in {base}-{base + PORTS_PER_WORKER - 1}")


@pytest.fixture(autouse=True)
def _torch_threads_restored():
    """Commands run in-process (bench perf --threads) set torch's thread count; the next test gets it back,
    so its numbers do not depend on which tests ran before it."""
    import torch

    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def one_thread():
    """Small tensors: one thread, as two OpenMP threads on a busy 2-core machine ran 20x slower. The optimizer
    test modules use it for each test (`pytestmark = pytest.mark.usefixtures("one_thread")`)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
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


def git(where: Path, *args: str) -> str:
    """git in a test's scratch repository, committing as a throwaway identity."""
    identity = ["-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    return subprocess.run(["git", *identity, *args], cwd=where, capture_output=True, text=True, check=True).stdout


# A checkout's files at the paths a run reads (code, recipes, configuration) and writes (results, plots)
CHECKOUT_FILES = (
    "pyproject.toml",
    "README.md",
    "bench/__init__.py",
    "bench/catalog.py",
    "bench/optim/lars.py",
    "bench/data/pipeline.py",
    "bench/analysis/tuning.py",
    "bench/engine/train.py",
    "recipes/base.yaml",
    "recipes/sweep.yaml",
    "results/study/run/meta.json",
    "plots/study/scaling.png",
)


@pytest.fixture
def checkout(tmp_path, monkeypatch) -> Path:
    """A committed git checkout of bench's layout in tmp_path (CHECKOUT_FILES and this repository's .gitignore)
    whose state rundir.git_commit reads instead of this checkout's, which the test never touches."""
    from bench import rundir

    root = tmp_path / "checkout"
    for name in CHECKOUT_FILES:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(f"# {name}\n")
    (root / ".gitignore").write_text((ROOT / ".gitignore").read_text())
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "x"]):
        git(root, *args)
    monkeypatch.setattr(rundir, "PACKAGE", root / "bench")
    rundir.checkout_state.cache_clear()  # read once per process: this checkout's, then this repository's again
    yield root
    rundir.checkout_state.cache_clear()


def write_recipe(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def bench_argv(*args: str) -> list[str]:
    """The command line of `bench ARGS` in a subprocess of this Python: `bench_argv("run", recipe, "--nproc", "2")`
    for a test that runs it its own way (an environment, a crash point, Popen and a signal)."""
    return [sys.executable, "-m", "bench", *args]


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`bench ARGS` in a subprocess, as a user runs it (exit code, stdout, stderr): for a test of the process
    itself (its environment, a signal, how it ends); `cli` for the rest."""
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    return subprocess.run(bench_argv(*args), capture_output=True, text=True, cwd=cwd, env=env)


def forks_are_safe() -> bool:
    """Whether a fork of this process can run torch: only where torch runs on one thread here (each xdist worker),
    as a fork does not carry an OpenMP thread pool (`-n 0` on several threads has one)."""
    import torch

    return torch.get_num_threads() == 1


def bench_processes(*commands: list[str], **env: str) -> list[tuple[int, str, str]]:
    """Each `bench ARGS` of `commands` in a process of its own, all started at once, with `env` set for them and
    Python's warnings ignored (as run_cli's); each one's exit status (-9: SIGKILLed), stdout and stderr once all
    ended. Forked from this process where forks_are_safe(): a process without the 5-10 s a new Python spends on
    imports. Else new Pythons through tests/kron_eager.py (timm's Kron eager there too, as _kron_eager makes it
    here)."""
    import signal
    import tempfile
    import time

    files = [(tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")) for _ in commands]
    if not forks_are_safe():
        env = {**os.environ, **env, "PYTHONWARNINGS": "ignore", "PYTHONPATH": str(ROOT)}
        started = [
            subprocess.Popen([sys.executable, "-m", "tests.kron_eager", *args], env=env, stdout=out, stderr=err)
            for args, (out, err) in zip(commands, files)
        ]
        codes = [process.wait(timeout=600) for process in started]
    else:
        pids = [_fork_bench(args, env, out, err) for args, (out, err) in zip(commands, files)]
        deadline, ended = time.monotonic() + 600, {}
        while len(ended) < len(pids):
            for pid in set(pids) - set(ended):
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    ended[pid] = os.waitstatus_to_exitcode(status)
                elif time.monotonic() > deadline:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    raise AssertionError(f"bench {' '.join(commands[pids.index(pid)])} did not end in 600 s")
            time.sleep(0.05)
        codes = [ended[pid] for pid in pids]
    said = []
    for out, err in files:
        out.seek(0), err.seek(0)
        said.append((out.read(), err.read()))
        out.close(), err.close()
    return [(code, out, err) for code, (out, err) in zip(codes, said)]


def _fork_bench(args: list[str], env: dict, out, err) -> int:
    """A child of this process that runs `bench ARGS` into the files `out` and `err` and never returns into pytest."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    code = 70
    try:
        os.environ.update(env)
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        sys.stdout, sys.stderr = open(1, "w", closefd=False), open(2, "w", closefd=False)  # not pytest's capture
        warnings.simplefilter("ignore")
        code = main(list(args))
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def killed_at(point: str, *args: str, **env: str) -> int:
    """`bench ARGS` that kills itself (SIGKILL) at `point` (BENCH_CRASH_AT: step:N, eval:N, checkpoint:N), with
    `env` set for it, in a process of its own (bench_processes); its exit status, -9 when it got there."""
    [(code, _, _)] = bench_processes(list(args), BENCH_CRASH_AT=point, **env)
    return code


def start_ranks(fn, args: tuple, nprocs: int) -> None:
    """torch.multiprocessing.spawn(fn, args, nprocs): fn(rank, *args) in `nprocs` processes, joined, an error in
    any raised here. Forked where forks_are_safe(), so the ranks start with what this process imported, not with
    the 5-10 s each new Python spends on imports; else spawned."""
    import torch.multiprocessing as mp

    mp.start_processes(fn, args=args, nprocs=nprocs, start_method="fork" if forks_are_safe() else "spawn")


def cli(*args: str, show_warnings: bool = False, strict: bool = False) -> subprocess.CompletedProcess:
    """`bench ARGS` in this process, with run_cli's exit code, stdout and stderr, without the 5-10 s a new Python
    spends importing torch on 2 cores (most of a small run's time). Python's warnings are ignored, as in run_cli;
    `show_warnings`: each shown once, as a process without PYTHONWARNINGS shows them, at the end of stderr;
    `strict`: every warning but bench's own (a line for the user) raises where it is warned, so a test fails on
    one that would leak to a user (numpy's RuntimeWarnings)."""
    from bench.errors import BenchWarning

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("error" if strict else "default" if show_warnings else "ignore")
        if strict:
            warnings.filterwarnings("default", category=BenchWarning)
        try:
            code = main(list(args))
        except SystemExit as e:  # argparse's refusals
            code = e.code
    for w in seen:
        err.write(warnings.formatwarning(w.message, w.category, w.filename, w.lineno, w.line))
    return subprocess.CompletedProcess(["bench", *args], code, out.getvalue(), err.getvalue())
