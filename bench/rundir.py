"""The run directory: the contract between the runner and the analysis, both sides of it.

    <results>/<recipe name>/<run id>/
        recipe.yaml    the resolved recipe
        meta.json      status, versions, git commit, hardware, world size, times
        metrics.csv    one row per evaluation (METRIC_COLUMNS)
        events.jsonl   per-step scalars (lr, batch, loss, optimizer diagnostics, noise scale), appended
        events.jsonl.gz  the same once the run has finished (completed or diverged), gzipped: 3-4 x smaller
        ckpt-<step>.pt checkpoints (bench/engine/checkpoint.py: their contents, names, writing and pruning)

Every file but the append-only events log is replaced atomically (write a
temporary file, then rename), so a crash never leaves a half-written file.
The writer (RunDir) and the readers the analysis, suite, sweep and perf use all
live here, below both engine and analysis: no other module spells a run file's
name or reads one, the checkpoints aside (bench/engine/checkpoint.py). The analysis
reads a run as one typed record (Run, from read_run): its recipe, its meta in
today's layout (older layouts are upgraded here, in upgraded_meta, and nowhere
else), the one global batch it planned, its metrics, and its events at first use.
"""

from __future__ import annotations

import csv
import errno
import fcntl
import functools
import gzip
import hashlib
import io
import json
import math
import os
import platform
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from bench.catalog import LIBRARIES
from bench.errors import UserError
from bench.files import atomic_write, writing

if TYPE_CHECKING:
    import pandas as pd

RECIPE = "recipe.yaml"
META = "meta.json"
METRICS = "metrics.csv"
EVENTS = "events.jsonl"
EVENTS_PACKED = "events.jsonl.gz"  # a finished run's events (RunDir.pack_events); event_lines reads both
LOCK = ".lock"

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
# metrics.csv columns added after the first runs: read when present, else derived
# (schedule_epoch = epoch: only AdaScale's schedule runs ahead of the images seen;
# batch = the plan's global_batch: before adaptive batching it never changed).
OPTIONAL_METRIC_COLUMNS = ("schedule_epoch", "batch", "holdout_top1", "holdout_loss", "val_images")
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
PACKAGES += tuple(p for p in LIBRARIES if p not in PACKAGES)  # each library optimizer's (schedulefree, ...)


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


PACKAGE = Path(__file__).resolve().parent  # bench/: every subpackage and top-level module


@functools.lru_cache(maxsize=8)
def checkout_state(*inputs: Path) -> tuple[str, tuple[str, ...]] | None:
    """bench's checkout: its HEAD commit and what may differ from it (git status lines), if it is a git checkout.
    Counted: a tracked file that differs from HEAD in the working tree or the index (bench's code, recipes,
    pyproject.toml, the README, ...), and an untracked file that git does not ignore in bench/ (an untracked
    bench/optim/lars/__init__.py is imported instead of the tracked lars.py) or recipes/. Not counted: what bench
    writes (results/, plots/; a study in progress changes them, no run reads them), and `inputs`, the user's files
    a run is made from (its recipe, a sweep file and its base recipe), wherever they lie: their content is recorded
    instead (input_records), so a study needs no commit into bench. Read once per process, so every run of a
    suite names the code the process loaded."""
    checkout = PACKAGE.parent
    inside = []
    for file in inputs:
        try:
            inside.append(f":(exclude){Path(file).resolve().relative_to(checkout.resolve())}")
        except ValueError:
            continue  # outside bench's checkout: not its state
    try:
        sha = _git(checkout, "rev-parse", "HEAD")
        lines = _git(
            checkout, "status", "--porcelain", "--untracked-files=no", "--", ".", ":!results", ":!plots", *inside
        )
        lines += "\n" + _git(
            checkout, "status", "--porcelain", "--untracked-files=all", "--", PACKAGE.name, "recipes", *inside
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return sha, tuple(dict.fromkeys(line.strip() for line in lines.splitlines() if line.strip()))


def git_commit(*inputs: Path) -> str | None:
    """The commit of bench's checkout (checkout_state), '+dirty' when bench's own files may differ from it."""
    state = checkout_state(*inputs)
    return None if state is None else state[0] + ("+dirty" if state[1] else "")


def input_records(*inputs: Path) -> list[dict]:
    """The user's files a run is made from, as its meta.json records them: path, content digest (sha256), and the
    commit of the git tree that holds the file with whether the file is committed there unchanged (null: in no
    git tree)."""
    records = []
    for file in inputs:
        path = Path(file)
        record = {"path": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "git_commit": None}
        try:
            where = path.resolve().parent
            record["git_commit"] = _git(where, "rev-parse", "HEAD")
            record["committed"] = not _git(where, "status", "--porcelain", "--untracked-files=all", "--", path.name)
        except (OSError, subprocess.CalledProcessError):
            pass
        records.append(record)
    return records


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
STATUSES = (*RESUMABLE, *FINISHED)  # every status a run's meta.json holds


def held_by_a_process(run: Path) -> bool:
    """Whether a live process holds the run's lock (a run's status stays "running" when its process is killed).
    The probe takes the lock for an instant: a resume starting in that instant would be told to wait."""
    try:
        with open(run / LOCK, "a") as f:
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
        self._lock = open(self.path / LOCK, "w")
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
        run.meta = json.loads((run.path / META).read_text())
        if (run.path / METRICS).is_file():
            with open(run.path / METRICS) as f:
                run.metrics = [row for row in csv.DictReader(f) if int(row["step"]) <= step]
            run._write_metrics()
        # The checkpoint is the truth: the log goes back to it, as a write-ahead log would, and is live again.
        kept = [line for line in event_lines(run.path, cut=True) if json.loads(line)["step"] < step]
        atomic_write(run.path / EVENTS, "".join(line + "\n" for line in kept))
        (run.path / EVENTS_PACKED).unlink(missing_ok=True)
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
            atomic_write(path / RECIPE, recipe_yaml)
        except BaseException:
            run.discard()
            raise
        return run

    def release(self) -> None:
        """Let go of the run directory (its lock) once this process has written its last record."""
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def discard(self) -> None:
        """Remove a run directory that holds nothing of a run yet (a disk too full for its first files)."""
        shutil.rmtree(self.path, ignore_errors=True)
        self.release()

    @classmethod
    def runs_of(cls, results: Path, recipe_name: str) -> list[Path]:
        """This recipe's run directories, oldest first."""
        return sorted(p.parent for p in (Path(results) / recipe_name).glob(f"*/{META}"))

    def write_meta(self, **fields) -> None:
        self.meta.update(fields)
        atomic_write(self.path / META, json.dumps(self.meta, indent=2) + "\n")

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
        atomic_write(self.path / METRICS, buf.getvalue())

    def log_event(self, event: dict) -> None:
        with writing(self.path / EVENTS), open(self.path / EVENTS, "a") as f:
            f.write(json.dumps(event) + "\n")
        for curves in self.curves:
            curves.event(event)

    def pack_events(self) -> None:
        """A finished run's events gzipped (no name or time in the header: the same events, the same bytes);
        the live log goes once the packed one is whole."""
        if (self.path / EVENTS).is_file():
            text = "".join(line + "\n" for line in event_lines(self.path))
            atomic_write(self.path / EVENTS_PACKED, gzip.compress(text.encode(), compresslevel=9, mtime=0))
            (self.path / EVENTS).unlink()


def kernels(meta: dict) -> str:
    """The platform whose kernels made a run's numbers: the device, its kernel path (CPU: ATen's capability,
    e.g. AVX2 or AVX512, which moves results by more than rounding, and the processor: the same AVX2 path on an
    Intel Xeon and an AMD EPYC differed from the first evaluation's loss, 2.3541054 against 2.3541066, with
    MKL_CBWR=AVX2 or not) and the torch build. A run made before bench recorded its processor names none."""
    torch = (meta.get("versions") or {}).get("torch", "?")
    device = meta.get("device") or "cpu"
    path = meta.get("cpu_capability") if device == "cpu" else meta.get("gpu") or device
    model = meta.get("cpu_model") if device == "cpu" else None
    return f"{device} {path or '?'}{f' on {model}' if model else ''}, torch {torch}"


def this_platform() -> str:
    """The kernel platform this process trains on, as kernels() names a run's."""
    import torch

    cuda = torch.cuda.is_available()
    return kernels(
        {
            "device": "cuda" if cuda else "cpu",
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "cpu_model": cpu_model(),
            "gpu": torch.cuda.get_device_name() if cuda else None,
            "versions": versions(),
        }
    )


def refuse_another_platform(results: Path, allow_mixed_kernels: bool) -> list[dict]:
    """A study's runs come from one kernel platform: refuse to add runs to `results` on another platform than that
    of its finished runs (a sweep's pairs, a branch and its reference), unless allow_mixed_kernels; returns the
    finished runs' metas."""
    done = [m for m in (read_meta(run) for run in runs_in(results)) if m.get("status") in FINISHED]
    theirs = sorted({kernels(m) for m in done})
    here = this_platform()
    if theirs and theirs != [here] and not allow_mixed_kernels:
        pin = sorted({m.get("cpu_capability") for m in done if m.get("cpu_capability")})
        hint = f"ATEN_CPU_CAPABILITY={pin[0].lower()} where this CPU has it, or " if len(pin) == 1 else ""
        unrecorded = " ('?': made before bench recorded the kernel path)" if any("cpu ?" in k for k in theirs) else ""
        raise UserError(
            f"{results}: the finished runs in it used {'; '.join(theirs)}{unrecorded} and this process would use "
            f"{here}; a study's runs come from one kernel platform: resume it on theirs ({hint}the "
            "same machine type), give another --out for a new study, or pass --allow-mixed-kernels (the verdict "
            "then warns)"
        )
    return done


def event_lines(run: Path, cut: bool = False) -> list[str]:
    """A run's events, one JSON line a step, oldest first: the packed log of a finished run, then the live one.
    The live log's last line may be cut off (a process killed while appending, a full disk): left out. Any other
    line that is not JSON is one sentence; with `cut` (a resume, where the checkpoint is the truth) the log ends
    before it, with a warning."""
    run = Path(run)
    packed, live = run / EVENTS_PACKED, run / EVENTS
    lines = []
    if packed.exists():
        try:
            data = packed.read_bytes()
            if not data:  # bench packs whole logs: even an empty one is a gzip header
                raise EOFError("an empty file")
            lines = gzip.decompress(data).decode().splitlines()
        except (OSError, EOFError, UnicodeDecodeError, gzip.BadGzipFile) as e:
            raise UserError(f"{packed}: damaged ({e}); restore it from where the results came from") from None
    tail = live.read_text(errors="replace").splitlines() if live.is_file() else []
    whole = []
    for i, line in enumerate(lines + tail):
        try:
            json.loads(line)
        except ValueError:
            if cut:
                print(
                    f"bench: warning: {live}: a cut-off line after {len(whole)} whole ones; the log is cut back "
                    "to them",
                    file=sys.stderr,
                )
                break
            if i == len(lines) + len(tail) - 1 and tail:
                break
            where = packed if i < len(lines) else live
            raise UserError(f"{where}: line {i + 1 - (0 if i < len(lines) else len(lines))} is not JSON") from None
        whole.append(line)
    return whole


def cpu_model() -> str:
    """The processor's name (bitwise reproduction holds per platform: its kernels pick their instructions)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def host_info(device) -> dict:
    import torch

    info = {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "cpu_threads": torch.get_num_threads(),
        "cpu_model": cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch_config": torch.__config__.show(),
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


def read_meta(run: Path) -> dict:
    """A run's meta.json in today's layout (upgraded_meta); OSError or ValueError when it is missing or
    unreadable: callers decide."""
    return upgraded_meta(json.loads((Path(run) / META).read_text()))


def upgraded_meta(meta: dict) -> dict:
    """A run's meta in today's layout, the one place where an older layout is mended: runs made before 2026-11-24
    named the plan's batch `plan.global_batch` (now `plan.batch`). Anything but a mapping is returned as it is."""
    plan = meta.get("plan") if isinstance(meta, dict) else None
    if isinstance(plan, dict) and "global_batch" in plan:
        renamed = {("batch" if k == "global_batch" else k): v for k, v in plan.items() if k != "batch"}
        meta = {**meta, "plan": {**renamed, **({"batch": plan["batch"]} if "batch" in plan else {})}}
    return meta


def status_since(run: Path, since: float) -> str | None:
    """A run's status when its meta was written at or after `since` (a time.time()); None when it was not, or
    cannot be read."""
    try:
        if (Path(run) / META).stat().st_mtime < since:
            return None
        meta = read_meta(run)
    except (OSError, ValueError):
        return None
    return meta.get("status") if isinstance(meta, dict) else None


def is_run(path: Path) -> bool:
    """Whether `path` is a run directory (it holds a meta)."""
    return (Path(path) / META).is_file()


def runs_in(results: Path) -> list[Path]:
    """The run directories of one results folder (<results>/<recipe name>/<run id>), in the order of their paths."""
    return sorted(p.parent for p in Path(results).glob(f"*/*/{META}"))


def damaged(message: str) -> None:
    """One line on stderr for damaged results that are left out or cut back: never a silent change."""
    print(f"bench: warning: {message}", file=sys.stderr)


def find_runs(paths: list[str | Path]) -> list[Path]:
    """Run directories (folders holding meta.json) at or below each path."""
    runs = []
    for p in map(Path, paths):
        if not p.exists():
            raise UserError(f"{p}: no such run or results directory")
        found = [p] if is_run(p) else sorted(m.parent for m in p.rglob(META))
        if not found:
            raise UserError(f"{p}: no run directories (folders with meta.json) found")
        runs += found
    return list(dict.fromkeys(runs))


def read_yaml(path: Path):
    """A resolved recipe (or other YAML bench wrote), safely, through libyaml where PyYAML has it: the same values
    as yaml.safe_load, several times faster over a results tree of hundreds of runs."""
    import yaml

    return yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - safe


def read_recipe_and_meta(run: Path) -> tuple[dict, dict]:
    """A finished or running run's recipe (read with today's schema) and meta.json (in today's layout:
    upgraded_meta), or one UserError."""
    import yaml

    from bench.recipe import Recipe

    try:
        meta = read_meta(run)
        recipe = read_yaml(run / RECIPE)
    except (OSError, ValueError, yaml.YAMLError) as e:
        raise UserError(f"{run}: not a readable run directory ({type(e).__name__}: {e})") from None
    if not isinstance(meta, dict) or not isinstance(recipe, dict):
        raise UserError(f"{run}: meta.json and recipe.yaml must each hold a mapping")
    for key in ("name", "optimizer", "global_batch", "target_top1"):
        if key not in recipe:
            raise UserError(f"{run / RECIPE}: missing key '{key}' (not a resolved bench recipe)")
    if not isinstance(recipe["optimizer"], dict) or "name" not in recipe["optimizer"]:
        raise UserError(f"{run / RECIPE}: missing key 'optimizer.name'")
    if not _is_number(recipe["global_batch"]):
        raise UserError(f"{run / RECIPE}: key 'global_batch' is {recipe['global_batch']!r}, not a number")
    if wrong := _wrong_types(meta):
        raise UserError(f"{run / META}: key {wrong}")
    return Recipe.as_today(recipe), meta  # so a key added since a run was made does not split its seeds


META_NUMBERS = ("train_time_s", "eval_time_s", "train_images_per_s", "train_size", "val_size", "holdout_size")
META_MAPPINGS = {"plan": ("batch",), "evaluated_images": ("val", "train_eval")}  # their number keys


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _wrong_types(meta: dict) -> str:
    """The first meta.json key the analysis reads whose value has another type, in words ('' if none; null is
    allowed everywhere)."""
    for key in META_NUMBERS:
        if meta.get(key) is not None and not _is_number(meta[key]):
            return f"'{key}' is {meta[key]!r}, not a number"
    for key, inner in META_MAPPINGS.items():
        if meta.get(key) is not None and not isinstance(meta[key], dict):
            return f"'{key}' is {meta[key]!r}, not a mapping"
        for k in inner if meta.get(key) else ():
            if meta[key].get(k) is not None and not _is_number(meta[key][k]):
                return f"'{key}.{k}' is {meta[key][k]!r}, not a number"
    return ""


def read_metrics(run: Path, plan_batch: float = math.nan) -> pd.DataFrame:
    """metrics.csv with every METRIC_COLUMNS column as numbers (empty before the first evaluation); the
    OPTIONAL_METRIC_COLUMNS a run made before them lacks are filled in (batch = `plan_batch`)."""
    import pandas as pd

    path = run / METRICS
    columns = list(dict.fromkeys([*METRIC_COLUMNS, *OPTIONAL_METRIC_COLUMNS]))
    if not path.exists():
        return pd.DataFrame(columns=columns, dtype=float)
    try:
        text = path.read_text()
        if text and not text.endswith("\n"):  # bench writes whole files: a copy or a full disk cut this one
            text = text[: text.rfind("\n") + 1]
            damaged(f"{path}: the last line is cut off (an interrupted copy or write); it is left out")
        fields = [len(row) for row in csv.reader(io.StringIO(text))]
        metrics = pd.read_csv(io.StringIO(text))
    except (OSError, ValueError, csv.Error, pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise UserError(f"{path}: not a readable metrics file ({type(e).__name__}: {e})") from None
    # bench writes every row with the header's fields: a row cut short would read as NaN, silently
    if short := [i + 2 for i, n in enumerate(fields[1:]) if n != fields[0]]:
        raise UserError(f"{path}: line {short[0]} has {fields[short[0] - 1]} fields, the header {fields[0]}")
    required = [c for c in METRIC_COLUMNS if c not in OPTIONAL_METRIC_COLUMNS]
    missing = [c for c in required if c not in metrics.columns]
    if missing:
        raise UserError(f"{path}: missing column(s) {', '.join(missing)}; expected {', '.join(required)}")
    if "schedule_epoch" not in metrics.columns:
        metrics["schedule_epoch"] = metrics["epoch"]
    if "batch" not in metrics.columns:
        metrics["batch"] = plan_batch
    for column in ("holdout_top1", "holdout_loss", "val_images"):  # runs without a holdout, or made before them
        if column not in metrics.columns:
            metrics[column] = math.nan
    try:
        metrics = metrics[columns].apply(pd.to_numeric)
    except (ValueError, TypeError) as e:
        raise UserError(f"{path}: a value is not a number ({e})") from None
    return metrics


def read_events(run: str | Path) -> pd.DataFrame:
    """A run's events (event_lines) as a DataFrame, one row per step."""
    import pandas as pd

    rows = [row for row in map(json.loads, event_lines(Path(run))) if isinstance(row, dict)]
    if any(not _is_number(row.get("step", 0)) for row in rows):  # the steps order the rows: no number, no order
        raise UserError(f"{run}: an event's 'step' is not a number (its events log is damaged); restore it")
    return pd.DataFrame(rows)


@dataclass(frozen=True, eq=False)
class Run:
    """One run directory, read once (read_run): all the analysis reads of a run, which then opens none of its files.

    path: the run directory; recipe: its resolved recipe read with today's schema (Recipe.as_today: a key added
    since the run was made, at its default, does not split its seeds); meta: its meta in today's layout
    (upgraded_meta); batch: the global batch it planned (the recipe's global_batch: an adaptive run's first batch,
    under which it is grouped and compared), the one batch the analysis names, as `global_batch`; plan_batch: the
    batch plan's unit (meta's plan.batch), kept apart from `batch` because under adaptive batching it is the chunk
    a step takes a whole number of (adaptive_batch.min_batch, bench/engine/plan.py), equal to it otherwise;
    metrics: one row per evaluation (read_metrics); events: the per-step scalars (read_events), read at first use
    and kept."""

    path: Path
    recipe: dict
    meta: dict
    batch: int
    plan_batch: float
    metrics: pd.DataFrame = field(repr=False)

    @functools.cached_property
    def events(self) -> pd.DataFrame:
        return read_events(self.path)  # cached_property writes the instance's __dict__: a frozen record allows it


def read_run(run: str | Path) -> Run:
    """A run directory as its record (Run), or one UserError naming the damaged file."""
    run = Path(run)
    recipe, meta = read_recipe_and_meta(run)
    batch = int(recipe["global_batch"])
    plan = meta.get("plan") or {}
    plan_batch = float(plan.get("batch") or batch)
    metrics = read_metrics(run, plan_batch)
    if meta.get("status") == "completed" and not len(metrics):  # a completed run ends with its final evaluation
        raise UserError(f"{run / METRICS}: no evaluation, but meta.json says the run completed (damaged or missing)")
    return Run(run, recipe, meta, batch, plan_batch, metrics)
