"""The published settings and numbers measured runs are compared with.

A measured run sits next to a published number only when its recipe is the
paper's setting, decided from the resolved recipe and the dataset sizes the
runner recorded in meta.json (see CRITERIA). A scaled-down study on generated
or toy data is never labelled ImageNet or CIFAR-10.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench import catalog
from bench.catalog import reads_files
from bench.errors import UserError

REFERENCE_DIR = Path(__file__).resolve().parents[2] / "results" / "reference"
IMAGENET_TRAIN, IMAGENET_VAL = 1_281_167, 50_000
CIFAR10_TRAIN, CIFAR10_VAL = 50_000, 10_000
MLPERF_TARGET = 75.9  # MLPerf ResNet-50 Top-1 target (%), mlperf_resnet50_rcp.csv
IMAGE_DATASETS = tuple(name for name, d in catalog.DATASETS.items() if d.user_path)  # real images

CRITERIA = {
    "imagenet": (
        f"ImageNet setting = model resnet50, data.dataset folder or filelist, image_size 224, "
        f"{IMAGENET_VAL:,} validation images and 99-100% of the {IMAGENET_TRAIN:,} training images"
    ),
    "cifar10": (
        f"CIFAR-10 setting = He et al.'s ResNet-56 (a model named resnet56*, as bench's resnet56_cifar), "
        f"data.dataset folder or filelist, {CIFAR10_TRAIN:,} training and {CIFAR10_VAL:,} validation images"
    ),
}
CRITERIA = {k: v + ", read as images (data.loader not random)" for k, v in CRITERIA.items()}
LABELS = {"imagenet": "ImageNet-1k, ResNet-50, 224 px", "cifar10": "CIFAR-10, ResNet-56"}
# The target each VRGD table judges with: the paper's own (Table 2 states the MLPerf v0.5 target, not today's
# 75.9% of MLPERF_TARGET, which `mlperf-epochs` keeps), and where the paper states it.
PAPER_TARGETS = {"imagenet": (74.9, "Table 2's target, MLPerf v0.5"), "cifar10": (93.03, "Table 5's target")}

# Published method name -> the optimizer names (bench.optim registry) measured for it.
MEASURED_AS = {
    "momentum": ("sgd",),
    "vrgd_momentum": ("vrgd_sgd",),
    "adam": ("adam", "adamw"),
    "vrgd_adam": ("vrgd_adam",),
    "lamb": ("lamb",),
    "vrgd_lamb": ("vrgd_lamb",),
    "lars": ("lars",),
    "vrgd_lars": ("vrgd_lars",),
}
DISPLAY = catalog.DISPLAY  # optimizer (and conventional arm) name -> display name


def display(name: str) -> str:
    return DISPLAY.get(name, name)


def _is_resnet56(model: dict) -> bool:
    """He et al.'s CIFAR ResNet-56 (bench/models.py), not a reshaped ImageNet ResNet (7x7 stem, max-pool)."""
    return str(model.get("name", "")).startswith("resnet56")


def paper_setting(recipe: dict, meta: dict) -> str:
    """'imagenet' or 'cifar10' when the run is that paper's setting (CRITERIA), else ''."""
    model, data = recipe.get("model") or {}, recipe.get("data") or {}
    train, val = meta.get("train_size") or 0, meta.get("val_size") or 0
    if data.get("dataset") not in IMAGE_DATASETS or not reads_files(meta.get("loader") or data.get("loader")):
        return ""  # random tensors in ImageNet's shape measure nothing of ImageNet
    if (
        model.get("name") == "resnet50"
        and data.get("image_size") == 224
        and val == IMAGENET_VAL
        and 0.99 * IMAGENET_TRAIN <= train <= IMAGENET_TRAIN
    ):
        return "imagenet"
    if _is_resnet56(model) and train == CIFAR10_TRAIN and val == CIFAR10_VAL:
        return "cifar10"
    return ""


def setting_label(recipe: dict, meta: dict, paper: str) -> str:
    """A human name for the problem a run solves (model, data, image size, target)."""
    if paper:
        return f"{LABELS[paper]}, target {float(recipe['target_top1']):g}%"
    return f"{model_label(recipe.get('model') or {})} on {data_label(recipe, meta)}"


def model_label(model: dict) -> str:
    """The timm model name with its kwargs, e.g. 'resnet18(channels=[44, 88, 176, 352], layers=[1, 1, 1, 1])'."""
    kwargs = model.get("kwargs") or {}
    return model.get("name", "?") + (f"({', '.join(f'{k}={v}' for k, v in sorted(kwargs.items()))})" if kwargs else "")


def model_shape(model: dict) -> str:
    """A short model name: 'resnet18 1x1x1x1 ch44-88-176-352' for kwargs layers and channels, other kwargs as k=v."""
    kwargs = dict(model.get("kwargs") or {})
    parts = [str(model.get("name", "?"))]
    if isinstance(kwargs.get("layers"), (list, tuple)):
        parts.append("x".join(map(str, kwargs.pop("layers"))))
    if isinstance(kwargs.get("channels"), (list, tuple)):
        parts.append("ch" + "-".join(map(str, kwargs.pop("channels"))))
    parts += [f"{k}={v}" for k, v in sorted(kwargs.items())]
    return " ".join(parts)


def data_label(recipe: dict, meta: dict) -> str:
    """The problem without the model: data, image size and target."""
    data = recipe.get("data") or {}
    target = f"target {float(recipe['target_top1']):g}%"
    train = meta.get("train_size")
    images = f"{train:,} train images" if train else "train size unknown"
    dataset = data.get("dataset", "?")
    record = catalog.DATASETS.get(dataset)
    if not reads_files(data.get("loader")):
        what = f"random tensors (data.loader random, {images})"
    elif record is not None and not record.user_path:  # generated by bench: its name and, if it has them, classes
        section = data.get(record.section) or {}
        classes = f"{section['classes']} classes, " if "classes" in section else ""
        what = f"{record.label} ({classes}{images})"
    else:
        what = f"{dataset} {data.get('path')} ({images})"
    return f"{what}, {data.get('image_size', '?')} px, {target}"


def reference(stem: str) -> tuple[pd.DataFrame, str]:
    """A published table from results/reference/<stem>.csv and its source (the '#' lines)."""
    path = REFERENCE_DIR / f"{stem}.csv"
    try:
        text = path.read_text()
    except OSError:
        raise UserError(f"{path}: the published reference table is missing (restore results/reference/)") from None
    source = " ".join(line.lstrip("# ").strip() for line in text.splitlines() if line.startswith("#"))
    return pd.read_csv(path, comment="#"), source
