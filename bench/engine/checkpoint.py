"""Checkpoints: everything needed to continue a run bit for bit.

A checkpoint holds the model, the optimizer (with any VRGD statistics and
GSNR momentum), the step to run next, the training-time and loss
accumulators, and the RNG states (python, numpy, torch CPU and CUDA). The data
position needs no state: the images of step s are a pure function of s
(bench/data/sampling.py).

Files are `ckpt-<step>.pt` in the run directory, written to a temporary file
and renamed, so a crash during a write leaves the previous checkpoint intact;
the newest `keep` are kept while the run goes on; a finished run keeps its final one (`keep_final`) or none.
"""

from __future__ import annotations

import io
import pickle
import random
import zipfile
from pathlib import Path

import numpy as np
import torch

from bench.engine.faults import crash_point
from bench.errors import UserError
from bench.files import atomic_write
from bench.rundir import checkpoint_path, prune_checkpoints

FORMAT = "bench-checkpoint-1"


def rng_state() -> dict:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save(run_dir: Path, step: int, state: dict, keep: int) -> Path:
    """Write the checkpoint for `step` atomically, then drop all but the newest `keep`."""
    path = checkpoint_path(run_dir, step)
    buf = io.BytesIO()
    torch.save({"format": FORMAT, "step": step, **state}, buf)
    atomic_write(path, buf.getbuffer(), before_rename=lambda: crash_point("checkpoint", step))
    prune_checkpoints(run_dir, keep)
    return path


def load(path: Path, recipe) -> dict:
    """Read a checkpoint of this recipe; anything else is a clear error."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except (OSError, EOFError, RuntimeError, pickle.UnpicklingError, zipfile.BadZipFile) as e:
        raise UserError(
            f"{path}: unreadable checkpoint ({type(e).__name__}); delete it or start with --restart"
        ) from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise UserError(f"{path}: not a bench checkpoint (expected format {FORMAT}); start with --restart")
    if not recipe.same_as(state.get("recipe_yaml") or ""):
        raise UserError(f"{path}: checkpoint of a different recipe; resume with the recipe that made it, or --restart")
    return state
