"""The registry of optimizer names and the factory: `create`, `check`, `param_groups`.

Adding an optimizer: its class in its own module, its record in bench/catalog.py (REGISTRY is built from the
catalog; a rule in catalog.RULES for each new constructor argument), and its tests (docs/extending.md:
"Adding an optimizer"; tests/test_catalog.py holds the record to the class).
"""

import inspect
from collections.abc import Mapping

import torch
from torch import nn

from bench import catalog

from .base import GroupOptimizer
from .library import Library, adapt


class _Registry(Mapping):
    """name -> class, from the catalog; a library record's class is built when first asked for (its package may
    not be installed: then one sentence, UserError, names it)."""

    def __init__(self):
        self._built = {name: r.load() for name, r in catalog.OPTIMIZERS.items() if not r.library}

    def __getitem__(self, name: str) -> type:
        if name not in self._built:
            record = catalog.OPTIMIZERS[name]  # KeyError for a name without a record
            self._built[name] = adapt(record) if record.library else record.load()
        return self._built[name]

    def __iter__(self):
        return iter(catalog.OPTIMIZERS)

    def __len__(self) -> int:
        return len(catalog.OPTIMIZERS)


NAMES = tuple(catalog.OPTIMIZERS)
REGISTRY = _Registry()


def hyperparameters(cls: type) -> dict:
    """The keyword arguments an optimizer class accepts, with their defaults (lr has none: None).

    Walks the class hierarchy, so a VRGD variant lists VRGD's options and its base optimizer's.
    """
    found = {}
    for klass in reversed(cls.__mro__):
        if issubclass(klass, GroupOptimizer) and klass is not GroupOptimizer and "__init__" in vars(klass):
            found.update(_keywords(klass.__init__))
            if klass is Library:  # a library's optimizer: its class's keyword arguments are the options
                found.update(_keywords(cls.library.__init__))
    return {**found, **{k: v for k, v in getattr(cls, "presets", {}).items() if k in found}}


def _keywords(function) -> dict:
    return {
        name: None if arg.default is arg.empty else arg.default
        for name, arg in inspect.signature(function).parameters.items()
        if name not in ("self", "params") and arg.kind not in (arg.VAR_KEYWORD, arg.VAR_POSITIONAL)
    }


def check(name: str, hparams: dict) -> type:
    """Validate an optimizer name and its hyperparameters (lr, weight_decay and the options); return its class.

    Raises UserError for an unknown name, an unknown hyperparameter or a bad value (catalog.check_optimizer).
    """
    catalog.check_optimizer(name, hparams)
    return REGISTRY[name]


def default_exclude(p: torch.Tensor) -> bool:
    """BatchNorm weights and biases and every bias: the tensors with ndim <= 1."""
    return p.ndim <= 1


def param_groups(model_or_params, exclude=default_exclude) -> list:
    """Param groups for a module, an iterable of tensors or of (name, tensor) pairs (named_parameters()):
    excluded tensors (`exclude(p)` true) go in a group with weight_decay=0 and adapt=False (no trust
    ratio; LARS and LAMB read it). Names are kept where torch.optim keeps them, group["param_names"]
    (VRGD's gsnr_norm="layer" reads them). A list of param-group dicts is returned as given.
    exclude=None excludes nothing."""
    if isinstance(model_or_params, nn.Module):
        named = [(name, p) for name, p in model_or_params.named_parameters() if p.requires_grad]
    else:
        items = list(model_or_params)
        if items and isinstance(items[0], dict):
            return items
        named = items if items and isinstance(items[0], tuple) else [(None, p) for p in items]
    flags = [exclude is not None and exclude(p) for _, p in named]
    kept = [pair for pair, flag in zip(named, flags) if not flag]
    excluded = [pair for pair, flag in zip(named, flags) if flag]
    groups = [_group(kept)] if kept else []
    return groups + ([_group(excluded, weight_decay=0.0, adapt=False)] if excluded else [])


def _group(named: list, **options) -> dict:
    group = {"params": [p for _, p in named], **options}
    if named[0][0] is not None:
        group["param_names"] = [name for name, _ in named]
    return group


def create(model_or_params, name: str, lr: float, weight_decay: float = 0.0, *, exclude=default_exclude, **hparams):
    """Build the optimizer registered as `name` (see NAMES) over `model_or_params` (param_groups explains
    the exclusion groups and `exclude`). lr is the peak learning rate; a scheduler sets group["lr"]."""
    hparams = catalog.current_options(hparams)  # for code that calls create(); a recipe's were renamed at its load
    cls = check(name, {"lr": lr, "weight_decay": weight_decay, **hparams})
    return cls(param_groups(model_or_params, exclude), lr=lr, weight_decay=weight_decay, **hparams)
