"""`bench report`: one row per run, with the definitions under the table."""

from __future__ import annotations

import pandas as pd

from bench.analysis.results import DEFINITIONS

COLUMNS = ("recipe", "optimizer", "global_batch", "seed", "status", "epochs", "val_top1", "train_eval_top1",
           "gap_top1", "target_top1", "epochs_to_target")


def render(table: pd.DataFrame) -> str:
    shown = table[list(COLUMNS)].copy()
    text = shown.to_string(index=False, float_format=lambda v: f"{v:.2f}")
    return f"{text}\n\n{DEFINITIONS}"
