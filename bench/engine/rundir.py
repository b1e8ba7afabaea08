"""The run directory: the contract between the runner and the analysis.

    <results>/<recipe name>/<run id>/
        recipe.yaml    the resolved recipe
        meta.json      status, versions, git commit, hardware, world size, times
        metrics.csv    one row per evaluation (METRIC_COLUMNS)
        events.jsonl   per-step scalars (lr, batch, loss, optimizer diagnostics, noise scale)

Every file but the append-only events log is replaced atomically (write a
temporary file, then rename), so a crash never leaves a half-written file.
"""

from __future__ import annotations

import csv
import errno
import fcntl
import functools
import io
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from bench.errors import UserError
from bench.files import atomic_write, writing

METRIC_COLUMNS = (
    "epoch",
    "schedule_epoch",
    "step",
    "images_seen",
    "batch",
    "train_time_s",
    "lr",
    "train_loss",
    "train_eval_top1",
    "train_eval_loss",
    "val_top1",
    "val_top5",
    "val_loss",
    "holdout_top1",
    "holdout_loss",
    "val_images",
)
PACKAGES = (
    "bench",
    "torch",
    "torchvision",
    "timm",
    "nvidia-dali-cuda120",
    "nvidia-dali-cuda130",
    "pandas",
    "numpy",
    "tensorboard",
    "wandb",
)


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


PACKAGE = Path(__file__).resolve().parents[1]  # bench/: every subpackage and top-level module


@functools.lru_cache(maxsize=8)
def git_commit(*files: Path) -> str | None:
    """The commit of the checkout bench runs from, if any, '+dirty' when a tracked file anywhere in the package
    (bench/optim, bench/data, bench/analysis, bench/engine, bench/*.py, ...) differs from it, or when one of
    `files` (a sweep's sweep file and base recipe: what it reads besides code) is modified or not committed in
    the git tree that holds it. A file in no git tree cannot be checked and is not counted (a run's recipe.yaml
    records what it resolved to anyway). Read once per process, so every run of a suite names the code the
    process loaded."""
    try:
        sha = _git(PACKAGE, "rev-parse", "HEAD")
        # tracked files only in the package: untracked ones there are never imported unless a tracked file (which
        # would then be modified) imports them; results/ is data, not code (a resumed study changes it)
        dirty = _git(PACKAGE, "status", "--porcelain", "--untracked-files=no", "--", ".")
    except (OSError, subprocess.CalledProcessError):
        return None
    for file in files:
        file = Path(file).resolve()
        try:  # an untracked sweep file is no commit's: it counts
            dirty += _git(file.parent, "status", "--porcelain", "--untracked-files=all", "--", file.name)
        except (OSError, subprocess.CalledProcessError):
            continue  # not in a git tree
    return sha + ("+dirty" if dirty else "")


def _git(where: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=where, capture_output=True, text=True, check=True).stdout.strip()


def versions() -> dict[str, str | None]:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


RESUMABLE = ("running", "preempted", "failed")  # "running" without a lock holder = killed
FINISHED = ("completed", "diverged")  # results: a suite skips them, the analysis aggregates them


def held_by_a_process(run: Path) -> bool:
    """Whether a live process holds the run's lock (a run's status stays "running" when its process is killed).
    The probe takes the lock for an instant: a resume starting in that instant would be told to wait."""
    try:
        with open(run / ".lock", "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return False  # closing releases it
    except BlockingIOError:
        return True
    except OSError:
        return False


class RunDir:
    def __init__(self, path: Path):
        self.path = Path(path)
        self.metrics: list[dict] = []
        self.meta: dict = {}
        self._lock = None
        self.curves = []  # live curve writers (TensorBoard, W&B) the recipe asks for

    def lock(self) -> None:
        """Hold this run directory for this process (released when it exits, even when killed)."""
        self._lock = open(self.path / ".lock", "w")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            raise UserError(
                f"{self.path}: this run is in progress in another process; "
                "wait for it, or start a separate run with --restart"
            ) from None
        except OSError as e:  # a file system that refuses locks (Lustre mounted without flock): run unguarded
            if e.errno not in (errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL):
                raise

    @classmethod
    def reopen(cls, path: Path, step: int) -> "RunDir":
        """An existing run, rolled back to `step`: later metrics rows and events are dropped
        (the resumed run computes them again, identically)."""
        run = cls(path)
        run.lock()
        run.meta = json.loads((run.path / "meta.json").read_text())
        if (run.path / "metrics.csv").is_file():
            with open(run.path / "metrics.csv") as f:
                run.metrics = [row for row in csv.DictReader(f) if int(row["step"]) <= step]
            run._write_metrics()
        events = run.path / "events.jsonl"
        if events.is_file():  # the checkpoint is the truth: the log goes back to it, as a write-ahead log would
            kept = [line for line in whole_lines(events) if json.loads(line)["step"] < step]
            atomic_write(events, "".join(line + "\n" for line in kept))
        return run

    @classmethod
    def create(cls, results: Path, recipe_name: str, recipe_yaml: str) -> "RunDir":
        """A new, uniquely named run directory (a second run started the same second gets '-2')."""
        parent = Path(results) / recipe_name
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UserError(f"{parent}: cannot create the results directory ({e.strerror})") from None
        if not os.access(parent, os.W_OK):
            raise UserError(f"{parent}: the results directory is not writable")
        stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
        for n in range(1, 1000):
            path = parent / (stamp if n == 1 else f"{stamp}-{n}")
            try:
                path.mkdir()
                break
            except FileExistsError:
                continue
        run = cls(path)
        run.lock()
        try:
            atomic_write(path / "recipe.yaml", recipe_yaml)
        except BaseException:
            run.discard()
            raise
        return run

    def discard(self) -> None:
        """Remove a run directory that holds nothing of a run yet (a disk too full for its first files)."""
        shutil.rmtree(self.path, ignore_errors=True)
        self._lock.close()

    @classmethod
    def runs_of(cls, results: Path, recipe_name: str) -> list[Path]:
        """This recipe's run directories, oldest first."""
        return sorted(p.parent for p in (Path(results) / recipe_name).glob("*/meta.json"))

    def write_meta(self, **fields) -> None:
        self.meta.update(fields)
        atomic_write(self.path / "meta.json", json.dumps(self.meta, indent=2) + "\n")

    def add_metrics(self, row: dict) -> None:
        self.metrics.append({k: row[k] for k in METRIC_COLUMNS})
        self._write_metrics()
        for curves in self.curves:
            curves.metrics(self.metrics[-1])

    def _write_metrics(self) -> None:
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=METRIC_COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(self.metrics)
        atomic_write(self.path / "metrics.csv", buf.getvalue())

    def log_event(self, event: dict) -> None:
        with writing(self.path / "events.jsonl"), open(self.path / "events.jsonl", "a") as f:
            f.write(json.dumps(event) + "\n")
        for curves in self.curves:
            curves.event(event)


def whole_lines(events: Path) -> list[str]:
    """The lines of an append-only JSON-lines log up to the first that is not whole JSON (a process killed
    while appending, or a full disk, cuts the last one)."""
    lines = []
    for line in events.read_text(errors="replace").splitlines():
        try:
            json.loads(line)
        except ValueError:
            print(
                f"bench: warning: {events}: a cut-off line after {len(lines)} whole ones; the log is cut back to them",
                file=sys.stderr,
            )
            break
        lines.append(line)
    return lines


def _cpu_model() -> str:
    """The processor's name (bitwise reproduction holds per platform: its kernels pick their instructions)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def checkpoints(run_dir: Path) -> list[Path]:
    """A run's checkpoints, oldest first."""
    return sorted(Path(run_dir).glob("ckpt-*.pt"))


def prune_checkpoints(run_dir: Path, keep: int) -> int:
    """Remove all but the newest `keep` checkpoints of a run, and temporary ones a crash during a write left;
    returns the bytes freed."""
    saved = checkpoints(run_dir)
    freed = 0
    for old in saved[: len(saved) - keep] + list(Path(run_dir).glob(".ckpt-*.tmp")):
        freed += old.stat().st_size
        old.unlink(missing_ok=True)
    return freed


def host_info(device) -> dict:
    import torch

    info = {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "cpu_threads": torch.get_num_threads(),
        "cpu_model": _cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch_config": torch.__config__.show(),
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info
