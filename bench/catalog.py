"""One record per optimizer, loader, dataset, paper setting and table: the facts every other list is derived from
(torch-free).

The recipe schema, the CLI, the analysis and the tests read these records; the code they name is imported only
when it runs (`"module:Name"`), so `bench validate`, `bench --help` and the analysis load without torch. Records
are written by keyword, each field's meaning beside it in its dataclass. tests/test_catalog.py holds every record
to its code: each resolves, each class, loader module and table function has a record, the declared facts equal
the code's, and each record has its behaviour tests.

Adding one (docs/extending.md says each step): an optimizer of bench's own: its module in bench/optim/, its record
in OPTIMIZERS, its setting in HPARAMS of tests/helpers.py (the float64 reference tests are its own), its name in
the README's optimizer list (tests/test_docs.py). An optimizer from a library: its record alone (target the
adapter of bench/optim/library.py, `library` its class, `signature` that class's keyword arguments), its HPARAMS
setting and its README line. A loader: its module in bench/data/ (what bench.data.loaders.Loader lists) and its
record in LOADERS. A dataset: its record in DATASETS (the function that yields its folder), its recipe section (if
it has one) in recipe.py, its preparation in bench/data/. A table: its function and its record in TABLES; a paper
table's setting (model, data sizes, image size, target): its record in PAPER_SETTINGS, which the table's `needs`
names. A `bench data` converter: its function in its module in bench/data/ and its record in CONVERTERS (its
arguments; the command line is built from them).
"""

from __future__ import annotations

import importlib
import math
import re
import warnings
from dataclasses import dataclass
from typing import Literal

from bench.errors import BenchDeprecation, UserError, did_you_mean

Pace = Literal["fixed", "scale_invariant", "adaptive"]


def resolve(target: str, what: str | None = None):
    """The object a "module:Name" string names (imported now). With `what` (who names it, for the message), a
    target whose module or name does not exist, or is not callable, is one sentence (UserError), not a traceback;
    an error raised while its module imports stays one (a bug)."""
    module, _, name = target.partition(":")
    if what is None:
        return getattr(importlib.import_module(module), name)
    try:
        imported = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name is None or not (module == e.name or module.startswith(e.name + ".")):
            raise  # the module exists and imports something missing
        imported = None
    found = getattr(imported, name, None) if name else None
    if not callable(found):
        raise UserError(
            f"{what} {target!r} does not resolve: it must name a function as 'module:function' (bench/catalog.py)"
        )
    return found


# --- optimizers -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Optimizer:
    name: str
    target: str  # "module:Class"
    display: str
    color: str
    marker: str  # its marker in a figure (style.MARKERS); records of one hue have different ones
    signature: tuple[tuple[str, object], ...]  # its keyword arguments beyond lr and weight_decay with their
    # defaults, in the order of the class's signature (a library record's: the library class's)
    base: str  # the update it applies: its own name, or the base optimizer's a mixin wraps
    pace: Pace = "fixed"  # how the runner advances the schedule (bench/engine/pace.py)
    groups: Literal["sums", "squares", "halves"] | None = None  # what it keeps of the gradient groups and
    # all-reduces itself (GroupGradients.second; "sums": the sums alone); None: DDP reduces the gradient
    # A library's optimizer (bench/optim/library.py adapts it; `target` names the adapter):
    library: str | None = None  # "module:Class", a torch.optim.Optimizer subclass; its options are its signature's
    package: str | None = None  # the PyPI package that provides it (and its version floor: "timm>=1.0.31")
    paper: str = ""  # the paper of its update
    presets: tuple[tuple[str, object], ...] = ()  # bench's defaults where they differ from the library's
    space: tuple[tuple[str, dict], ...] = ()  # the default search space (a sweep arm's `space: default`), SPACES
    schedule_free: bool = False  # it evaluates other weights than it trains (optimizer.eval()/train())

    @property
    def reduces_gradients(self) -> bool:
        return self.groups is not None

    @property
    def options(self) -> tuple[str, ...]:
        """Its keyword arguments beyond lr and weight_decay: what a recipe's optimizer section may set."""
        return tuple(name for name, _ in self.signature)

    @property
    def defaults(self) -> dict:
        """Each option's default as bench runs it: the signature's, with a library record's `presets` over it
        (bench.optim.hyperparameters of its class; tests/test_catalog.py holds the two equal)."""
        return {**dict(self.signature), **dict(self.presets)}

    @property
    def source(self) -> str:
        """Whose code makes its update: "bench", the library class ("timm.optim:Muon"), or bench's mixin over one
        ("bench over timm.optim:Muon": VRGD's scaling before the library's step)."""
        if not self.library:
            return "bench"
        return self.library if self.target == "bench.optim.library:Library" else f"bench over {self.library}"

    @property
    def distribution(self) -> str | None:
        """`package` without its version floor ("timm" of "timm>=1.0.31"): the name importlib.metadata knows."""
        return re.match(r"[\w.-]+", self.package)[0] if self.package else None

    def load(self) -> type:
        """bench's own class (a library record's adapted class: bench.optim.library.adapt, which the registry of
        bench.optim builds)."""
        if self.library:
            raise TypeError(f"{self.name!r} is a library record: bench.optim.REGISTRY builds its class")
        return resolve(self.target)

    def load_library(self) -> type:
        """The library's optimizer class; one sentence (UserError) naming the package when it is not installed."""
        module = self.library.partition(":")[0]
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name is None or not (module == e.name or module.startswith(e.name + ".")):
                raise  # the library imports something missing: its bug, a traceback
            raise UserError(
                f"optimizer {self.name!r} needs the {self.package} package, which is not installed: "
                f"pip install '{self.package}'"
            ) from None
        return resolve(self.library)

    def default_space(self) -> dict:
        """Its default search space (recipe key -> axis), the base record's where it declares none."""
        return dict(self.space or OPTIMIZERS[self.base].space)


# Plumbing: the options that choose how a step is computed, not what it computes (kernel paths, graph capture,
# autograd through the step, logging) or that turn descent into ascent. A recipe may set them; `bench recipe keys`
# lists them apart from each optimizer's other options.
PLUMBING = frozenset({"foreach", "fused", "capturable", "differentiable", "maximize", "verbose"})


def _options(**defaults) -> tuple[tuple[str, object], ...]:
    """A record's `signature`: keyword arguments with their defaults, in their order."""
    return tuple(defaults.items())


def _with(options: tuple, **changed) -> tuple[tuple[str, object], ...]:
    """`options` with some defaults changed (a subclass's), in the same order."""
    return tuple((name, changed.get(name, default)) for name, default in options)


# bench's classes' keyword arguments beyond params, lr and weight_decay, with their defaults (tests/test_catalog.py
# holds each record's to its class's signature)
_MOMENTUM = _options(momentum=0.9, nesterov=False)
_LARS = _options(momentum=0.9, eta=0.001, eps=0.0, nesterov=False)
_ADAM = _options(betas=(0.9, 0.999), eps=1e-8)
_LAMB = _with(_ADAM, eps=1e-6)  # LAMB's and MERIT's eps
_MERIT = _LAMB + _options(bias_correction=False)
_VRGD = _options(gamma=0.1, gsnr_eps=1e-12, beta3=0.0, gsnr_bias_correction=True, gsnr_norm="tensor", fused=None)
_VRGD_ADAM = _with(_VRGD, beta3=0.9)  # VRGDAdam, VRGDLAMB, VRGDMERIT: GSNR momentum on (the paper's)
_ADASCALE = _options(smoothing=None, gain_scope="global")
# The library classes' keyword arguments beyond params, lr and weight_decay, with the library's defaults (bench's
# where they differ are the record's `presets`; tests/test_catalog.py holds each to its signature): a recipe may set
# any of them.
_TORCH_SGD = _options(
    momentum=0, dampening=0, nesterov=False, maximize=False, foreach=None, differentiable=False, fused=None
)
_NADAMW = _options(
    betas=(0.9, 0.999),
    eps=1e-8,
    caution=False,
    corrected_weight_decay=False,
    maximize=False,
    foreach=None,
    capturable=False,
    clipping_threshold=None,
)
_MUON = _options(
    momentum=0.95, nesterov=False, ns_steps=5, ns_coefficients="quintic", eps=1e-7, safety_factor=1.0,
    adjust_lr_fn="match_rms_adamw", conv_mode="flatten", normalize_spatial=True, adamw_lr=None, fallback_lr_scale=1.0,
    betas=(0.9, 0.95), algo="muon", scale_eps=False, capturable=False, verbose=False,
)  # fmt: skip
_KRON = _options(
    momentum=0.9, preconditioner_update_probability=None, max_size_triangular=2048, min_ndim_triangular=2,
    memory_save_mode=None, momentum_into_precond_update=True, precond_lr=0.1, precond_init_scale=1.0, mu_dtype=None,
    precond_dtype=None, decoupled_decay=False, corrected_weight_decay=False, flatten=False, flatten_start_dim=2,
    flatten_end_dim=-1, stochastic_weight_decay=False, deterministic=False,
)  # fmt: skip
_LION = _options(betas=(0.9, 0.99), caution=False, corrected_weight_decay=False, maximize=False, foreach=None)
_SF_ADAMW = _options(betas=(0.9, 0.999), eps=1e-8, warmup_steps=0, r=0.0, weight_lr_power=2.0, foreach=True)
_SF_SGD = _options(momentum=0.9, warmup_steps=0, r=0.0, weight_lr_power=2, foreach=True)
_SOAP = _options(
    betas=(0.95, 0.95), shampoo_beta=None, precondition_frequency=10, max_precondition_dim=10000, merge_dims=False,
    precondition_1d=False, correct_bias=True, normalize_gradient=False, data_format="channels_first", eps=1e-8,
    maximize=False,
)  # fmt: skip
_TIMM = "timm>=1.0.31"  # 1.0.31: the release whose Muon, Kron and Lion the identity tests ran against


def _log(low: float, high: float) -> dict:
    return {"low": low, "high": high, "scale": "log"}


# Default search spaces (recipe key -> sweep axis; docs/algorithms.md, "Library optimizers", says each source).
# AlgoPerf's (mlcommons/algorithmic-efficiency, algorithms/paper_baselines/*/tuning_search_space*.json) where one
# exists: its learning rate, weight decay and label smoothing as they are; its log-uniform 1 - beta1 as three values
# (the ends and the geometric middle: a sweep axis over a pair is a list); its warm-up (5% of the budget) is left to
# the base recipe (schedule.warmup_epochs is in epochs, the budget is the sweep's).
_SMOOTHING = ("label_smoothing", {"values": [0.1, 0.2]})
_ADAMW_DECAY = ("weight_decay", _log(5e-3, 1.0))
_NESTEROV_SPACE = (("optimizer.lr", _log(2e-2, 5.0)), ("weight_decay", _log(1e-7, 5e-5)), _SMOOTHING)
_NADAMW_SPACE = (
    ("optimizer.lr", _log(1e-4, 1e-2)),
    ("optimizer.betas", {"values": [[0.996, 0.999], [0.98, 0.999], [0.9, 0.999]]}),
    _ADAMW_DECAY,
    _SMOOTHING,
)
_SHAMPOO_SPACE = (  # AlgoPerf's Shampoo baseline (SOAP is Adam in Shampoo's eigenbasis)
    ("optimizer.lr", _log(1e-4, 1e-2)),
    ("optimizer.betas", {"values": [[0.99, 0.999], [0.961, 0.999], [0.85, 0.999]]}),
    _ADAMW_DECAY,
    _SMOOTHING,
)

OPTIMIZERS = {
    r.name: r
    for r in (
        Optimizer(
            name="sgd",
            target="bench.optim.sgd:SGD",
            display="SGD",
            color="#555555",
            marker="o",
            signature=_MOMENTUM,
            base="sgd",
        ),
        Optimizer(
            name="lars",
            target="bench.optim.lars:LARS",
            display="LARS",
            color="#1f77b4",
            marker="s",
            signature=_LARS,
            base="lars",
        ),
        Optimizer(
            name="larc",
            target="bench.optim.lars:LARC",
            display="LARC",
            color="#17becf",
            marker="p",
            signature=_LARS,
            base="larc",
        ),
        Optimizer(
            name="lamb",
            target="bench.optim.lamb:LAMB",
            display="LAMB",
            color="#2ca02c",
            marker="^",
            signature=_LAMB,
            base="lamb",
        ),
        Optimizer(
            name="adamw",
            target="bench.optim.adamw:AdamW",
            display="AdamW",
            color="#8c564b",
            marker="D",
            signature=_ADAM,
            base="adamw",
        ),
        Optimizer(
            name="vrgd_sgd",
            target="bench.optim.vrgd:VRGDSGD",
            display="VRGD-SGD",
            color="#ff7f0e",
            marker="o",
            signature=_MOMENTUM + _VRGD,
            base="sgd",
            groups="squares",
        ),
        Optimizer(
            name="vrgd_lars",
            target="bench.optim.vrgd:VRGDLARS",
            display="VRGD-LARS",
            color="#d62728",
            marker="D",
            signature=_LARS + _VRGD + _options(trust_grad="vr"),
            base="lars",
            groups="squares",
        ),
        Optimizer(
            name="vrgd_adam",
            target="bench.optim.vrgd:VRGDAdam",
            display="VRGD-Adam",
            color="#e377c2",
            marker="P",
            signature=_ADAM + _VRGD_ADAM,
            base="adamw",
            groups="squares",
        ),
        Optimizer(
            name="vrgd_lamb",
            target="bench.optim.vrgd:VRGDLAMB",
            display="VRGD-LAMB",
            color="#9467bd",
            marker="v",
            signature=_LAMB + _VRGD_ADAM,
            base="lamb",
            groups="squares",
        ),
        Optimizer(
            name="adascale_sgd",
            target="bench.optim.groups:AdaScaleSGD",
            display="AdaScale-SGD",
            color="#bcbd22",
            marker="X",
            signature=_MOMENTUM + _ADASCALE,
            base="sgd",
            pace="scale_invariant",
            groups="sums",
        ),
        Optimizer(
            name="adascale_lars",
            target="bench.optim.groups:AdaScaleLARS",
            display="AdaScale-LARS",
            color="#393b79",
            marker="<",
            signature=_LARS + _ADASCALE,
            base="lars",
            pace="scale_invariant",
            groups="sums",
        ),
        Optimizer(
            name="simigrad_sgd",
            target="bench.optim.groups:SimiGradSGD",
            display="SimiGrad-SGD",
            color="#ad494a",
            marker="h",
            signature=_MOMENTUM,
            base="sgd",
            pace="adaptive",
            groups="halves",
        ),
        Optimizer(
            name="simigrad_lars",
            target="bench.optim.groups:SimiGradLARS",
            display="SimiGrad-LARS",
            color="#637939",
            marker=">",
            signature=_LARS,
            base="lars",
            pace="adaptive",
            groups="halves",
        ),
        Optimizer(
            name="simigrad_lamb",
            target="bench.optim.groups:SimiGradLAMB",
            display="SimiGrad-LAMB",
            color="#7b4173",
            marker="d",
            signature=_LAMB,
            base="lamb",
            pace="adaptive",
            groups="halves",
        ),
        Optimizer(
            name="merit",
            target="bench.optim.merit:MERIT",
            display="MERIT",
            color="#e7969c",
            marker="*",
            signature=_MERIT,
            base="merit",
        ),
        Optimizer(
            name="vrgd_merit",
            target="bench.optim.vrgd:VRGDMERIT",
            display="VRGD-MERIT",
            color="#843c39",
            marker="p",
            signature=_MERIT + _VRGD_ADAM,
            base="merit",
            groups="squares",
        ),
        # --- library optimizers (bench/optim/library.py): the libraries' own code behind bench's group interface
        Optimizer(
            name="nesterov",
            target="bench.optim.library:Library",
            display="Nesterov SGD",
            color="#2ca02c",
            marker="v",
            signature=_TORCH_SGD,
            base="nesterov",
            library="torch.optim:SGD",
            package="torch>=2.4",
            paper="Nesterov 1983; Sutskever et al. 2013; Nado et al. 2021 (arXiv 2102.06356)",
            presets=(("momentum", 0.9), ("nesterov", True)),
            space=_NESTEROV_SPACE,
        ),
        Optimizer(
            name="nadamw",
            target="bench.optim.library:Library",
            display="NAdamW",
            color="#b8860b",
            marker="d",
            signature=_NADAMW,
            base="nadamw",
            library="timm.optim:NAdamW",
            package=_TIMM,
            paper="Dozat 2016; Loshchilov and Hutter 2019; AlgoPerf's baseline (Dahl et al. 2023, arXiv 2306.07179)",
            space=_NADAMW_SPACE,
        ),
        Optimizer(
            name="muon",
            target="bench.optim.library:Library",
            display="Muon",
            color="#e6550d",
            marker="s",
            signature=_MUON,
            base="muon",
            library="timm.optim:Muon",
            package=_TIMM,
            paper="Jordan et al. 2024 (kellerjordan.github.io/posts/muon); Liu et al. 2025 (arXiv 2502.16982)",
            space=(("optimizer.lr", _log(2e-3, 2e-1)), _ADAMW_DECAY, _SMOOTHING),
        ),
        Optimizer(
            name="kron",
            target="bench.optim.library:Library",
            display="Kron (PSGD)",
            color="#dbdb8d",
            marker="d",
            signature=_KRON,
            base="kron",
            library="timm.optim.kron:Kron",
            package=_TIMM,
            paper="Li 2018, PSGD (arXiv 1512.04202); Kron: Evan Walters' psgd_torch",
            presets=(("deterministic", True),),  # its preconditioner draws from its own saved generator: resumable
            space=(("optimizer.lr", _log(1e-4, 1e-2)), _ADAMW_DECAY, _SMOOTHING),
        ),
        Optimizer(
            name="lion",
            target="bench.optim.library:Library",
            display="Lion",
            color="#9edae5",
            marker="^",
            signature=_LION,
            base="lion",
            library="timm.optim:Lion",
            package=_TIMM,
            paper="Chen et al. 2023, Symbolic Discovery of Optimization Algorithms (arXiv 2302.06675)",
            space=(("optimizer.lr", _log(1e-5, 1e-3)), ("weight_decay", _log(5e-2, 10.0)), _SMOOTHING),
        ),
        Optimizer(
            name="schedulefree_adamw",
            target="bench.optim.library:Library",
            display="Schedule-Free AdamW",
            color="#6baed6",
            marker="v",
            signature=_SF_ADAMW,
            base="schedulefree_adamw",
            library="schedulefree:AdamWScheduleFree",
            package="schedulefree>=1.4.1",
            paper="Defazio et al. 2024, The Road Less Scheduled (arXiv 2405.15682)",
            space=(("optimizer.lr", _log(1e-4, 1e-1)), _ADAMW_DECAY, _SMOOTHING),
            schedule_free=True,
        ),
        Optimizer(
            name="schedulefree_sgd",
            target="bench.optim.library:Library",
            display="Schedule-Free SGD",
            color="#fd8d3c",
            marker="v",
            signature=_SF_SGD,
            base="schedulefree_sgd",
            library="schedulefree:SGDScheduleFree",
            package="schedulefree>=1.4.1",
            paper="Defazio et al. 2024, The Road Less Scheduled (arXiv 2405.15682)",
            space=(("optimizer.lr", _log(0.2, 250.0)), ("weight_decay", _log(1e-7, 5e-5)), _SMOOTHING),
            schedule_free=True,
        ),
        Optimizer(
            name="soap",
            target="bench.optim.library:Library",
            display="SOAP",
            color="#74c476",
            marker="P",
            signature=_SOAP,
            base="soap",
            library="pytorch_optimizer:SOAP",
            package="pytorch-optimizer>=4.1",
            paper="Vyas et al. 2024, SOAP: Improving and Stabilizing Shampoo using Adam (arXiv 2409.11321)",
            space=_SHAMPOO_SPACE,
        ),
        Optimizer(
            name="vrgd_nadamw",
            target="bench.optim.library:VRGDLibrary",
            display="VRGD-NAdamW",
            color="#ff9896",
            marker="<",
            signature=_NADAMW + _VRGD,
            base="nadamw",
            groups="squares",
            library="timm.optim:NAdamW",
            package=_TIMM,
            paper="VRGD (arXiv 2309.13681) over NAdamW",
        ),
        Optimizer(
            name="vrgd_muon",
            target="bench.optim.library:VRGDLibrary",
            display="VRGD-Muon",
            color="#c5b0d5",
            marker="X",
            signature=_MUON + _VRGD,
            base="muon",
            groups="squares",
            library="timm.optim:Muon",
            package=_TIMM,
            paper="VRGD (arXiv 2309.13681) over Muon",
        ),
    )
}
# The names sweeps conventionally give their arms (an arm is an optimizer with settings): display and colour
# (None: a spare colour of the figure's).
ARMS = {
    "momentum": ("Momentum", None),
    "adam": ("Adam", "#8c564b"),
    "vrgd_momentum": ("VRGD-Momentum", None),
}
# The packages the library records name, each once: every run records their versions (bench.rundir.versions).
LIBRARIES = tuple(dict.fromkeys(r.distribution for r in OPTIMIZERS.values() if r.package))
BASELINES = ("lars", "sgd")  # the reference optimizers a comparison falls back to, in order of preference
DISPLAY = {**{name: r.display for name, r in OPTIMIZERS.items()}, **{name: d for name, (d, _) in ARMS.items()}}
COLORS = {**{name: r.color for name, r in OPTIMIZERS.items()}, **{name: c for name, (_, c) in ARMS.items() if c}}


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _interval(lo: float, hi: float, lo_closed: bool = True, hi_closed: bool = False):
    def ok(value) -> bool:
        above = lo <= value if lo_closed else lo < value
        return _number(value) and above and (value <= hi if hi_closed else value < hi)

    return ok, f"a number in {'[' if lo_closed else '('}{lo}, {hi}{']' if hi_closed else ')'}"


_BOOL = (lambda value: isinstance(value, bool), "true or false")
_NON_NEGATIVE = _interval(0, math.inf)
_FRACTION = _interval(0, 1)  # [0, 1): momentum-like coefficients

# option -> (accepts(value), what is allowed); one table for the recipe, create() and every constructor.
RULES = {
    # the peak lr, also the recipe's optimizer.lr (bench.recipe.OptimizerSpec reads this rule): a peak of 0 trains
    # nothing, and the analysis reads a step's lr as a fraction of it; the schedule may end at 0 (end_lr >= 0)
    "lr": _interval(0, math.inf, lo_closed=False),
    "weight_decay": _NON_NEGATIVE,
    "momentum": _FRACTION,
    "nesterov": _BOOL,
    "eta": _interval(0, math.inf, lo_closed=False),
    "eps": _NON_NEGATIVE,
    "betas": (
        lambda value: isinstance(value, (list, tuple)) and len(value) == 2 and all(map(_FRACTION[0], value)),
        "two numbers in [0, 1)",
    ),
    "gamma": _interval(0, 1, lo_closed=False, hi_closed=True),
    "gsnr_eps": _interval(0, math.inf, lo_closed=False),
    "beta3": _FRACTION,
    "gsnr_bias_correction": _BOOL,
    "bias_correction": _BOOL,
    "gsnr_norm": (lambda value: value in ("tensor", "layer", "model"), "'tensor', 'layer' or 'model'"),
    "trust_grad": (lambda value: value in ("vr", "mean"), "'vr' or 'mean'"),
    "smoothing": (lambda value: value is None or _FRACTION[0](value), "null or a number in [0, 1)"),
    "gain_scope": (lambda value: value in ("global", "per_group"), "'global' or 'per_group'"),
    "fused": (lambda value: value is None or isinstance(value, bool), "null, true or false"),
}


OPTION_ALIASES = {"gain": "gain_scope"}  # deprecated option names -> today's


def current_options(hparams: dict) -> dict:
    """The options with deprecated names renamed (one BenchDeprecation warning each)."""

    out = {}
    for key, value in hparams.items():
        if key in OPTION_ALIASES:
            warnings.warn(
                f"optimizer option '{key}' is deprecated, use '{OPTION_ALIASES[key]}' (the same choice; "
                f"'{key}' also named AdaScale's gain itself)",
                BenchDeprecation,
            )
            key = OPTION_ALIASES[key]
        out[key] = value
    return out


def validate_options(hparams: dict) -> None:
    """Raise UserError for the first option whose value its rule rejects (unknown keys are not checked here)."""
    for key, value in hparams.items():
        accepts, allowed = RULES.get(key, (None, None))
        if accepts is not None and not accepts(value):
            raise UserError(f"optimizer hyperparameter {key}={value!r} is invalid: it must be {allowed}.")


def check_optimizer(name: str, hparams: dict, section: str | None = None) -> Optimizer:
    """An optimizer name and options (lr, weight_decay and the record's), checked without importing it. `section`:
    a recipe's ("optimizer"), whose keys the message names and where weight_decay is the top-level key instead."""
    if name not in OPTIMIZERS:
        raise UserError(
            f"unknown optimizer {name!r}{did_you_mean(str(name), OPTIMIZERS)}; "
            f"valid names are: {', '.join(OPTIMIZERS)}."
        )
    record = OPTIMIZERS[name]
    valid = ("lr", *(() if section else ("weight_decay",)), *record.options)
    for key in hparams:
        if key not in valid:
            what = f"key '{section}.{key}': unknown hyperparameter" if section else f"unknown hyperparameter {key!r}"
            raise UserError(
                f"{what} for optimizer {name!r}{did_you_mean(str(key), valid)}; "
                f"valid ones are: {', '.join(sorted(valid))}."
            )
    validate_options(hparams)
    return record


# --- loaders ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Loader:
    name: str
    module: str  # in bench/data/, with what bench.data.loaders.Loader lists
    reads_files: bool  # False: random tensors, no images (its runs never measure a dataset)
    requires: str | None = None  # the module it needs that bench does not install everywhere
    install: str | None = None  # the package that provides it

    def available(self) -> bool:
        return self.import_error() is None

    def fallback(self, chosen: str, error: str) -> str:
        """Why `data.loader: auto` took `chosen` over this loader, in one sentence."""
        return (
            f"data.loader auto uses {chosen}: {self.requires} does not import ({error}); "
            f"install {self.install} for the {self.name} loader"
        )

    def import_error(self) -> str | None:
        """Why `requires` does not import here (the exception, one line), or None when it does."""
        if self.requires is None:
            return None
        try:
            importlib.import_module(self.requires)
        except Exception as e:  # noqa: BLE001 - an ImportError, or a broken CUDA install underneath
            return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}".rstrip(": ")
        return None


LOADERS = {
    r.name: r
    for r in (
        Loader(
            name="dali",
            module="bench.data.dali",
            reads_files=True,
            requires="nvidia.dali",
            install="bench[dali-cuda13] or bench[dali-cuda12]",
        ),
        Loader(name="torchvision", module="bench.data.torchvision", reads_files=True),
        Loader(name="random", module="bench.data.random_tensors", reads_files=False),
    )
}
AUTO_LOADERS = ("dali", "torchvision")  # `data.loader: auto`: the first of these that is available
LOADER_ALIASES = {"synthetic": "random"}  # deprecated data.loader names


def reads_files(loader: str | None) -> bool:
    """Whether a data.loader name (an alias, auto, or as a run recorded it) reads image files."""
    record = LOADERS.get(LOADER_ALIASES.get(loader, loader))
    return record is None or record.reads_files  # auto and unknown old names: a file loader


# --- datasets ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Dataset:
    name: str  # recipe data.dataset
    root: str  # "module:function" (the recipe's data.<reads>) -> the dataset folder (generated on first use, or given)
    reads: str  # the key of the recipe's data section its functions take: its own section (generated sets) or "path"
    layout: Literal["folder", "filelist"]  # how the folder holds the images (bench/data/folder.py)
    label: str  # how tables and figures name it (the `bench data` commands that write it: CONVERTERS)
    virtual: str | None = None  # "module:function" (data.<reads>) -> its layout without files, for a loader that
    # reads none (random); None: such a loader still reads its folder's layout

    @property
    def user_path(self) -> bool:
        """Read from data.path (your own images: a real dataset), not generated by bench."""
        return self.reads == "path"

    @property
    def section(self) -> str | None:
        """The recipe's data.<section> that describes it (generated sets), or None."""
        return None if self.user_path else self.reads

    @property
    def setting_keys(self) -> tuple[tuple[str, ...], ...]:
        """The recipe keys that tell one such dataset from another (results.SETTING_KEYS)."""
        return (("data", self.reads),)

    def load(self, function: Literal["root", "virtual"] = "root"):
        """Its root (or virtual) function, imported now; one sentence (UserError) when the record names none."""
        return resolve(getattr(self, function), f"dataset {self.name!r}'s {function} function")


DATASETS = {
    r.name: r
    for r in (
        Dataset(
            name="synthetic",
            root="bench.data.synthetic:cached",
            reads="synth",
            layout="folder",
            label="synthetic data",
            virtual="bench.data.synthetic:virtual",
        ),
        Dataset(
            name="digits", root="bench.data.digits:cached", reads="digits", layout="folder", label="sklearn digits"
        ),
        Dataset(name="folder", root="bench.data.folder:given", reads="path", layout="folder", label="folder"),
        Dataset(name="filelist", root="bench.data.folder:given", reads="path", layout="filelist", label="file lists"),
    )
}


def dataset(name: str) -> Dataset:
    """The record of a recipe's data.dataset; an unknown name is one sentence (UserError)."""
    if name not in DATASETS:
        raise UserError(
            f"key 'data.dataset' is {name!r}{did_you_mean(str(name), DATASETS)}: no dataset record has "
            f"that name; valid names are: {', '.join(DATASETS)}."
        )
    return DATASETS[name]


# --- converters -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Argument:
    flag: str  # "--per-class", or a positional argument's name (its keyword: "archive")
    help: str | None = None  # argparse's (%(default)s names the default)
    type: Literal["str", "int", "count", "list"] = "str"  # count: a whole number >= 1; list: comma-separated names
    default: object = None
    required: bool = False
    metavar: str | None = None
    choices: str | None = None  # "module:NAME" of the allowed values (imported when the parser is built)

    @property
    def keyword(self) -> str:
        """The converter function's keyword argument it is passed as."""
        return self.flag.lstrip("-").replace("-", "_")


@dataclass(frozen=True)
class Converter:
    name: str  # `bench data <name>`
    target: str  # "module:function": takes the arguments as keywords, writes the dataset to `out` (a new folder)
    help: str
    arguments: tuple[Argument, ...]
    writes: str  # the dataset record a recipe reads what it writes with (data.dataset; its --out as data.path)
    generates: str | None = None  # the generated dataset whose images it writes (the same files as that dataset's
    # recipe section with the same settings), or None: a converter of someone else's data

    def load(self):
        return resolve(self.target, f"converter {self.name!r}'s function")


_OUT = Argument(
    flag="--out", help="the dataset folder to write (a new one; a recipe's data.path)", required=True, metavar="DIR"
)
CONVERTERS = {
    r.name: r
    for r in (
        Converter(
            name="synth",
            target="bench.data.synthetic:write",
            help="write the generated ImageNet-layout dataset",
            arguments=(
                _OUT,
                Argument(flag="--classes", help="classes (default: %(default)s)", type="int", default=10),
                Argument(
                    flag="--train-per-class",
                    help="training images a class (default: %(default)s)",
                    type="int",
                    default=100,
                ),
                Argument(
                    flag="--val-per-class",
                    help="validation images a class (default: %(default)s)",
                    type="int",
                    default=30,
                ),
                Argument(
                    flag="--size", help="square images of this side (default: %(default)s)", type="int", default=72
                ),
                Argument(flag="--width", help="image width instead of --size (ImageNet-like: 500)", type="int"),
                Argument(flag="--height", help="image height instead of --size (ImageNet-like: 375)", type="int"),
                Argument(flag="--quality", help="JPEG quality (default: %(default)s)", type="int", default=90),
                Argument(flag="--seed", help="seed of the images (default: %(default)s)", type="int", default=0),
                Argument(
                    flag="--workers", help="processes (default: all cores from 1000 images on)", type="int", default=0
                ),
            ),
            writes="folder",
            generates="synthetic",
        ),
        Converter(
            name="digits",
            target="bench.data.digits:write",
            help="export scikit-learn's handwritten digits (1,797 images, 10 classes)",
            arguments=(
                _OUT,
                Argument(flag="--size", help="upscaled image side (default: %(default)s)", type="int", default=32),
            ),
            writes="folder",
            generates="digits",
        ),
        Converter(
            name="cifar",
            target="bench.data.cifar:convert",
            help="convert cifar-10-python.tar.gz or cifar-100-python.tar.gz to the layout",
            arguments=(
                Argument(flag="archive", help="the downloaded archive (its python version)", metavar="ARCHIVE"),
                _OUT,
            ),
            writes="folder",
        ),
        Converter(
            name="idx",
            target="bench.data.idx:convert",
            help="convert the MNIST family's idx files (MNIST, Fashion-MNIST, KMNIST, "
            "EMNIST) to the layout, the test set as val/",
            arguments=(
                Argument(
                    flag="root",
                    help="the folder holding train-images-idx3-ubyte[.gz] and the other three "
                    "(Debian's dataset-fashion-mnist: /usr/share/datasets/fashion-mnist)",
                    metavar="DIR",
                ),
                _OUT,
                Argument(
                    flag="--per-class", help="training images per class, drawn with --seed (default: all)", type="count"
                ),
                Argument(flag="--val-per-class", help="validation images per class (default: all)", type="count"),
                Argument(
                    flag="--classes", help="comma-separated class names or labels to keep (default: all)", type="list"
                ),
                Argument(
                    flag="--names",
                    help="class folder names: the dataset's, or the labels (default: guessed from DIR's path)",
                    default="auto",
                    choices="bench.data.idx:NAME_CHOICES",
                ),
                Argument(flag="--seed", help="seed of the subset draw (default: %(default)s)", type="int", default=0),
            ),
            writes="folder",
        ),
    )
}


# --- paper settings ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PaperSetting:
    """A published experiment's setting: a measured run sits next to the paper's numbers only when its resolved
    recipe and the dataset sizes its meta records are this (bench/analysis/paper.py checks a run against each
    record; every setting also needs real images read as images: a user_path dataset and a loader that reads files).
    A table's `needs` (TABLES) names one."""

    name: str
    dataset: str  # what the criteria call its data ("ImageNet setting = ...")
    label: str  # how tables and figures name the setting
    models: tuple[str, ...]  # model.name patterns (fnmatch): "resnet56*" is any name that starts so
    train_size: int  # the dataset's training images
    val_size: int  # its validation images, all of which a run evaluates
    target: float  # the val Top-1 (%) its tables judge runs with
    target_source: str  # where the paper states that target
    image_size: int | None = None  # data.image_size it requires (None: any)
    min_train_share: float = 1.0  # the least share of train_size a run may train on (a few unreadable images)
    model_words: str = ""  # how the criteria name the model (default: "model <pattern>")

    @property
    def tables(self) -> tuple[str, ...]:
        """The tables whose measured cells need this setting (TableRecord.needs)."""
        return tuple(t.name for t in TABLES.values() if t.needs == self.name)


PAPER_SETTINGS = {
    r.name: r
    for r in (
        # Table 2 states the MLPerf v0.5 target, not today's 75.9% (bench.analysis.paper.MLPERF_TARGET, which
        # `mlperf-epochs` keeps).
        PaperSetting(
            name="imagenet",
            dataset="ImageNet",
            label="ImageNet-1k, ResNet-50, 224 px",
            models=("resnet50",),
            train_size=1_281_167,
            val_size=50_000,
            target=74.9,
            target_source="Table 2's target, MLPerf v0.5",
            image_size=224,
            min_train_share=0.99,
        ),
        # He et al.'s CIFAR ResNet-56 (bench/models.py), not a reshaped ImageNet ResNet (7x7 stem, max-pool).
        PaperSetting(
            name="cifar10",
            dataset="CIFAR-10",
            label="CIFAR-10, ResNet-56",
            models=("resnet56*",),
            train_size=50_000,
            val_size=10_000,
            target=93.03,
            target_source="Table 5's target",
            model_words="He et al.'s ResNet-56 (a model named resnet56*, as bench's resnet56_cifar)",
        ),
    )
}


# --- tables -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TableRecord:
    name: str
    function: str  # "module:function" (study, baseline) -> render.Table
    needs: str | None = None  # the PAPER_SETTINGS its measured cells need (regenerate() writes it only then)
    sweep: bool = False  # a sweep's table: --baseline is an arm, and `bench sweep` writes it
    help: str = ""  # what it shows, in one line (`bench table NAME --help`)
    baseline: str = ""  # what --baseline means to it ('': it takes none, and refuses one)
    runs: bool = True  # False: it reads a published table only, so `bench table NAME` loads no runs

    def load(self):
        return resolve(self.function)


TABLES = {
    r.name: r
    for r in (
        TableRecord(
            name="vrgd-imagenet",
            function="bench.analysis.tables:vrgd_imagenet",
            needs="imagenet",
            help="the VRGD paper's ImageNet ResNet-50 Top-1 by global batch (LARS, VRGD-LARS) beside measured runs",
        ),
        TableRecord(
            name="vrgd-gap",
            function="bench.analysis.tables:vrgd_gap",
            needs="imagenet",
            help="the VRGD paper's ImageNet generalization gap (train, test, gap) by batch beside measured runs",
        ),
        TableRecord(
            name="vrgd-cifar10",
            function="bench.analysis.tables:vrgd_cifar10",
            needs="cifar10",
            help="the VRGD paper's CIFAR-10 ResNet-56 Top-1 of 8 optimizers by batch beside measured runs",
        ),
        TableRecord(
            name="mlperf-epochs",
            function="bench.analysis.tables:mlperf_epochs",
            needs="imagenet",
            help="epochs to 75.9% Top-1 on ImageNet ResNet-50 against MLPerf's reference range",
        ),
        TableRecord(
            name="mlperf-scaling",
            function="bench.analysis.tables:mlperf_scaling",
            runs=False,
            help="LARS's ImageNet critical batch from MLPerf's ResNet-50 reference convergence points (the scaling "
            "table's fit on a published ladder; reads no runs)",
        ),
        TableRecord(
            name="compare",
            function="bench.analysis.tables:compare",
            help="every recipe against the baseline optimizer's best recipe at the same global batch: Top-1, gap, "
            "steps, epochs and seconds to target, speedups (runs of bench run and bench suite; a sweep has its "
            "own tables)",
            baseline="the optimizer B of the speedups (default: lars, else sgd, else the first by name); any optimizer "
            "the runs use",
        ),
        TableRecord(
            name="verdict",
            function="bench.analysis.verdict:verdict",
            sweep=True,
            help="a sweep's tuned optimizers at each batch: differences with 95% intervals (paired by seed), "
            "Holm-adjusted p, the minimum detectable effect",
            baseline="compare each other arm with this one (default: every pair of arms)",
        ),
        TableRecord(
            name="tuning",
            function="bench.analysis.tuning:tuning",
            sweep=True,
            help="a sweep's search per (arm, batch): trials, the best point, steps to result, the reruns' figures",
        ),
        TableRecord(
            name="plan",
            function="bench.analysis.verdict:plan",
            sweep=True,
            help="the seeds per side a next study needs for each of the verdict's comparisons, at this one's noise",
            baseline="plan each other arm's comparison with this one (default: every pair of arms)",
        ),
        TableRecord(
            name="matched",
            function="bench.analysis.verdict:matched",
            sweep=True,
            help="a sweep's matched points (reruns.matched): both arms at each arm's selected point, paired by seed",
        ),
        TableRecord(
            name="batches",
            function="bench.analysis.across:across_batches",
            sweep=True,
            help="a Top-1 sweep's arms across batches: each cell's val Top-1, train-eval Top-1 and generalization gap with 95% "
            "intervals, and each against the same arm at its smallest batch (Welch, Holm-adjusted, MDE)",
        ),
        TableRecord(
            name="scaling",
            function="bench.analysis.scaling:scaling",
            sweep=True,
            help="steps to result along a sweep's batch ladder, the distance from perfect scaling, the critical batch",
            baseline="the arm the others' critical batches are divided by (default: lars, else the first arm)",
        ),
        TableRecord(
            name="branching",
            function="bench.analysis.branching:branching",
            help="the critical batch along training from `bench branch`'s runs: per arm and checkpoint, the "
            "reference's Top-1, each k's images / linear over the window, the critical batch with the seeds' range",
        ),
        TableRecord(
            name="schedules",
            function="bench.analysis.schedules:schedules",
            help="runs whose batch moves (a declared schedule, SimiGrad, AdaScale) against constant batches: steps "
            "and images to target per recipe, each against the declared schedule's, paired by seed",
        ),
        TableRecord(
            name="ladder-check",
            function="bench.analysis.branch_check:ladder_check",
            help="`bench branch`'s windows chained into steps to target at each batch of a ladder (bench sweep's), "
            "against its reruns; give both trees",
        ),
    )
}
