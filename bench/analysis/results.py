"""Load run directories into one DataFrame with the metrics users compare.

Definitions (also printed under every report):
- val_top1: validation Top-1 (%) at the last evaluation; best_val_top1 the maximum.
- train_eval_top1: Top-1 (%) on the fixed train-eval subset (training images,
  validation transforms, as many as the validation set) at the last evaluation.
- gap_top1 = train_eval_top1 - val_top1 (percentage points), the generalization gap.
- epochs_to_target: epoch of the first evaluation with val_top1 >= target_top1;
  infinity when no evaluation reached it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import yaml

from bench.errors import UserError

DEFINITIONS = (
    "val_top1 / train_eval_top1: Top-1 (%) at the last evaluation; gap = train_eval_top1 - val_top1 (pp); "
    "epochs_to_target: first evaluation with val_top1 >= target_top1 (inf = never reached)."
)


def find_runs(paths: list[str | Path]) -> list[Path]:
    """Run directories (folders holding meta.json) at or below each path."""
    runs = []
    for p in map(Path, paths):
        if not p.exists():
            raise UserError(f"{p}: no such run or results directory")
        found = [p] if (p / "meta.json").is_file() else sorted(m.parent for m in p.rglob("meta.json"))
        if not found:
            raise UserError(f"{p}: no run directories (folders with meta.json) found")
        runs += found
    return runs


def load_metrics(run: Path) -> pd.DataFrame:
    path = run / "metrics.csv"
    return pd.read_csv(path) if path.is_file() else pd.DataFrame()


def summarize(run: Path) -> dict:
    """One row of the report for one run directory."""
    try:
        meta = json.loads((run / "meta.json").read_text())
        recipe = yaml.safe_load((run / "recipe.yaml").read_text())
    except (OSError, ValueError, yaml.YAMLError) as e:
        raise UserError(f"{run}: not a readable run directory ({e})") from None
    metrics = load_metrics(run)
    target = recipe["target_top1"]
    row = {
        "recipe": recipe["name"], "optimizer": recipe["optimizer"]["name"], "global_batch": recipe["global_batch"],
        "seed": recipe["seed"], "status": meta.get("status"), "run": str(run),
        "epochs": math.nan, "val_top1": math.nan, "best_val_top1": math.nan, "val_top5": math.nan,
        "train_eval_top1": math.nan, "gap_top1": math.nan, "target_top1": target, "epochs_to_target": math.inf,
        "train_time_s": meta.get("train_time_s", math.nan),
    }
    if not metrics.empty:
        last = metrics.iloc[-1]
        reached = metrics[metrics["val_top1"] >= target]
        row.update(
            epochs=last["epoch"], val_top1=last["val_top1"], best_val_top1=metrics["val_top1"].max(),
            val_top5=last["val_top5"], train_eval_top1=last["train_eval_top1"],
            gap_top1=last["train_eval_top1"] - last["val_top1"],
            epochs_to_target=reached["epoch"].iloc[0] if len(reached) else math.inf,
        )
    return row


def load(paths: list[str | Path]) -> pd.DataFrame:
    return pd.DataFrame([summarize(r) for r in find_runs(paths)])
