"""Hand-made run directories (recipe.yaml, meta.json, metrics.csv, events.jsonl) for the analysis tests."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from bench.rundir import METRIC_COLUMNS, OPTIONAL_METRIC_COLUMNS

TOY = {
    "dataset": "synthetic",
    "synth": {"classes": 10, "train_per_class": 100, "val_per_class": 30, "size": 72, "seed": 0},
    "image_size": 64,
    "workers": 1,
    "loader": "auto",
}
IMAGENET = {"dataset": "folder", "path": "/data/imagenet", "image_size": 224, "workers": 8, "loader": "auto"}
IMAGENET_SIZES = {"train_size": 1_281_167, "val_size": 50_000}


def make_run(
    root: Path,
    name: str,
    optimizer: str,
    batch: int,
    seed: int,
    val: list[float],
    train_eval: list[float] | None = None,
    *,
    status: str = "completed",
    target: float = 60.0,
    train_size: int = 1000,
    val_size: int = 300,
    data: dict | None = None,
    model: str = "resnet10t",
    eval_every: float = 1.0,
    epochs: float | None = None,
    lr: float = 0.1,
    data_workers: int | None = None,
    model_kwargs: dict | None = None,
    events: list[dict] | None = None,
    legacy: bool = False,
    holdout: list[float] | None = None,
    run_name: str | None = None,
    meta_extra: dict | None = None,
    **recipe_extra,
) -> Path:
    """A run of `len(val)` evaluations every `eval_every` epochs (of a recipe of `epochs`, default as many as
    evaluated); loss = 1 - top1/100 so gaps are checkable; 10 training seconds per epoch. legacy: metrics.csv
    without the columns added later (schedule_epoch, batch, holdout_*), as runs made before them. holdout: the
    holdout_top1 of each evaluation (default: none, empty cells). run_name: the run folder (default seed<seed>)."""
    run = Path(root) / name / (run_name or f"seed{seed}")
    run.mkdir(parents=True)
    data = dict(data or TOY, **({"workers": data_workers} if data_workers is not None else {}))
    recipe = {
        "name": name,
        "model": {"name": model, "kwargs": model_kwargs or {}},
        "data": data,
        "global_batch": batch,
        "micro_batch": "auto",
        "gsnr_groups": None,
        "optimizer": {"name": optimizer, "lr": lr},
        "epochs": epochs or len(val) * eval_every,
        "seed": seed,
        "eval": {"every_epochs": eval_every},
        "engine": {"compile": False},
        "target_top1": target,
        **recipe_extra,
    }
    (run / "recipe.yaml").write_text(yaml.safe_dump(recipe, sort_keys=False))
    steps_per_epoch = train_size / batch
    rows = []
    train_eval = train_eval or [v + 5 for v in val]
    for i, (v, t) in enumerate(zip(val, train_eval)):
        epoch = (i + 1) * eval_every
        rows.append(
            {
                "epoch": epoch,
                "schedule_epoch": epoch,
                "batch": batch,
                "step": round(epoch * steps_per_epoch),
                "images_seen": round(epoch * train_size),
                "train_time_s": 10.0 * epoch,
                "lr": lr,
                "train_loss": 1.0,
                "train_eval_top1": t,
                "train_eval_loss": 1 - t / 100,
                "val_top1": v,
                "val_top5": min(100.0, v + 20),
                "val_loss": 1 - v / 100,
                "holdout_top1": holdout[i] if holdout else "",
                "holdout_loss": 1 - holdout[i] / 100 if holdout else "",
                "val_images": val_size,
            }
        )
    columns = [c for c in METRIC_COLUMNS if not (legacy and c in OPTIONAL_METRIC_COLUMNS)]
    lines = [",".join(columns)] + [",".join(str(r[c]) for c in columns) for r in rows]
    (run / "metrics.csv").write_text("\n".join(lines) + "\n")
    plan = {"global_batch": batch, "world_size": 1, "accum_steps": 1, "micro_batch": min(batch, 256), "gsnr_groups": 1}
    meta = {
        "status": status,
        "reason": None,
        "plan": plan,
        "train_time_s": 10.0 * len(val) * eval_every,
        "total_steps": round(len(val) * eval_every * steps_per_epoch),
        "train_size": train_size,
        "val_size": val_size,
        **(meta_extra or {}),
    }
    (run / "meta.json").write_text(json.dumps(meta))
    if events:
        (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return run
