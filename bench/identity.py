"""A run's identity as a seed of a recipe, shared by the runner (it names a run's W&B group) and the analysis (it
groups seeds, bench/analysis/results.py): the resolved recipe less the fields that do not change the mathematics
of training, and a short hash of it. Plain data: no torch, no pandas.
"""

from __future__ import annotations

import hashlib
import json

from bench.catalog import LOADER_ALIASES

# Removed from the resolved recipe before comparing runs for seed aggregation:
# the run's identity (name, seed) and fields that do not change the mathematics
# of training (loader threads, eval batch, how unreadable files are reported,
# checkpoint cadence, compile/memory format, CPU threads, how the gradient groups of a micro-batch, ghost BatchNorm
# and LARS's update are computed:
# these change float rounding at most; the dead-parameter check, which only warns or refuses).
# data.loader is reduced to whether
# it reads the images (auto, dali and torchvision give the same crops) or
# feeds random tensors. micro_batch and gsnr_groups are replaced by the batch
# plan that ran (the run's meta), since `auto` resolves per machine and both change
# the maths (BatchNorm statistics, the VRGD group count k).
SEED_NEUTRAL = (
    ("name",),
    ("seed",),
    ("micro_batch",),
    ("gsnr_groups",),
    ("checkpoint",),
    ("data", "workers"),
    ("data", "eval_batch"),
    ("data", "strict"),
    ("engine", "compile"),
    ("engine", "channels_last"),
    ("engine", "threads"),
    ("engine", "micro_batch_cap"),
    ("engine", "group_pass"),
    ("engine", "ghost_bn"),
    ("engine", "optimizer_step"),
    ("engine", "dead_params"),
    ("optimizer", "fused"),
    ("logging",),
)


def _drop(tree: dict, paths) -> dict:
    out = json.loads(json.dumps(tree))  # a deep copy
    for path in paths:
        node = out
        for part in path[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(path[-1], None)
    return out


def digest(obj) -> str:
    return hashlib.sha1(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:8]


def loader_ran(recipe: dict, meta: dict) -> str:
    """The loader a run used: its meta's (auto resolved where it ran), else the recipe's (old aliases mapped)."""
    loader = meta.get("loader") or (recipe.get("data") or {}).get("loader") or "auto"
    return LOADER_ALIASES.get(loader, loader)


def seed_key(recipe: dict, meta: dict) -> dict:
    """What must be equal for two runs to count as seeds of one recipe (see SEED_NEUTRAL); the loader that ran
    counts (DALI's and torchvision's decoders and resizers round differently, so their numbers differ)."""
    plan = meta.get("plan") or {}
    key = _drop({**recipe, "data": {**(recipe.get("data") or {}), "loader": loader_ran(recipe, meta)}}, SEED_NEUTRAL)
    key["plan"] = {
        "micro_batch": plan.get("micro_batch", recipe.get("micro_batch")),
        "gsnr_groups": plan.get("gsnr_groups", recipe.get("gsnr_groups")),
    }
    return key
