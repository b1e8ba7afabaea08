"""Live TensorBoard curves of a run (recipe `logging.tensorboard: true`, `bench run --tensorboard`) and of
finished runs (`bench export tensorboard`).

One TensorBoard run per bench run: the run directory's `tensorboard/` folder, as timm and Lightning write
theirs, the split in each tag:

    train/<key>            every events.jsonl scalar (lr, loss, batch, trust ratios, GSNR statistics, noise
                           scale, gain, ...) against the steps done once its step ended (steps_done)
    eval/<column>          every metrics column against the steps done when it was evaluated
    eval_by_images/<column>  the same against the images seen (its own tags: one x axis per chart)
and the resolved recipe as text (`recipe`). One x axis for train/* and eval/*: optimizer steps done, as
the run's metrics count them (events.jsonl numbers a step from 0: its step s is plotted at s + 1), so the
training loss of the step an evaluation followed sits at that evaluation's x. A sweep's run also writes TensorBoard's HParams (the arm, batch,
role, seed, lr, warm-up and the optimizer's keys, with the final val and holdout Top-1) when it finishes, so
the HParams dashboard compares a sweep's trials.

A resumed run holds each point once, in the raw event files too: the folder is written afresh from the run's
own logs (its events and metrics, already cut back to the checkpoint by RunDir.reopen), then goes on
live. No purge marker is needed, so any reader of the event files sees what TensorBoard shows. The writer
is flushed with each checkpoint. Only rank 0 writes (it alone has the run directory).
"""

from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path

from bench.errors import require_extra
from bench.rundir import METRICS, RECIPE, event_lines

FOLDER = "tensorboard"
# The recipe keys a sweep's HParams show (dotted; those a run's recipe lacks are left out), with the
# optimizer's own keys added per run.
HPARAM_KEYS = (
    "tags.arm",
    "global_batch",
    "tags.role",
    "tags.trial",
    "seed",
    "optimizer.name",
    "optimizer.lr",
    "schedule.warmup_epochs",
    "weight_decay",
)
HPARAM_METRICS = ("val_top1", "holdout_top1")


def scalars(row: dict, skip: tuple) -> dict:
    """The finite numbers of a log row, but the keys in `skip` (the x axes)."""
    return {
        k: float(v)
        for k, v in row.items()
        if k not in skip and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    }


def steps_done(event: dict) -> int:
    """The x of an events.jsonl line in the curves: the optimizer steps done once its step ended (its 0-based
    `step` + 1), the count the metrics' `step` is, so train/* and eval/* share one axis (W&B's too)."""
    return int(event["step"]) + 1


def _dotted(recipe: dict, key: str):
    value = recipe
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


class Curves:
    """The writer of one run's curves in `root` (its tensorboard/ folder). `replay`: the run directory whose
    logs are written first (a resumed run, or an export), after clearing `root`."""

    def __init__(self, root: Path, recipe_yaml: str, replay: Path | None = None):
        require_extra("tensorboard", "logging.tensorboard")
        from torch.utils.tensorboard import SummaryWriter

        root = Path(root)
        if replay is not None:
            shutil.rmtree(root, ignore_errors=True)  # what a killed writer left past the checkpoint goes too
        self.recipe_yaml = recipe_yaml
        self.writer = SummaryWriter(root, flush_secs=30)
        self.writer.add_text("recipe", "```yaml\n" + recipe_yaml + "```", 0)
        self.last: dict = {}
        if replay is not None:
            self.replay(Path(replay))

    def replay(self, run: Path) -> None:
        """A run's own logs, as the live writer would have written them."""
        for line in event_lines(run, cut=True):
            self.event(json.loads(line))
        if (run / METRICS).is_file():
            with open(run / METRICS) as f:
                for row in csv.DictReader(f):
                    self.metrics({k: float(v) for k, v in row.items() if v not in ("", None)})

    def event(self, event: dict) -> None:
        """One events.jsonl line: its scalars against the steps done (steps_done)."""
        for key, value in scalars(event, ("step",)).items():
            self.writer.add_scalar(f"train/{key}", value, steps_done(event))

    def metrics(self, row: dict) -> None:
        """One metrics row (rundir.METRIC_COLUMNS): its columns against the step and against the images seen."""
        step, images = int(row["step"]), int(row["images_seen"])
        for key, value in scalars(row, ("step", "images_seen")).items():
            self.writer.add_scalar(f"eval/{key}", value, step)
            self.writer.add_scalar(f"eval_by_images/{key}", value, images)
        self.last = row

    def hparams(self) -> None:
        """TensorBoard's HParams of a sweep's run (recipe tag `sweep`): its searched and fixed keys, its final
        val and holdout Top-1. Nothing for a run outside a sweep."""
        import yaml
        from torch.utils.tensorboard.summary import hparams

        recipe = yaml.safe_load(self.recipe_yaml)
        if not (recipe.get("tags") or {}).get("sweep"):
            return
        keys = list(HPARAM_KEYS) + [f"optimizer.{k}" for k in recipe.get("optimizer") or {} if k not in ("name", "lr")]
        params = {k: v for k in keys if isinstance(v := _dotted(recipe, k), (int, float, str, bool))}
        final = {
            f"hparams/{m}": float(self.last[m])
            for m in HPARAM_METRICS
            if isinstance(self.last.get(m), float) and math.isfinite(self.last[m])
        }
        for summary in hparams(params, final):
            self.writer.file_writer.add_summary(summary)
        for key, value in final.items():  # the HParams table reads its metrics from scalars of these tags
            self.writer.add_scalar(key, value, int(self.last.get("step", 0)))

    def flush(self) -> None:
        self.writer.flush()

    def close(self, finished: bool = False) -> None:
        if finished:
            self.hparams()
        self.writer.close()


def export(runs, out: Path) -> list[Path]:
    """Curves of finished or unfinished runs (rows of results.load()) into `out`, one folder per run named by
    arm, batch, role, trial and seed (a sweep's place; outside a sweep the arm is the optimizer), so one
    TensorBoard (`tensorboard --logdir OUT`) shows a whole sweep. Exporting again rewrites each folder."""
    written = []
    for _, run in runs.iterrows():
        path = Path(run["run"])
        role = run.get("role") if isinstance(run.get("role"), str) else None
        trial = run.get("trial")
        place = f"{role}-t{int(trial):02d}" if role == "trial" and trial == trial and trial is not None else role
        folder = (
            Path(out)
            / str(run["arm"])
            / f"b{run['global_batch']}"
            / (place or "run")
            / f"seed{run['seed']}"
            / f"{run['recipe']}-{path.name}"
        )
        curves = Curves(folder, (path / RECIPE).read_text(), replay=path)
        curves.close(finished=bool(run["finished"]))
        written.append(folder)
    return written
