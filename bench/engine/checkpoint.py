"""Checkpoints, in one module: what a checkpoint holds, its file names, its atomic write, its reading and the
pruning of old ones (by the runner, `bench sweep` and `bench clean`). Changing any of these changes this file only.

A checkpoint holds everything needed to continue a run bit for bit (`contents`): the model, the optimizer (with
any VRGD statistics and GSNR momentum), the EMA weights where the recipe keeps them, the loop's progress
(bench.engine.train.Progress: the step to run next, the schedule position, the images seen, the training-time and
loss accumulators), the RNG states (python, numpy, torch CPU and CUDA), the resolved recipe and the training set it
trained on (checked on resume). The data position needs no state: the images of step s are a pure function of s
(bench/data/sampling.py).

Files are `ckpt-<step>.pt` in the run directory, written to a temporary file beside it and renamed
(bench.files.atomic_write), so a crash during a write leaves the previous checkpoint intact; the newest
`checkpoint.keep` are kept while the run goes on; a finished run keeps its final one (`keep_final`) or none. The
names and the pruning import no torch (`bench clean`); writing and reading do.

A checkpoint at one of `checkpoint.at_images` (the first step whose images seen reach it) is also linked as
`kept-<images>.pt`, a name no pruning touches (`bench clean` neither): the points `bench branch` branches from.
`branch` starts another recipe's run from one (bench/branch.py): the same state, its progress translated to the
branch's batch.
"""

from __future__ import annotations

import io
import os
import pickle
import random
import shutil
import zipfile
from pathlib import Path

from bench.engine.faults import crash_point
from bench.errors import UserError
from bench.files import atomic_write

FORMAT = "bench-checkpoint-1"
NAME = "ckpt-{step:09d}.pt"
PATTERN = "ckpt-*.pt"
TEMPORARY = ".ckpt-*.tmp"  # what a crash during a write leaves (atomic_write's temporary beside the file)
KEPT = "kept-{images:012d}.pt"  # a checkpoint.at_images point, kept to the end


# --- names and pruning (no torch) -----------------------------------------------------------------------------


def file_of(run_dir: Path, step: int) -> Path:
    """The checkpoint file of `step` in a run directory."""
    return Path(run_dir) / NAME.format(step=step)


def step_of(path: Path) -> int:
    """The step a checkpoint file holds, from its name."""
    return int(Path(path).stem.split("-")[1])


def saved(run_dir: Path) -> list[Path]:
    """A run's checkpoints, oldest first."""
    return sorted(Path(run_dir).glob(PATTERN))


def kept_file(run_dir: Path, images: int) -> Path:
    """The kept checkpoint of a run at `images` seen (checkpoint.at_images)."""
    return Path(run_dir) / KEPT.format(images=images)


def kept(run_dir: Path) -> dict[int, Path]:
    """A run's kept checkpoints by images seen, in order."""
    found = sorted(Path(run_dir).glob("kept-*.pt"))
    return {int(p.stem.split("-")[1]): p for p in found}


def point_reached(points, before: int, after: int) -> bool:
    """Whether a step from `before` to `after` images seen reached one of checkpoint.at_images."""
    return any(before < p <= after for p in points)


def prune(run_dir: Path, keep: int) -> int:
    """Remove all but the newest `keep` checkpoints of a run, and temporary ones a crash during a write left;
    returns the bytes freed."""
    files = saved(run_dir)
    freed = 0
    for old in files[: len(files) - keep] + list(Path(run_dir).glob(TEMPORARY)):
        freed += old.stat().st_size
        old.unlink(missing_ok=True)
    return freed


# --- contents, writing and reading ----------------------------------------------------------------------------


def contents(trainer, progress) -> dict:
    """What a checkpoint holds (the module docstring), taken from the trainer (bench.engine.train.Trainer) and the
    loop's progress (train.Progress)."""
    return {
        "recipe_yaml": trainer.recipe.to_yaml(),
        "train_set": trainer.train_set,
        "model": trainer.model.state_dict(),
        "optimizer": trainer.opt.state_dict(),
        "progress": vars(progress).copy(),
        "rng": _rng_state(),
        **({"ema": trainer.ema.state_dict()} if trainer.ema is not None else {}),
    }


def save(run_dir: Path, trainer, progress) -> Path:
    """Write the checkpoint of the step `progress` is at atomically, then drop all but the newest
    `checkpoint.keep`."""
    import torch

    step = progress.step
    path = file_of(run_dir, step)
    buf = io.BytesIO()
    torch.save({"format": FORMAT, "step": step, **contents(trainer, progress)}, buf)
    atomic_write(path, buf.getbuffer(), before_rename=lambda: crash_point("checkpoint", step))
    points = trainer.recipe.checkpoint.at_images
    if point_reached(points, progress.images - trainer.pace.batch(progress), progress.images):
        _keep(path, kept_file(run_dir, progress.images))
    prune(run_dir, trainer.recipe.checkpoint.keep)
    return path


def _keep(path: Path, kept_path: Path) -> None:
    """`path` under its kept name too: a hard link (no second copy on disk), else a copy; atomic either way."""
    temporary = kept_path.with_name(f".{kept_path.name}.tmp")
    temporary.unlink(missing_ok=True)
    try:
        os.link(path, temporary)
    except OSError:  # a file system without hard links
        shutil.copyfile(path, temporary)
    os.replace(temporary, kept_path)


def restore(trainer, path: Path) -> dict:
    """Load a checkpoint of the trainer's recipe and training set into its model, optimizer, EMA weights and RNG
    states; returns the loop's progress (Progress's fields)."""
    state = load(path, trainer.recipe)
    _check_train_set(trainer, state, path)
    trainer.model.load_state_dict(state["model"])
    trainer.opt.load_state_dict(state["optimizer"])
    if trainer.ema is not None:
        trainer.ema.load_state_dict(state["ema"])
    _set_rng_state(state["rng"])
    progress = state["progress"]
    if "position" not in progress:  # a fixed-batch checkpoint from before pace.py
        progress = {**progress, "position": float(progress["step"]), "images": progress["step"] * trainer.plan.batch}
    return progress


def branch(trainer, path: Path, same_seed: bool) -> dict:
    """Start the trainer's run (a branch, bench/branch.py) from another recipe's checkpoint: its model, optimizer
    state (momentum, Adam's moments), EMA weights and loss accumulators, its RNG states where the branch keeps the
    reference's seed (`same_seed`: its data stream then continues exactly; another seed draws the images after the
    point from its own order). Returns the progress at the branch's batch: the images seen and the timers carried
    (the branch's meta names the timers it started from: its own cost is the difference), the step and schedule
    position those images make at the branch's batch."""
    state = _read(path)
    _check_train_set(trainer, state, path)
    trainer.model.load_state_dict(state["model"])
    trainer.opt.load_state_dict(state["optimizer"])
    if trainer.ema is not None:
        if "ema" not in state:
            raise UserError(f"{path}: the reference kept no EMA weights, yet the branch evaluates an EMA")
        trainer.ema.load_state_dict(state["ema"])
    if same_seed:
        _set_rng_state(state["rng"])
    progress = dict(state["progress"])
    images, batch = progress["images"], trainer.plan.batch
    if images % batch:
        raise UserError(f"{path}: {images:,} images seen is not a whole number of steps at the branch's batch {batch}")
    step = images // batch
    progress.update(step=step, position=float(step), chunks=0, similarity_sum=0.0, similarity_count=0)
    return progress


def _read(path: Path) -> dict:
    """A bench checkpoint's contents, of any recipe; anything else is a clear error."""
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except (OSError, EOFError, RuntimeError, pickle.UnpicklingError, zipfile.BadZipFile) as e:
        raise UserError(
            f"{path}: unreadable checkpoint ({type(e).__name__}); delete it or start with --restart"
        ) from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise UserError(f"{path}: not a bench checkpoint (expected format {FORMAT}); start with --restart")
    return state


def load(path: Path, recipe) -> dict:
    """Read a checkpoint of this recipe; anything else is a clear error."""
    state = _read(path)
    if not recipe.same_as(state.get("recipe_yaml") or ""):
        raise UserError(f"{path}: checkpoint of a different recipe; resume with the recipe that made it, or --restart")
    return state


def _check_train_set(trainer, state: dict, path: Path) -> None:
    """A resumed run trains on the images its checkpoint was trained on (checkpoints from before this check
    carry no train_set and pass)."""
    saved_set, now = state.get("train_set"), trainer.train_set
    if saved_set is None or saved_set == now:
        return
    was, is_ = saved_set["train_size"], now["train_size"]
    what = f"{was} images then, {is_} now" if was != is_ else f"the same {is_} images count, another file list"
    raise UserError(
        f"{path}: the training set in {trainer.data.root} changed since this checkpoint ({what}); "
        "resume on the same images, or start a new run with --restart"
    )


def _rng_state() -> dict:
    import numpy as np
    import torch

    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict) -> None:
    import numpy as np
    import torch

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
