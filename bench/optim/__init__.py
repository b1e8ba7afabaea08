"""Optimizers for large-batch training: LARS, LAMB, MERIT, the VRGD (GSNR) family, AdaScale and SimiGrad's
measuring variants, behind one factory.

    opt = bench.optim.create(model, "vrgd_lars", lr=9.0, weight_decay=5e-5, gamma=0.1)

Every optimizer is a torch.optim.Optimizer with the group interface of base.py (observe, step,
diagnostics, and the facts the runner reads: reduces_gradients, pace). `check(name, hparams)`
validates a recipe's choice without building anything; `create` calls it too. The registry and
the factory live in factory.py; this module only re-exports.
"""

from .adamw import AdamW
from .base import GroupOptimizer, validate
from .factory import NAMES, REGISTRY, check, create, default_exclude, hyperparameters, param_groups
from .groups import (
    AdaScale,
    AdaScaleLARS,
    AdaScaleSGD,
    GroupGradients,
    SimiGrad,
    SimiGradLAMB,
    SimiGradLARS,
    SimiGradSGD,
)
from .lamb import LAMB
from .lars import LARC, LARS
from .merit import MERIT
from .sgd import SGD
from .vrgd import VRGD, VRGDLAMB, VRGDLARS, VRGDMERIT, VRGDSGD, VRGDAdam

__all__ = [
    "NAMES", "REGISTRY", "check", "create", "param_groups", "hyperparameters", "default_exclude", "validate",
    "GroupOptimizer", "SGD", "LARS", "LARC", "LAMB", "MERIT", "AdamW",
    "VRGD", "VRGDSGD", "VRGDLARS", "VRGDAdam", "VRGDLAMB", "VRGDMERIT",
    "GroupGradients", "AdaScale", "AdaScaleSGD", "AdaScaleLARS", "SimiGrad", "SimiGradSGD", "SimiGradLARS",
    "SimiGradLAMB",
]  # fmt: skip
