"""Live TensorBoard curves of a run (recipe `logging.tensorboard: true`, `bench run --tensorboard`) and of
finished runs (`bench export tensorboard`).

Three TensorBoard runs inside a run directory's `tensorboard/` folder, one per x axis:

    train/           every events.jsonl scalar (lr, loss, batch, trust ratios, GSNR statistics, noise scale,
                     gain, ...) against the step it was logged for, tags `train/<key>`
    eval/            every metrics.csv column against the step, tags `eval/<column>`
    eval_by_images/  the same against the images seen
and the resolved recipe as text (`recipe`, in train/).

A resumed run continues the same curves without duplicate points: each writer starts with TensorBoard's
purge (`purge_step`), which drops the points a checkpoint did not keep: train/ from the checkpoint's step
on, eval/ after it, eval_by_images/ after its images, as RunDir.reopen cuts events.jsonl and metrics.csv.
The writers are flushed with each checkpoint, so a killed run loses no point its checkpoint keeps.
Only rank 0 writes (it alone has the run directory).
"""

from __future__ import annotations

import math
from pathlib import Path

from bench.errors import require_extra

FOLDER = "tensorboard"


def scalars(row: dict, skip: tuple) -> dict:
    """The finite numbers of a log row, but the keys in `skip` (the x axes)."""
    return {k: float(v) for k, v in row.items() if k not in skip and isinstance(v, (int, float))
            and not isinstance(v, bool) and math.isfinite(v)}


class Curves:
    """The three writers under `root` (a run directory's tensorboard/ folder), resuming at (step, images)."""

    def __init__(self, root: Path, recipe_yaml: str, step: int = 0, images: int = 0):
        require_extra("tensorboard", "logging.tensorboard")
        from torch.utils.tensorboard import SummaryWriter

        root = Path(root)
        self.train = SummaryWriter(root / "train", purge_step=step, flush_secs=30)
        self.eval = SummaryWriter(root / "eval", purge_step=step + 1, flush_secs=30)
        self.by_images = SummaryWriter(root / "eval_by_images", purge_step=images + 1, flush_secs=30)
        if step == 0:
            self.train.add_text("recipe", "```yaml\n" + recipe_yaml + "```", 0)

    def event(self, event: dict) -> None:
        """One events.jsonl line: its scalars against its step."""
        for key, value in scalars(event, ("step",)).items():
            self.train.add_scalar(f"train/{key}", value, event["step"])

    def metrics(self, row: dict) -> None:
        """One metrics.csv row: its columns against the step and against the images seen."""
        step, images = int(row["step"]), int(row["images_seen"])
        for key, value in scalars(row, ("step", "images_seen")).items():
            self.eval.add_scalar(f"eval/{key}", value, step)
            self.by_images.add_scalar(f"eval/{key}", value, images)

    def flush(self) -> None:
        for writer in (self.train, self.eval, self.by_images):
            writer.flush()

    def close(self) -> None:
        for writer in (self.train, self.eval, self.by_images):
            writer.close()


def export(runs, out: Path) -> list[Path]:
    """Curves of finished or unfinished runs (rows of results.load()) into `out`, one folder per run named by
    optimizer, batch and seed, so one TensorBoard (`tensorboard --logdir OUT`) shows a whole sweep."""
    import csv
    import json

    from bench.engine.rundir import whole_lines

    written = []
    for _, run in runs.iterrows():
        path = Path(run["run"])
        folder = Path(out) / run["optimizer"] / f"b{run['global_batch']}" / f"seed{run['seed']}" / \
            f"{run['recipe']}-{path.name}"
        curves = Curves(folder, (path / "recipe.yaml").read_text())
        events = path / "events.jsonl"
        for line in whole_lines(events) if events.is_file() else []:
            curves.event(json.loads(line))
        with open(path / "metrics.csv") as f:
            for row in csv.DictReader(f):
                curves.metrics({k: float(v) for k, v in row.items() if v not in ("", None)})
        curves.close()
        written.append(folder)
    return written
