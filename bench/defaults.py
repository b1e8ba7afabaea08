"""The measured defaults: which candidate an `auto` key runs on a GPU model, as tools/gpu_check.py --matrix chose.

defaults.json holds, per GPU model (torch.cuda.get_device_name), the candidate of each key below that the matrix
measured fastest there (docs/performance.md, "The candidate matrix"), and how it was measured. A recipe key left at
`auto` runs that candidate; on a CPU, on a GPU the file does not list, or for a key its entry does not name, `auto`
is what bench did before any measurement (TODAY). A recipe that names a candidate runs it everywhere. The matrix
writes its proposal beside its report and edits this file only when told to (--write-defaults: write()).

    {"gpus": {"NVIDIA H200": {"engine.compile": "reduce-overhead",
                              "engine.ghost_bn": {"channels_last": "custom", "contiguous": "batch_norm"},
                              "engine.optimizer_step": "compiled", "optimizer.fused": true,
                              "measured": "tools/gpu_check.py --matrix, <date>, torch <version>, bench <commit>"}}}

The file is read (and checked) by every Trainer, on a CPU too, so a damaged file fails the CPU suite, not a GPU job.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from bench.errors import UserError
from bench.files import atomic_write

FILE = Path(__file__).with_name("defaults.json")
COMPILE = (False, True, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
GHOST = ("batch_norm", "custom")
LAYOUTS = ("channels_last", "contiguous")  # ghost BatchNorm's choice is per input layout, as its auto always was
STEPS = ("eager", "compiled")
# Each key of a GPU's entry -> the candidates it may name. optimizer.fused is what VRGD's `fused: null` runs on that
# GPU: its Triton kernels (true) or the eager code (false); the matrix measures it on VRGD-LARS's step and observe().
CANDIDATES = {
    "engine.compile": COMPILE,
    "engine.ghost_bn": GHOST,
    "engine.optimizer_step": STEPS,
    "optimizer.fused": (True, False),
}
TODAY = {
    "engine.compile": False,
    "engine.ghost_bn": {"channels_last": "custom", "contiguous": "batch_norm"},
    "engine.optimizer_step": "eager",
    "optimizer.fused": False,
}


def gpu_model(device) -> str | None:
    """The name defaults.json lists a GPU under; None on a CPU."""
    import torch

    return torch.cuda.get_device_name(device) if getattr(device, "type", device) == "cuda" else None


def _valid(key: str, value) -> bool:
    if key == "engine.ghost_bn":
        return isinstance(value, dict) and all(k in LAYOUTS and v in GHOST for k, v in value.items())
    return any(type(value) is type(c) and value == c for c in CANDIDATES[key])  # true is not "default", nor 1


def check_entry(where: str, entry) -> dict:
    """`entry` (one GPU model's) if every key names one of its candidates, else a UserError naming `where`."""
    if not isinstance(entry, dict):
        raise UserError(f"{where}: expected an object of keys ({', '.join(CANDIDATES)}), got {entry!r}")
    for key, value in entry.items():
        if key == "measured":
            if not isinstance(value, str):
                raise UserError(f"{where}: measured: expected a sentence saying how, got {value!r}")
        elif key not in CANDIDATES:
            raise UserError(f"{where}: unknown key {key!r}; the keys are {', '.join(CANDIDATES)} and measured")
        elif not _valid(key, value):
            allowed = (
                f"{{layout: one of {GHOST}}} for layouts {LAYOUTS}" if key == "engine.ghost_bn" else CANDIDATES[key]
            )
            raise UserError(f"{where}: {key}: {value!r} is not one of {allowed}")
    return entry


def read(path: Path | None = None) -> dict:
    """The GPU entries {model: entry} of `path` (default FILE, looked up at the call), each checked; a damaged file
    is a UserError in one sentence."""
    path = Path(path or FILE)
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise UserError(f"{path}: cannot read the measured defaults ({e.strerror}); restore it with git") from None
    except ValueError as e:  # json.JSONDecodeError, UnicodeDecodeError
        raise UserError(f"{path}: not valid JSON ({e}); restore it with git or fix that line") from None
    gpus = data.get("gpus") if isinstance(data, dict) else None
    if not isinstance(gpus, dict):
        raise UserError(f'{path}: expected {{"gpus": {{GPU model: {{key: candidate}}}}}} at the top level')
    return {gpu: check_entry(f"{path}: {gpu!r}", entry) for gpu, entry in gpus.items()}


def measured(gpu: str | None, path: Path | None = None) -> dict:
    """The entry of GPU model `gpu` ({} on a CPU or for a GPU the file does not list); the file is checked always."""
    entries = read(path)
    return dict(entries.get(gpu, {})) if gpu else {}


@dataclass(frozen=True)
class Chosen:
    """What a recipe's engine keys run on one device: each `auto` resolved (recorded in the run's meta)."""

    compile: bool | str
    ghost_bn: dict  # input layout -> "batch_norm" | "custom"
    optimizer_step: str
    fused: bool | None  # VRGD's `fused: null` on this GPU: its Triton kernels; None on a CPU (its C++ kernels' rule)
    gpu: str | None  # the GPU model whose entry was read, None where none applied

    def as_dict(self) -> dict:
        return {"compile": self.compile, "ghost_bn": self.ghost_bn, "optimizer_step": self.optimizer_step,
                "fused_null_on_gpu": self.fused, "measured_for": self.gpu}  # fmt: skip


def resolve(engine, device, path: Path | None = None) -> Chosen:
    """The candidates `engine` (a recipe's EngineSpec) runs on `device`: a named one as named, `auto` as the
    device's GPU model's entry says, else TODAY's."""
    gpu = gpu_model(device)
    entry = measured(gpu, path)

    def pick(key: str, value):
        return value if value != "auto" else entry.get(key, TODAY[key])

    ghost = {**TODAY["engine.ghost_bn"], **entry.get("engine.ghost_bn", {})}
    return Chosen(
        compile=pick("engine.compile", engine.compile),
        ghost_bn=ghost if engine.ghost_bn == "auto" else dict.fromkeys(LAYOUTS, engine.ghost_bn),
        optimizer_step=pick("engine.optimizer_step", engine.optimizer_step),
        fused=entry.get("optimizer.fused", TODAY["optimizer.fused"]) if gpu else None,
        gpu=gpu if entry else None,
    )


def vrgd_fused(device, path: Path | None = None) -> bool:
    """VRGD's `fused: null` on `device`: its fused GPU kernels where this GPU model's entry measured them faster."""
    return bool(measured(gpu_model(device), path).get("optimizer.fused", TODAY["optimizer.fused"]))


def write(gpu: str, entry: dict, path: Path | None = None) -> None:
    """Put `entry` in the file as GPU model `gpu`'s (replacing its old one; the other models' kept), atomically."""
    check_entry(f"the entry for {gpu!r}", entry)
    path, data = Path(path or FILE), {}
    if Path(path).exists():
        read(path)  # a damaged file is refused, not overwritten unseen
        data = json.loads(Path(path).read_text())
    data["gpus"] = {**data.get("gpus", {}), gpu: entry}
    atomic_write(path, json.dumps(data, indent=2) + "\n")
