"""Weights & Biases curves of a run (recipe `logging.wandb: {project: ...}`), the second optional writer beside
TensorBoard (bench.engine.tensorboard), with the same scalars:

    train/<key>   every events.jsonl scalar against `step`, the steps done once its step ended (steps_done)
    eval/<col>    every metrics column against `step`, the steps done (and `images_seen` is logged beside it)
and the resolved recipe as the W&B config, tagged by optimizer, batch and seed.

Offline by default (`mode: offline` writes <run>/wandb/offline-run-*; `wandb sync` uploads them later):
clusters rarely reach the internet from compute nodes, and a benchmark must not depend on a web service.

W&B cannot take points back (TensorBoard's purge has no W&B twin), so this writer sends a point only
once a checkpoint keeps it: points wait in memory and go out with each checkpoint (flush), and the
ones a killed or failed run had not checkpointed are dropped (close), as RunDir.reopen cuts the run's events
and metrics. The W&B run id is fixed by the run directory, so a resumed run continues the same W&B
run, and never sends a point twice; the price is that W&B lags the run by at most one checkpoint interval.
Only rank 0 writes (it alone has the run directory).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from bench.engine.tensorboard import scalars, steps_done
from bench.errors import require_extra

FOLDER = "wandb"


def run_id(run: Path) -> str:
    """The W&B run id of a run directory: readable (recipe and start time) and unique (its absolute path)."""
    run = Path(run).resolve()
    readable = re.sub(r"[^A-Za-z0-9_.-]", "-", f"{run.parent.name}-{run.name}")[:48]
    return f"{readable}-{hashlib.sha1(str(run).encode()).hexdigest()[:8]}"


class WandbCurves:
    """A W&B run for the run directory `path`, sending points as checkpoints keep them."""

    def __init__(
        self, path: Path, spec, recipe: dict, tags: list[str], group: str, job_type: str, resumed_at: int | None = None
    ):
        require_extra("wandb", "logging.wandb")
        import wandb

        self._pending: list[dict] = []
        # resume="allow": the id names this run directory, so a resumed run (or a requeued job) continues its
        # W&B run and a new directory starts a new one; group: the seeds of one recipe; job_type: a sweep's role
        self.run = wandb.init(
            project=spec.project,
            entity=spec.entity,
            mode=spec.mode,
            dir=str(path),
            id=run_id(path),
            resume="allow",
            name=run_id(path),
            config=recipe,
            tags=tags + (["resumed"] if resumed_at else []),
            group=group,
            job_type=job_type,
            settings=wandb.Settings(console="off", silent=True, x_disable_stats=True, save_code=False),
        )
        if resumed_at:  # the segment says where it took over
            self.run.summary["bench/resumed_at_step"] = resumed_at
        self.run.define_metric("step")
        self.run.define_metric("images_seen")
        self.run.define_metric("train/*", step_metric="step")
        self.run.define_metric("eval/*", step_metric="step")

    def event(self, event: dict) -> None:
        """One events.jsonl line, held until a checkpoint keeps it."""
        self._pending.append(
            {"step": steps_done(event), **{f"train/{k}": v for k, v in scalars(event, ("step",)).items()}}
        )

    def metrics(self, row: dict) -> None:
        """One metrics row (rundir.METRIC_COLUMNS), held until a checkpoint keeps it."""
        self._pending.append(
            {
                "step": int(row["step"]),
                "images_seen": int(row["images_seen"]),
                **{f"eval/{k}": v for k, v in scalars(row, ("step", "images_seen")).items()},
            }
        )

    def flush(self) -> None:
        """A checkpoint now keeps every held point: send them."""
        for point in self._pending:
            self.run.log(point)
        self._pending = []

    def close(self, finished: bool = False) -> None:
        """End the W&B run; points no checkpoint keeps are dropped (a resumed run logs them again)."""
        self._pending = []
        self.run.finish()
