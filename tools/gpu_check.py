#!/usr/bin/env python3
"""One call that checks and measures bench's GPU path on a bare GPU machine, and writes one markdown report.

    python3 tools/gpu_check.py --fetch-wheels       # here, with network: the wheels the GPU machine lacks -> .whl/
    python3 tools/gpu_check.py --out DIR            # there: install them, check, measure -> DIR/gpu-check.md
    python3 tools/gpu_check.py --out DIR --device cpu --tiny   # the rehearsal (tests/test_gpu_check.py)
    python3 tools/gpu_check.py --out DIR --matrix   # the candidate matrix instead -> DIR/matrix.{json,md}, proposal

Standard library only, so it runs before anything is installed; every step is a subprocess with its own time
limit (the caps below fit the whole in --budget seconds) and a failed step never stops the later ones. The
report is rewritten after every step, so a call cut short still returns what was done. docs/performance.md
("Checking a GPU machine", "The candidate matrix") says how to run it and what the report holds.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WHEELS = REPO / ".whl"  # ignored by git (.gitignore); the device tool's `carry` takes it along
# The lent GPU machine has Python 3.12 on manylinux x86-64 and none of these; pip resolves the rest of
# pydantic's dependencies (pydantic-core, annotated-types, typing-inspection, typing-extensions).
NEEDED = ("pydantic",)
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64")
REPORT = "gpu-check.md"
LOG = "gpu-check.log"
CPU_SLOWER = 5  # the rehearsal's caps: the GPU caps times this (a loaded 2-core machine, tiny sizes)
MIN_STEP_S = 5  # a step with less time left than this is skipped, not started
TAIL = 25  # output lines quoted per step in the report (the log holds all)
FIGURE_LINES = re.compile(
    r"^(bench perf \w+:|bare loop|bench runner|runner overhead|model FLOPs|published reference|copy bandwidth"
    r"|case |ghost BatchNorm|bench, |torch\.optim|bench (LARS|VRGD)|timm Lars|run: |installed: |matrix )"
)
MATRIX_ROWS = ("runner", "ghost_bn", "optimizer", "eval_memory")  # bench/perf/matrix.py's ROWS, in its order
MATRIX_EXIT_S = 10  # a row's process gets its step's time less this: it writes its JSON and exits before the kill


@dataclass
class Step:
    name: str
    title: str
    cap_s: int  # on a GPU; the caps sum to less than the default budget
    cuda_only: bool = False
    status: str = "not run"  # ok | FAILED | TIMEOUT | skipped: why
    seconds: float = 0.0
    commands: list[str] = field(default_factory=list)
    output: str = ""
    first_error: str = ""
    figures: list[str] = field(default_factory=list)


class Checker:
    """Runs the steps in order, each within min(its cap, what is left of the budget), and keeps the report."""

    def __init__(self, args):
        self.args, self.cuda = args, args.device == "cuda"
        self.out = Path(args.out).resolve()
        self.out.mkdir(parents=True, exist_ok=True)
        self.scratch = Path(tempfile.mkdtemp(prefix="bench-gpu-check-"))
        self.deadline = time.monotonic() + args.budget
        self.env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=os_pathsep(REPO, os.environ.get("PYTHONPATH")))
        self.env.setdefault("BENCH_CACHE", str(self.scratch / "cache"))
        if not self.cuda:
            self.env["CUDA_VISIBLE_DEVICES"] = ""  # the rehearsal stays on the CPU even on a GPU machine
        self.facts: dict = {}
        (self.out / LOG).write_text("")

    def sh(self, step: Step, argv: list[str], extra_env: dict | None = None) -> subprocess.CompletedProcess:
        """One command of a step, in its own process group (torchrun's workers die with it on a timeout)."""
        shown = [a if "\n" not in a else "<script in gpu_check.py>" for a in argv]
        shown = [f"{k}={v}" for k, v in (extra_env or {}).items()] + shown
        step.commands.append(" ".join(shown).replace(sys.executable, "python"))
        limit = max(1.0, self.step_deadline - time.monotonic())
        proc = subprocess.Popen(
            argv,
            cwd=REPO,
            env={**self.env, **(extra_env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,
        )
        try:
            out, _ = proc.communicate(timeout=limit)
        except BaseException:  # past its time, or this script told to stop: the whole group goes
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            try:
                out, _ = proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:  # a process outside the group holds the pipe open
                out = "(output lost: the pipe stayed open after the kill)"
            step.output += out
            raise
        step.output += out
        return subprocess.CompletedProcess(argv, proc.returncode, out)

    def python(self, step: Step, *args: str, extra_env: dict | None = None) -> subprocess.CompletedProcess:
        return self.sh(step, [sys.executable, *args], extra_env)

    def bench(self, step: Step, *args: str, extra_env: dict | None = None) -> subprocess.CompletedProcess:
        return self.python(step, "-m", "bench", *args, extra_env=extra_env)

    def run(self, step: Step, fn) -> None:
        print(f"gpu-check: {step.name} ...", flush=True)
        start = time.monotonic()
        self.step_deadline = min(start + step.cap_s * (1 if self.cuda else CPU_SLOWER), self.deadline)
        if step.cuda_only and not self.cuda:
            step.status = "skipped: no CUDA"
        elif self.step_deadline - start < MIN_STEP_S:
            step.status = "skipped: the budget is spent"
        else:
            try:
                step.status = fn(step) or "ok"
            except subprocess.TimeoutExpired:
                step.status = f"TIMEOUT after {time.monotonic() - start:.0f} s"
            except StepFailed as e:
                step.status, step.first_error = "FAILED", step.first_error or str(e)
            except Exception as e:  # a defect of this script must not stop the later steps either
                step.status, step.first_error = "FAILED", f"gpu_check.py: {type(e).__name__}: {e}"
        step.seconds = time.monotonic() - start
        lines = [line for line in step.output.splitlines() if line.strip()]
        if step.status.startswith("TIMEOUT") and lines:  # where it was when stopped, not an error
            step.first_error = f"last output line: {lines[-1].strip()[:300]}"
        elif step.status.startswith("FAILED") and not step.first_error and lines:
            step.first_error = first_error(step.output)
        step.figures = [line for line in step.output.splitlines() if FIGURE_LINES.match(line)]
        with open(self.out / LOG, "a") as log:
            log.write(f"===== {step.name}: {step.status} ({step.seconds:.0f} s)\n$ " + "\n$ ".join(step.commands))
            log.write("\n" + step.output + "\n")
        print(f"gpu-check: {step.name}: {step.status} ({step.seconds:.0f} s)", flush=True)


class StepFailed(Exception):
    """A step's check did not hold; the message is the report's first error line."""


def os_pathsep(*parts) -> str:
    return os.pathsep.join(str(p) for p in parts if p)


def first_error(output: str) -> str:
    """The line that names what went wrong: pytest's FAILED line, an exception, bench's one-sentence error."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    pattern = re.compile(r"^(FAILED |ERROR |E\s|bench: error|[\w.]*(Error|Exception|Interrupt)\b)")
    hits = [line for line in lines if pattern.match(line)]
    return (hits or lines or ["(no output)"])[0][:300]


def checked(done: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    if done.returncode != 0:
        raise StepFailed(f"exit code {done.returncode}: {first_error(done.stdout)}")
    return done


def version_tuple(text: str) -> tuple:
    return tuple(int(n) for n in re.findall(r"\d+", text.split("+")[0])[:3])


def wheel_name(path: Path) -> tuple[str, str]:
    """(distribution, version) from a wheel's file name (PEP 427: name-version-...)."""
    name, version = path.name.split("-")[:2]
    return name.replace("_", "-").lower(), version


def stale(dist: str, version: str) -> bool:
    try:
        return version_tuple(importlib.metadata.version(dist)) < version_tuple(version)
    except importlib.metadata.PackageNotFoundError:
        return True


def fetch_wheels(folder: Path) -> int:
    """Here, with PyPI: the wheels of NEEDED and their dependencies for CPython 3.12 on manylinux x86-64, at the
    versions this environment has (what the CPU suite ran with), replacing the folder's wheels."""
    pins = [f"{name}=={importlib.metadata.version(name)}" if not stale(name, "0") else name for name in NEEDED]
    with tempfile.TemporaryDirectory() as tmp:
        platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "--python-version", "3.12"]
        done = subprocess.run([*cmd, "--implementation", "cp", *platforms, "-d", tmp, *pins])
        if done.returncode:
            return done.returncode
        folder.mkdir(exist_ok=True)
        for old in folder.glob("*.whl"):
            old.unlink()
        for wheel in sorted(Path(tmp).glob("*.whl")):
            shutil.move(str(wheel), folder / wheel.name)
    wheels = sorted(folder.glob("*.whl"))
    size = sum(w.stat().st_size for w in wheels) / 2**20
    print(f"{len(wheels)} wheels, {size:.1f} MiB in {folder}:\n  " + "\n  ".join(w.name for w in wheels))
    return 0


# ----- the steps -----


def install(c: Checker, step: Step) -> str | None:
    """The carried wheels whose distribution is missing or older, into a folder put first on PYTHONPATH:
    nothing of the machine's own (torch above all) is touched."""
    wheels = sorted(c.args.wheels.glob("*.whl")) if c.args.wheels.is_dir() else []
    todo = [w for w in wheels if stale(*wheel_name(w))]
    missing = [name for name in NEEDED if stale(name, "0")]
    if not todo:
        if missing:
            raise StepFailed(
                f"{', '.join(missing)} missing and no wheel for it in {c.args.wheels}: run "
                "`python3 tools/gpu_check.py --fetch-wheels` where PyPI is reachable, and carry .whl"
            )
        return f"skipped: nothing missing ({', '.join(f'{n} {importlib.metadata.version(n)}' for n in NEEDED)})"
    site = c.scratch / "site"
    pip = ["-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", "--no-cache-dir"]
    checked(c.python(step, *pip, "--target", str(site), *map(str, todo)))
    c.env["PYTHONPATH"] = os_pathsep(site, c.env["PYTHONPATH"])
    dists = [wheel_name(w)[0] for w in todo]  # what the later steps' Python now finds, at which version
    seen = checked(c.python(step, "-c", f"import importlib.metadata as m; print(*(m.version(d) for d in {dists}))"))
    step.output += "installed: " + ", ".join(f"{d} {v}" for d, v in zip(dists, seen.stdout.split())) + "\n"
    return None


ENVIRONMENT = r"""
import importlib.metadata as md, json, os, platform, shutil, subprocess, sys, torch
def v(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None
facts = {"python": platform.python_version(), "torch": torch.__version__, "cuda (torch)": torch.version.cuda,
         "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
         "cpu cores": os.cpu_count(), "ninja": shutil.which("ninja")}
for name in ("torchvision", "timm", "triton", "numpy", "pandas", "pydantic", "pydantic-core", "scipy", "pyarrow",
             "pytest", "nvidia-dali-cuda130"):
    facts[name] = v(name)
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    facts.update({"gpu": p.name, "gpu memory GiB": round(p.total_memory / 2**30, 1),
                  "compute capability": f"{p.major}.{p.minor}", "multiprocessors": p.multi_processor_count})
    smi = shutil.which("nvidia-smi") and subprocess.run(["nvidia-smi", "--query-gpu=driver_version",
          "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    facts["driver"] = smi or None
print("FACTS " + json.dumps(facts))
"""


def environment(c: Checker, step: Step) -> str | None:
    """Versions and the device; torch against the floor pyproject.toml declares."""
    done = checked(c.python(step, "-c", ENVIRONMENT))
    c.facts = json.loads(done.stdout.split("FACTS ", 1)[1])
    floor = re.search(r'"torch>=([\d.]+)"', (REPO / "pyproject.toml").read_text()).group(1)
    c.facts["bench's torch floor"] = floor
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True)
    edited = " with uncommitted changes (git status)" if changed.stdout.strip() else ""
    c.facts["bench commit"] = (commit.stdout.strip() + edited) or "unknown (no git metadata in the copied tree)"
    if version_tuple(c.facts["torch"]) < version_tuple(floor):
        raise StepFailed(f"torch {c.facts['torch']} is older than bench's floor {floor} (pyproject.toml)")
    if c.cuda and not c.facts.get("gpu"):
        raise StepFailed("torch sees no CUDA device")
    return None


IMPORTS = r"""
import importlib, pkgutil, bench
absent, failed = [], []
for m in pkgutil.walk_packages(bench.__path__, "bench."):
    if m.name.endswith("__main__"):
        continue  # the CLI itself: imports check it, running it is the next command
    try:
        importlib.import_module(m.name)
    except ModuleNotFoundError as e:  # an optional dependency (DALI, wandb): its absence is reported, not failed
        (absent if e.name.split(".")[0] in ("nvidia", "wandb", "tensorboard") else failed).append(f"{m.name}: {e}")
    except Exception as e:
        failed.append(f"{m.name}: {type(e).__name__}: {e}")
for line in [f"optional dependency absent, {a}" for a in absent] + [f"ImportError {f}" for f in failed]:
    print(line)
if failed:
    raise SystemExit(1)
from bench.cli import main  # the CLI answers, in this process (one start instead of three)
for argv in (["--version"], ["validate", "recipes/demo.yaml"]):
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    if code:
        raise SystemExit(f"bench {' '.join(argv)}: exit code {code}")
"""


def imports(c: Checker, step: Step) -> str | None:
    """Every bench module imports on this torch; the CLI answers."""
    checked(c.python(step, "-c", IMPORTS))
    return None


# The optimizers' steps under torch.cuda.set_sync_debug_mode("error"): none waits for the GPU (issue 66)
SYNC_TEST = "tests/test_optim_sync.py::test_steps_run_without_host_sync_on_cuda"


def gpu_tests(c: Checker, step: Step) -> str | None:
    # -n 0: one process, as the tests share one GPU (xdist's workers would each start CUDA for a few tests)
    done = c.python(
        step, "-m", "pytest", "-q", "-rs", "-n", "0", "-p", "no:cacheprovider", "tests/test_gpu.py", SYNC_TEST
    )
    summary = [line for line in done.stdout.splitlines() if re.search(r"\d+ (passed|failed|skipped|error)", line)]
    if done.returncode not in (0, 5):
        raise StepFailed(
            f"{summary[-1].strip('= ') if summary else f'exit code {done.returncode}'}: {first_error(done.stdout)}"
        )
    return ("ok: " + summary[-1].strip("= ")) if summary else None


def perf_train(compile_: bool):
    def step_fn(c: Checker, step: Step) -> str | None:
        if c.args.tiny:
            sizes = ["--model", "resnet8_cifar", "--image-size", "16", "--batch", "4", "--precision", "bf16"]
            sizes += ["--set", "data.loader=torchvision"]  # as on a machine without DALI
            timing = ["--warmup", "1", "--steps", "1", "--repeats", "1"]
        else:
            sizes = ["--model", "resnet50", "--image-size", "224", "--batch", "256", "--precision", "bf16"]
            timing = ["--warmup", "3", "--steps", "4", "--repeats", "6"]  # 6 repeats: the overhead gets an interval
        flags = ["--channels-last", *(["--compile"] if compile_ else [])]
        checked(c.bench(step, "perf", "train", "--device", c.args.device, *sizes, *flags, *timing))
        return None

    return step_fn


def without_cpu_kernels(c: Checker) -> dict:
    """On the CPU, VRGD's fused kernels are C++ compiled on first use (minutes, in a cache other runs share and
    lock); the rehearsal keeps them out (an unwritable cache: bench falls back to the eager code and says so).
    On the GPU they are Triton's, and run."""
    return {} if c.cuda else {"TORCH_EXTENSIONS_DIR": "/proc/bench-gpu-check-no-cpu-kernels"}


def perf_ghost_bn(c: Checker, step: Step) -> str | None:
    """Issue 50 on a GPU: VRGD-LARS's k gradient groups of one micro-batch in one torch.func pass, against the
    groups one by one and against k sequential micro-batches (the same mathematics), side by side."""
    if c.args.tiny:
        sizes = ["--model", "resnet8_cifar", "--image-size", "16", "--batch", "8", "--bn-batch", "2"]
        timing = ["--warmup", "1", "--steps", "1", "--repeats", "1"]
    else:  # ResNet-50's single-GPU VRGD user: 8 groups of 32 in a 256-image micro-batch
        sizes = ["--model", "resnet50", "--image-size", "224", "--batch", "256", "--bn-batch", "32"]
        timing = ["--warmup", "2", "--steps", "2", "--repeats", "3"]
    sizes += ["--micro-batch", sizes[sizes.index("--batch") + 1], "--precision", "bf16", "--channels-last"]
    sizes += ["--set", "optimizer.name=vrgd_lars", "--set", "data.loader=random"]  # the paths, not the decoding
    checked(
        c.bench(step, "perf", "train", "--device", c.args.device, *sizes, *timing, extra_env=without_cpu_kernels(c))
    )
    return None


def perf_optim(c: Checker, step: Step) -> str | None:
    sizes = ["--small", "--repeats", "2"] if c.args.tiny else ["--repeats", "20"]
    checked(c.bench(step, "perf", "optim", "--device", c.args.device, *sizes, extra_env=without_cpu_kernels(c)))
    return None


def run_recipe(c: Checker, tiny: bool, loader: str, epochs: int, every: int) -> list[str]:
    """`bench run` arguments: the demo recipe (the embedded synthetic dataset), at tiny sizes for the rehearsal."""
    sets = {"data.loader": loader, "epochs": epochs, "checkpoint.every_steps": every, "eval.every_epochs": epochs}
    if tiny:  # 4 classes x 8 images, batch 8: 4 steps an epoch
        sets.update(
            {
                "model.name": "resnet8_cifar",
                "data.image_size": 16,
                "data.synth.size": 20,
                "global_batch": 8,
                "micro_batch": 8,
                "data.synth.classes": 4,
                "data.synth.train_per_class": 8,
                "data.synth.val_per_class": 2,
                "schedule.warmup_epochs": 0,
            }
        )
    else:  # the demo as it is (1,000 images, batch 100: 10 steps an epoch), with the machine's cores loading
        sets.update({"data.workers": max(1, min(8, (os.cpu_count() or 2) // 2))})
    return ["recipes/demo-sgd.yaml", "--no-progress", *[a for k, v in sets.items() for a in ("--set", f"{k}={v}")]]


def meta_of(out: Path) -> dict:
    metas = sorted(out.glob("*/*/meta.json"))
    if len(metas) != 1:
        raise StepFailed(f"expected one run in {out}, found {len(metas)}")
    return json.loads(metas[0].read_text())


def describe(meta: dict) -> str:
    """meta.json's facts a reader of the report needs (bench/engine/train.py writes them)."""
    facts = {k: meta.get(k) for k in ("status", "device", "world_size", "loader", "total_steps", "val_size")}
    facts["evaluated_images"] = meta.get("evaluated_images", {}).get("val")
    facts["train_images_per_s"] = round(meta.get("train_images_per_s") or 0, 1)
    facts["resumed_at"] = [r["step"] for r in meta.get("resumed", [])]
    return "run: " + ", ".join(f"{k} {json.dumps(v)}" for k, v in facts.items())


def train_resume(c: Checker, step: Step) -> str | None:
    """A real training run killed after a checkpoint (bench's own crash injection, SIGKILL), then resumed to
    the end: 200 steps on the GPU, 8 in the rehearsal."""
    epochs, every, crash = (2, 3, 4) if c.args.tiny else (20, 50, 120)
    out = c.scratch / "train"
    args = ["run", *run_recipe(c, c.args.tiny, "torchvision", epochs, every), "--out", str(out)]
    killed = c.bench(step, *args, extra_env={"BENCH_CRASH_AT": f"step:{crash}"})
    if killed.returncode != -signal.SIGKILL:
        raise StepFailed(
            f"the run meant to be killed at step {crash} ended with {killed.returncode}: {first_error(killed.stdout)}"
        )
    checked(c.bench(step, *args))
    meta = meta_of(out)
    step.output += describe(meta) + "\n"
    if meta.get("status") != "completed" or [r["step"] for r in meta.get("resumed", [])] != [crash - crash % every]:
        raise StepFailed(f"expected a completed run resumed once from step {crash - crash % every}: {describe(meta)}")
    return None


def torchrun(c: Checker, step: Step) -> str | None:
    """`torchrun --standalone --nproc-per-node 1 -m bench run ...`: one rank through the process group (NCCL on
    the GPU, gloo in the rehearsal)."""
    out = c.scratch / "torchrun"
    launcher = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1", "-m", "bench", "run"]
    checked(c.python(step, *launcher, *run_recipe(c, c.args.tiny, "torchvision", 2, 1000), "--out", str(out)))
    meta = meta_of(out)
    step.output += describe(meta) + "\n"
    done = meta.get("status") == "completed" and meta.get("world_size") == 1
    counted = meta.get("evaluated_images", {}).get("val") == meta.get("val_size")  # each image once, as one rank
    if not (done and counted and str(meta.get("device")).startswith(c.args.device)):
        raise StepFailed(
            f"expected a completed one-rank {c.args.device} run evaluating each image once: {describe(meta)}"
        )
    return None


def dali(c: Checker, step: Step) -> str | None:
    """DALI's GPU pipeline (nvJPEG decoding on the GPU): a short run with data.loader=dali where DALI imports."""
    if not c.facts.get("nvidia-dali-cuda130"):
        return (
            "skipped: NOT CHECKED: nvidia.dali is not installed here (its wheel is far over what a lent "
            "machine's call can carry); docs/performance.md says what to run where it is"
        )
    out = c.scratch / "dali"
    checked(c.bench(step, "run", *run_recipe(c, c.args.tiny, "dali", 2, 1000), "--out", str(out)))
    step.output += describe(meta_of(out)) + "\n"
    return None


def matrix_row(row: str):
    """One row of the candidate matrix (bench/perf/matrix.py) in a process of its own, its JSON into the scratch
    folder for matrix-report. The rehearsal runs torch.compile's candidates eagerly (TORCH_COMPILE_DISABLE: a CPU
    compile takes minutes; tests/test_candidates.py compiles them) and without the CPU kernels."""

    def step_fn(c: Checker, step: Step) -> str | None:
        left = min(c.step_deadline, c.deadline - MATRIX_REPORT_S) - time.monotonic() - MATRIX_EXIT_S
        if left < MIN_STEP_S:
            return "skipped: the budget is spent (matrix-report keeps its time)"
        env = without_cpu_kernels(c) | ({} if c.cuda else {"TORCH_COMPILE_DISABLE": "1"})
        sizes = ["--tiny"] if c.args.tiny else []
        json_file = str(c.scratch / f"matrix-{row}.json")
        module = ["-m", "bench.perf.matrix", row, "--device", c.args.device, "--budget", f"{left:.0f}", *sizes]
        checked(c.python(step, *module, "--json", json_file, extra_env=env))
        return None

    return step_fn


def matrix_report(c: Checker, step: Step) -> str | None:
    """matrix.json, matrix.md and defaults-proposal.json into --out (bench/defaults.json too with
    --write-defaults); a row whose step did not finish is "not measured" there."""
    files = [str(c.scratch / f"matrix-{row}.json") for row in MATRIX_ROWS]
    writes = ["--write-defaults"] if c.args.write_defaults else []
    checked(c.python(step, "-m", "bench.perf.matrix", "report", *files, "--out", str(c.out), *writes))
    return None


STEPS = [  # name, title, cap on a GPU (s), CUDA only, function
    ("install", "install the carried wheels (pydantic ...)", 15, False, install),
    ("environment", "versions, device, torch floor", 15, False, environment),
    ("imports", "every bench module imports; bench --version; bench validate", 25, False, imports),
    ("gpu-tests", "pytest tests/test_gpu.py and the optimizer steps without host sync", 110, False, gpu_tests),
    ("perf-train", "bench perf train: ResNet-50, 224 px, bf16, channels_last, batch 256", 70, False, perf_train(False)),
    ("perf-train-compile", "the same with torch.compile", 90, True, perf_train(True)),
    (
        "perf-ghost-bn",
        "bench perf train: VRGD-LARS's 8 groups in one pass vs one by one vs micro-batches; ghost vs torch's BatchNorm",
        60,
        False,
        perf_ghost_bn,
    ),
    (
        "perf-optim",
        "bench perf optim: LARS, VRGD-LARS against torch's fused SGD (issue 66's goals), VRGD fused vs eager",
        25,
        False,
        perf_optim,
    ),
    (
        "train-resume",
        "bench run (demo recipe, torchvision loader), killed after a checkpoint, resumed",
        55,
        False,
        train_resume,
    ),
    ("torchrun", "torchrun --nproc-per-node 1 (NCCL; gloo on the CPU)", 30, False, torchrun),
    ("dali", "DALI GPU pipeline", 30, True, dali),
]
MATRIX_REPORT_S = 15
MATRIX_STEPS = [  # --matrix: the caps sum to 465 s of the default 480 (8 minutes)
    STEPS[0],
    STEPS[1],
    (
        "matrix-runner",
        "the runner at each engine.compile candidate beside the bare loop, eager and compiled (ResNet-50, 224 px, "
        "bf16, channels_last, batch 256)",
        230,
        False,
        matrix_row("runner"),
    ),
    (
        "matrix-ghost-bn",
        "the bare loop with ghost BatchNorm 32 in 256 at each engine.ghost_bn candidate against BatchNorm2d, "
        "in both layouts",
        70,
        False,
        matrix_row("ghost_bn"),
    ),
    (
        "matrix-optimizer",
        "LARS's and VRGD-LARS's steps eager, compiled and fused against torch's fused SGD; VRGD's observe()",
        90,
        False,
        matrix_row("optimizer"),
    ),
    (
        "matrix-eval-memory",
        "evaluate() over 10 and 50 batches of 256: peak memory",
        30,
        False,
        matrix_row("eval_memory"),
    ),
    ("matrix-report", "matrix.json, matrix.md, defaults-proposal.json", MATRIX_REPORT_S, False, matrix_report),
]


def write_report(c: Checker, steps: list[Step]) -> None:
    a = c.args
    lines = [
        "# bench GPU check",
        "",
        f"`python3 tools/gpu_check.py --out DIR --device {a.device}{' --tiny' if a.tiny else ''}"
        f"{' --matrix' if a.matrix else ''}{' --write-defaults' if a.write_defaults else ''} --budget {a.budget}`"
        f", {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; sizes: {'tiny (a rehearsal)' if a.tiny else 'full'}",
        "",
        "## Versions and device",
        "",
        *[f"- {k}: {v}" for k, v in c.facts.items()],
        "",
        "## Steps",
        "",
        "| step | what | result | seconds |",
        "| --- | --- | --- | --- |",
        *[f"| {s.name} | {s.title} | {s.status} | {s.seconds:.0f} |" for s in steps],
        "",
    ]
    for s in steps:
        lines += [f"## {s.name}: {s.status}", ""]
        if s.first_error:
            lines += [f"First error line: `{s.first_error}`", ""]
        lines += [f"    $ {cmd}" for cmd in s.commands] + ([""] if s.commands else [])
        if s.figures:
            lines += ["Figures:", "", "```", *s.figures, "```", ""]
        tail = [line for line in s.output.splitlines() if line.strip()][-TAIL:]
        if tail and s.status != "ok":
            lines += [f"Last {len(tail)} lines of output ({LOG} has all):", "", "```", *tail, "```", ""]
    (c.out / REPORT).write_text("\n".join(lines))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", help=f"folder for {REPORT} and {LOG}")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: the rehearsal")
    parser.add_argument("--tiny", action="store_true", help="tiny models and sizes (the CPU rehearsal)")
    parser.add_argument(
        "--budget", type=int, help="seconds for all the steps (default 540: nine minutes; --matrix: 480, eight)"
    )
    parser.add_argument("--only", help="comma-separated step names (default: all)")
    parser.add_argument("--wheels", type=Path, default=WHEELS, help="the carried wheels (default .whl)")
    parser.add_argument("--fetch-wheels", action="store_true", help="download the wheels into --wheels and stop")
    parser.add_argument(
        "--matrix", action="store_true", help="measure the candidate matrix instead (bench/perf/matrix.py; 8 minutes)"
    )
    parser.add_argument(
        "--write-defaults",
        action="store_true",
        help="--matrix: also write the proposed defaults into bench/defaults.json (default: beside the report)",
    )
    args = parser.parse_args(argv)
    if args.write_defaults and not args.matrix:
        parser.error("--write-defaults goes with --matrix")
    args.budget = args.budget or (480 if args.matrix else 540)
    steps_of = MATRIX_STEPS if args.matrix else STEPS
    if args.fetch_wheels:
        return fetch_wheels(args.wheels)
    if not args.out:
        parser.error("--out is required (or --fetch-wheels)")
    chosen = args.only.split(",") if args.only else [name for name, *_ in steps_of]
    unknown = set(chosen) - {name for name, *_ in steps_of}
    if unknown:
        parser.error(f"--only: unknown step {sorted(unknown)}; steps: {', '.join(name for name, *_ in steps_of)}")
    c = Checker(args)
    steps = []
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))  # a timeout's kill: clean up first
    try:
        for name, title, cap, cuda_only, fn in steps_of:
            if name in chosen:
                steps.append(Step(name, title, cap, cuda_only))
                c.run(steps[-1], lambda step, fn=fn: fn(c, step))
                write_report(c, steps)
    except (KeyboardInterrupt, SystemExit):
        steps[-1].status = "INTERRUPTED (this script was stopped)"
        write_report(c, steps)
        raise
    finally:
        shutil.rmtree(c.scratch, ignore_errors=True)
    print(f"\nreport: {c.out / REPORT}")
    for s in steps:  # the figures too: a caller that sees only the end of the output has them
        print(f"  {s.name:<20} {s.status}" + (f" -- {s.first_error}" if s.first_error else ""))
        print("".join(f"      {line}\n" for line in s.figures), end="")
    return 0 if all(s.status.startswith(("ok", "skipped")) for s in steps) else 1


if __name__ == "__main__":
    raise SystemExit(main())
