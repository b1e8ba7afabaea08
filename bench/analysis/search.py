"""What each cell of a sweep searched, for the tuning table: the result at the selected point's neighbours
(sensitivity), a selected point on the edge of what was tried, and the hyperparameters the search left fixed.

The search space comes from `<results>/<sweep>.sweep.yaml`, which `bench sweep` writes beside its runs
(bench.sweep.write_space); where a tree has none (made before it existed), the searched keys are those whose
values differ between a cell's trials, and the tables say so. The runs' recipes never carry the space, so
adding it changed no run's identity.

- Neighbours: the tried points with the selected point's other searched keys (the local stage's lr x/÷ factor),
  the nearest lr below and above; without such a point (a quasi-random search ties each lr to one warm-up), the
  nearest lr tried at any other keys, marked '*'.
- Edge: for each searched range, the selected value is the largest or the smallest tried in its cell (diverged
  trials count as tried: an lr that diverged bounds the optimum), so the optimum may lie beyond; the local stage
  (sweep key `local`) steps outward there.
- Fixed: each arm's optimizer options at their values (the recipe's, else the optimizer's defaults), weight decay,
  the BatchNorm batch (micro_batch: BatchNorm normalises each micro-batch) and, for optimizers that keep the
  gradient groups apart, the group count k (global batch / micro-batch by default: tied to the batch).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import pandas as pd

from bench import catalog
from bench.analysis.paper import display
from bench.rundir import read_yaml

if TYPE_CHECKING:
    from bench.analysis.results import Study

SEARCHED_ROLES = ("trial", "local")
NOT_HYPERPARAMETERS = ("fused",)  # options that change the kernels, not the mathematics


def _recipe(study: Study, run: str) -> dict:
    """A run's resolved recipe, from its record in the study (read with today's schema)."""
    return study.record(run).recipe


def dotted(recipe: dict, key: str):
    node = recipe
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def spaces(runs: pd.DataFrame) -> dict[str, dict]:
    """sweep name -> its `.sweep.yaml` (arms, space, local), read beside its runs where one was written."""
    out = {}
    for sweep, run in runs.dropna(subset=["sweep"]).groupby("sweep")["run"].first().items():
        path = Path(run).parent.parent / f"{sweep}.sweep.yaml"
        if path.is_file():
            out[sweep] = read_yaml(path) or {}
    return out


def searched_keys(study: Study, members: pd.DataFrame, space: dict | None) -> dict[str, tuple | None]:
    """key -> its declared (low, high) range (None for a list, or when inferred) for the cell's searched keys."""
    if space is not None:
        return {k: (axis["low"], axis["high"]) if axis.get("values") is None else None for k, axis in space.items()}
    keys = {}
    for key in ("optimizer.lr", "schedule.warmup_epochs", "optimizer.momentum", "weight_decay"):
        if len({dotted(_recipe(study, r), key) for r in members["run"]}) > 1:
            keys[key] = None
    return keys


def _result(row, by_steps: bool, column: str) -> str:
    if row["status"] != "completed" or row[column] != row[column]:
        return "diverged"
    if by_steps:
        steps = row["steps_to_target"]
        return "∞" if math.isinf(steps) else f"{steps:,.0f}"
    return f"{row[column]:.2f}"


def neighbours(study: Study, tried: pd.DataFrame, best, keys: list[str], by_steps: bool, column: str) -> str:
    """'÷1.41: R · ×1.41: R' at the nearest lr below and above the selected one (see the module docstring)."""
    lr = "optimizer.lr"
    if best is None or lr not in keys:
        return ""
    values = {r: dotted(_recipe(study, r), lr) for r in tried["run"]}
    at = values[best["run"]]
    others = [k for k in keys if k != lr]
    chosen = _recipe(study, best["run"])
    same = tried[[all(dotted(_recipe(study, r), k) == dotted(chosen, k) for k in others) for r in tried["run"]]]
    parts = []
    for side, below in (("÷", True), ("×", False)):
        for pool, mark in ((same, ""), (tried, "*")):
            pool = pool[[(values[r] < at) if below else (values[r] > at) for r in pool["run"]]]
            if len(pool):
                row = pool.loc[pool["run"].map(values).sub(at).abs().idxmin()]
                ratio = at / values[row["run"]] if below else values[row["run"]] / at
                parts.append(f"{side}{ratio:.2f}{mark}: {_result(row, by_steps, column)}")
                break
    return " · ".join(parts)


def edges(study: Study, tried: pd.DataFrame, best, keys: dict[str, tuple | None]) -> str:
    """The searched keys whose selected value is the largest or smallest tried in the cell, with the range."""
    if best is None:
        return ""
    out = []
    for key, declared in keys.items():
        values = [dotted(_recipe(study, r), key) for r in tried["run"]]
        values = [v for v in values if isinstance(v, (int, float))]
        chosen = dotted(_recipe(study, best["run"]), key)
        if len(set(values)) < 2 or chosen not in (min(values), max(values)):
            continue
        where = "largest" if chosen == max(values) else "smallest"
        span = f"; range {declared[0]:g}-{declared[1]:g}" if declared else ""
        out.append(f"{key.split('.')[-1]} {chosen:.3g}: the {where} tried{span}")
    return "; ".join(out)


def fixed(study: Study, members: pd.DataFrame, keys) -> str:
    """The arm's optimizer options the search left alone, with their values (the recipe's, else the defaults),
    and its weight decay."""
    recipe = _recipe(study, members["run"].iloc[0])
    opt = recipe["optimizer"]
    values = {"weight_decay": None, **catalog.OPTIMIZERS[opt["name"]].defaults, **opt}  # the catalog's defaults
    values["weight_decay"] = recipe.get("weight_decay")
    return ", ".join(
        f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}"
        for k, v in values.items()
        if k not in ("name", "lr", *NOT_HYPERPARAMETERS) and not {k, f"optimizer.{k}"} & set(keys) and v is not None
    )


def group_text(study: Study, members: pd.DataFrame) -> str:
    """'BatchNorm batch m' (ghost BatchNorm's model.bn_batch where set, else the micro-batch) and, where the
    optimizer keeps the groups apart, 'k G (I images a group)'."""
    row = members.iloc[0]
    recipe = _recipe(study, row["run"])
    text = f"BatchNorm batch {(recipe.get('model') or {}).get('bn_batch') or recipe.get('micro_batch')}"
    if not catalog.OPTIMIZERS[row["optimizer"]].reduces_gradients:
        return text
    k = int(row["plan_groups"])
    return f"{text}, k {k} ({int(row['plan_batch']) // k} images a group)"


class Search(NamedTuple):
    """A cell's search as the tuning table reads it (cell_search)."""

    tried: pd.DataFrame  # its finished trials, each recipe once
    best: pd.Series | None  # the selected one (rank's first)
    keys: dict  # the searched keys -> their declared range (None: not declared)
    by_steps: bool  # selected on steps to the target
    column: str  # the Top-1 it ranked on
    inferred: str | None  # the sweep whose space was inferred from its trials (no .sweep.yaml), else None


def cell_search(study: Study, runs: pd.DataFrame, c: pd.Series, found: dict, rank) -> Search | None:
    """Cell c's search (`runs`: the study's sweep runs; `found`: spaces(runs); `rank`: cells.rank_trials); None
    where it has no finished trial."""
    members = runs[(runs["arm"] == c["arm"]) & (runs["global_batch"] == c["global_batch"])]
    tried = members[members["role"].isin(SEARCHED_ROLES) & members["finished"]]
    tried = tried.drop_duplicates("recipe", keep="last")
    if not len(tried):
        return None
    by_steps = c["select_metric"] == "steps_to_target"
    column = selection_column(tried, by_steps)
    scored = tried[(tried["status"] == "completed") & tried[column].notna()]
    ranked = rank(scored, column, by_steps)
    sweep = members["sweep"].dropna().iloc[0] if members["sweep"].notna().any() else None
    arm_space = ((found.get(sweep) or {}).get("arms") or {}).get(c["arm"], {}).get("space")
    keys = searched_keys(study, tried, arm_space)
    best = ranked.iloc[0] if len(ranked) else None
    return Search(tried, best, keys, by_steps, column, sweep if arm_space is None else None)


def edges_by_cell(study: Study, runs: pd.DataFrame, table_cells: pd.DataFrame, rank) -> dict[tuple[str, int], str]:
    """(arm, batch) -> the searched keys whose selected value is the largest or smallest tried (edges), where
    some is."""
    found = spaces(runs)
    out = {}
    for _, c in table_cells.iterrows():
        if (cell := cell_search(study, runs, c, found, rank)) and (
            text := edges(study, cell.tried, cell.best, cell.keys)
        ):
            out[(c["arm"], int(c["global_batch"]))] = text
    return out


def add_columns(table, study: Study, runs: pd.DataFrame, table_cells: pd.DataFrame, rank) -> None:
    """Append the search's columns (neighbours, edge, BatchNorm batch and k) and notes (the fixed hyperparameters,
    where the space came from) to the tuning table, whose rows follow `table_cells` (of `runs`, the study's sweep
    runs; their recipes from the study's records). `rank`: cells.rank_trials."""
    found = spaces(runs)
    table.columns += ["lr neighbours (÷ · ×)", "on the edge of the search", "BatchNorm batch, groups k"]
    inferred, held = set(), {}
    for row, (_, c) in zip(table.rows, table_cells.iterrows()):
        cell = cell_search(study, runs, c, found, rank)
        if cell is None:
            row += ["", "", ""]
            continue
        inferred.add(cell.inferred)
        row += [
            neighbours(study, cell.tried, cell.best, list(cell.keys), cell.by_steps, cell.column),
            edges(study, cell.tried, cell.best, cell.keys),
            group_text(study, cell.tried),
        ]
        held.setdefault(display(c["arm"]), fixed(study, cell.tried, cell.keys))
    table.notes += [
        "lr neighbours: the selection result (steps to the target, or the selection Top-1) at the nearest lr tried "
        "below (÷ its ratio) and above (×) the selected one, at the selected point's other searched keys (the "
        "sweep's local stage); '*': no such point, the nearest lr at other keys (a quasi-random search ties each "
        "lr to one warm-up), so the step mixes both. A neighbour that moves the result by more than the effect "
        "under test means the search is coarser than that effect.",
        "on the edge of the search: the selected value of a searched key is the largest or smallest tried in its "
        "cell (a diverged trial counts as tried), so the optimum may lie beyond it; sweep key `local` steps "
        "outward from such a point.",
        "BatchNorm batch, groups k: fixed, not searched: each micro-batch is normalised alone; an optimizer that "
        "keeps gradient groups apart (VRGD) gets k groups, so with a fixed BatchNorm batch k grows with the global "
        "batch.",
        "Fixed, not searched (the runs' values: the recipe's, else the optimizer's defaults): "
        + "; ".join(f"{arm}: {values}" for arm, values in held.items())
        + ".",
    ]
    if inferred - {None}:
        table.notes.append(
            f"No .sweep.yaml beside the runs of {', '.join(sorted(inferred - {None}))} (written by bench sweep since "
            "the local stage): the searched keys are those whose values differ between a cell's trials, and the "
            "declared ranges are not known."
        )


def selection_column(trials: pd.DataFrame, by_steps: bool) -> str:
    """The Top-1 the sweep ranked on: val_top1 for select.metric steps_to_target (the sweep accepts only
    select.split validation there), else holdout_top1 when the trials held images out, else val_top1."""
    return "holdout_top1" if not by_steps and trials["holdout_top1"].notna().any() else "val_top1"
