"""The published settings and numbers measured runs are compared with.

A measured run sits next to a published number only when its recipe is the
paper's setting, decided from the resolved recipe and the dataset sizes the
runner recorded in the run's meta: one record per setting (catalog.PAPER_SETTINGS),
which `matches` checks and `criteria` states. A scaled-down study on generated
or toy data is never labelled ImageNet or CIFAR-10.
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from pathlib import Path

import pandas as pd

from bench import catalog
from bench.catalog import PaperSetting, reads_files
from bench.errors import UserError

REFERENCE_DIR = Path(__file__).resolve().parents[2] / "results" / "reference"
SETTINGS = catalog.PAPER_SETTINGS
IMAGENET_TRAIN = SETTINGS["imagenet"].train_size  # MLPerf's epochs are ImageNet's (mlperf-epochs, the plots)
MLPERF_TARGET = 75.9  # MLPerf ResNet-50 Top-1 target (%), mlperf_resnet50_rcp.csv
IMAGE_DATASETS = tuple(name for name, d in catalog.DATASETS.items() if d.user_path)  # real images


def matches(setting: PaperSetting, recipe: dict, meta: dict) -> bool:
    """Whether a run (its resolved recipe and meta) is `setting` (its criteria)."""
    model, data = recipe.get("model") or {}, recipe.get("data") or {}
    train, val = meta.get("train_size") or 0, meta.get("val_size") or 0
    if data.get("dataset") not in IMAGE_DATASETS or not reads_files(meta.get("loader") or data.get("loader")):
        return False  # random tensors in ImageNet's shape measure nothing of ImageNet
    return (
        any(fnmatchcase(str(model.get("name", "")), pattern) for pattern in setting.models)
        and (setting.image_size is None or data.get("image_size") == setting.image_size)
        and val == setting.val_size
        and setting.min_train_share * setting.train_size <= train <= setting.train_size
    )


def paper_setting(recipe: dict, meta: dict) -> str:
    """The name of the paper setting (catalog.PAPER_SETTINGS) the run is, else ''."""
    return next((name for name, setting in SETTINGS.items() if matches(setting, recipe, meta)), "")


def criteria(setting: PaperSetting) -> str:
    """The setting's criteria in one sentence (a paper table's first note)."""
    s = setting
    if s.min_train_share < 1:
        sizes = (
            f"{s.val_size:,} validation images and {s.min_train_share * 100:g}-100% of the "
            f"{s.train_size:,} training images"
        )
    else:
        sizes = f"{s.train_size:,} training and {s.val_size:,} validation images"
    parts = [
        s.model_words or "model " + " or ".join(s.models),
        f"data.dataset {' or '.join(IMAGE_DATASETS)}",
        *([f"image_size {s.image_size}"] if s.image_size is not None else []),
        sizes,
    ]
    return f"{s.dataset} setting = {', '.join(parts)}, read as images (data.loader not random)"


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


def setting_label(recipe: dict, meta: dict, paper: str) -> str:
    """A human name for the problem a run solves (model, data, image size, target)."""
    if paper:
        return f"{SETTINGS[paper].label}, target {float(recipe['target_top1']):g}%"
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
