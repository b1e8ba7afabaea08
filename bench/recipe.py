"""Recipe files: YAML in, one fully resolved and validated `Recipe` out.

Every default lives in the schema below; nothing downstream reads YAML or
invents a default. Bad input raises `UserError` with one sentence naming the
file, the key and what is allowed.
"""

from __future__ import annotations

import copy
import difflib
import json
import re
import types
import warnings
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    field_validator,
    model_validator,
)

from bench import catalog
from bench.errors import BenchDeprecation, BenchWarning, UserError, require_extra, split_set

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
LOADER_ALIASES = catalog.LOADER_ALIASES  # deprecated data.loader names
LOADER_CHOICES = ("auto", *catalog.LOADERS, *catalog.LOADER_ALIASES)
DATASET_CHOICES = tuple(catalog.DATASETS)
reads_files = catalog.reads_files


def check_path_component(name: str, key: str) -> None:
    """A name that becomes a folder (recipe, sweep and arm names): one path component, so what is written stays
    inside --out: not empty, no '/' or '\\', not '.' or '..' or any leading '.', no control characters (spaces
    and unicode letters are fine). Raises ValueError naming `key`."""
    if not name or "/" in name or "\\" in name or name.startswith(".") or _CONTROL.search(name):
        raise ValueError(
            f"{key} {name!r} must be one folder name: no '/' or '\\', no leading '.', no control characters"
        )


def file_stem(name: str) -> str:
    """A name made safe for a file name: runs of anything but letters, digits and . , = + - become one '_'."""
    return re.sub(r"[^\w.,=+-]+", "_", name).strip("_")


class Strict(BaseModel):
    """The base of every schema of a file bench reads (recipes; sweep files, bench.sweep; cluster presets,
    bench.analysis.project): unknown keys refused, values frozen, every number finite; strict types: `epochs: "2"`
    (a quoted number) or `random_flip: "no"` is a mistake in a YAML file, refused rather than converted (an integer
    is still a float); a path is given as text and a pair as a YAML list (such fields: strict=False)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)


class ModelSpec(Strict):
    name: str = Field(description="a timm model name, e.g. resnet50")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="passed to timm.create_model")
    bn_batch: PositiveInt | None = Field(
        None,
        description=(
            "ghost BatchNorm: each BatchNorm2d layer normalises every bn_batch consecutive images of a micro-batch "
            "on their own (running statistics as the same sequence of micro-batches of bn_batch); null = the "
            "micro-batch, and gsnr_groups null = one group per bn_batch images"
        ),
    )


class SynthData(Strict):
    """Parameters of the generated dataset (`bench data synth`)."""

    classes: int = Field(10, ge=2, description="number of classes")
    train_per_class: PositiveInt = Field(100, description="training images per class")
    val_per_class: PositiveInt = Field(30, description="validation images per class")
    size: int = Field(72, ge=16, description="image side in pixels (square images)")
    width: int | None = Field(None, ge=16, description="image width; null = size (ImageNet-like: 500)")
    height: int | None = Field(None, ge=16, description="image height; null = size (ImageNet-like: 375)")
    quality: int = Field(90, ge=1, le=100, description="JPEG quality")
    seed: int = Field(0, ge=0, description="seed of the generated images (not the run's seed)")


class DigitsData(Strict):
    """scikit-learn's handwritten digits, upscaled (`bench data digits`)."""

    size: int = Field(32, ge=8, description="image side in pixels (the originals are 8x8)")


class DataSpec(Strict):
    dataset: Literal[DATASET_CHOICES] = Field(
        "synthetic",
        description="synthetic/digits: generated into the cache; folder: <path>/{train,val}/<class>/<image>; "
        "filelist: <path>/{train,val}.txt with lines '<file relative to path> <label>'",
    )
    path: Path | None = Field(None, strict=False, description="dataset root (dataset: folder or filelist)")
    synth: SynthData = Field(SynthData(), description="the generated dataset (dataset: synthetic)")
    digits: DigitsData = Field(DigitsData(), description="the handwritten digits (dataset: digits)")
    image_size: int = Field(224, ge=8, description="side of the square images the model sees, train and val")
    augment: Literal["resized_crop", "pad_crop"] = Field(
        "resized_crop",
        description=(
            "training crop: resized_crop = ImageNet's random-resized crop (evaluation: resize, centre crop 87.5%); "
            "pad_crop = CIFAR's: pad by `pad` black pixels, a random window of the image's size (evaluation: the "
            "whole image)"
        ),
    )
    pad: int = Field(4, ge=0, description="pixels of padding a side (augment: pad_crop)")
    crop_scale_min: float = Field(0.08, gt=0, le=1, description="random-resized-crop area lower bound")
    random_flip: bool = Field(True, description="random horizontal flip in training")
    loader: Literal[LOADER_CHOICES] = Field(
        "auto",
        description="auto = dali when nvidia.dali imports, else torchvision; random = random tensors, no I/O "
        "(synthetic: its deprecated name)",
    )
    workers: int = Field(2, ge=0, description="torchvision DataLoader workers, or DALI CPU threads (at least 1)")
    strict: bool = Field(False, description="an unreadable image is an error (false: skipped with a warning)")
    eval_batch: PositiveInt = Field(256, description="images per evaluation batch per rank (does not change results)")
    train_eval_size: PositiveInt | None = Field(None, description="images in the train-eval subset; null = size of val")
    holdout: float = Field(
        0,
        ge=0,
        allow_inf_nan=False,
        description=(
            "training images held out of training, for selecting hyperparameters without touching val: a fraction "
            "below 1, else a count; the same images for every run (evaluated as holdout_top1)"
        ),
    )

    @field_validator("loader")
    @classmethod
    def _old_loader_names(cls, loader: str) -> str:
        if loader in LOADER_ALIASES:
            warnings.warn(
                f"key 'data.loader': '{loader}' is deprecated, use '{LOADER_ALIASES[loader]}' (the same "
                f"random tensors; the dataset 'synthetic' is generated images)",
                BenchDeprecation,
            )
        return LOADER_ALIASES.get(loader, loader)

    @model_validator(mode="after")
    def _holdout_is_a_count_or_fraction(self):
        if self.holdout >= 1 and self.holdout != int(self.holdout):
            raise ValueError(f"key 'data.holdout' is {self.holdout:g}: a fraction below 1 or a whole count of images")
        return self

    @model_validator(mode="after")
    def _path_matches_dataset(self):
        if catalog.DATASETS[self.dataset].user_path and self.path is None:
            raise ValueError(f"data.path is required when data.dataset is '{self.dataset}'")
        return self


class OptimizerSpec(BaseModel):
    """`name` and `lr` plus the optimizer's own hyperparameters (checked by the catalog: catalog.check_optimizer)."""

    model_config = ConfigDict(extra="allow", frozen=True, allow_inf_nan=False, strict=True)
    name: str = Field(
        description="a catalog optimizer (bench/catalog.py); its own hyperparameters are keys "
        "beside name and lr, e.g. momentum, eta, gain_scope"
    )
    lr: float = Field(description=f"peak learning rate, reached at the end of warm-up: {catalog.RULES['lr'][1]}")

    @field_validator("lr")
    @classmethod
    def _lr_rule(cls, value: float) -> float:
        accepts, allowed = catalog.RULES["lr"]  # the one rule of lr: the recipe's, create()'s, every constructor's
        if not accepts(value):
            raise ValueError(f"must be {allowed} (got {value!r})")
        return value

    @model_validator(mode="before")
    @classmethod
    def _old_option_names(cls, data):
        """Deprecated option names renamed once, here, at load: the resolved recipe (recipe.yaml, the run's
        identity, a sweep's cells) holds today's; bench.optim.create renames too, for code that calls it."""
        return catalog.current_options(data) if isinstance(data, dict) else data

    @property
    def hparams(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class ScheduleSpec(Strict):
    warmup_epochs: float = Field(0.0, ge=0, description="linear warm-up from 0 to optimizer.lr, in epochs")
    decay: Literal["cosine", "poly", "step", "constant"] = Field("cosine", description="decay after warm-up, to end_lr")
    power: PositiveFloat = Field(2.0, description="poly decay exponent")
    end_lr: float = Field(0.0, ge=0, description="learning rate at the end of training (cosine and poly)")
    milestones: list[float] = Field(default_factory=list, description="step decay: epochs at which lr *= step_factor")
    step_factor: float = Field(0.1, gt=0, le=1, description="step decay: the factor at each milestone")


class EvalSpec(Strict):
    every_epochs: PositiveFloat = Field(1.0, description="epochs between evaluations (and one at the end)")
    stop_at_chance: int = Field(
        3,
        ge=0,
        description="stop as diverged after this many consecutive evaluations after warm-up with "
        "val_top1 at most 1.5x chance (0 = never)",
    )
    near_target_every_epochs: PositiveFloat | None = Field(
        None,
        description="a finer grid near the target: while the last evaluation's val_top1 is within "
        "near_target_margin points below target_top1, evaluate every this many epochs (null: every_epochs always)",
    )
    near_target_margin: PositiveFloat = Field(5.0, description="points below target_top1 where the finer grid starts")
    curve_images: PositiveInt | None = Field(
        None,
        description="evaluations before the last measure val Top-1 on this many validation images (a fixed, "
        "evenly spread subset) and skip train-eval and holdout; the last evaluation, and the first one whose subset "
        "reaches target_top1, use every image (null: every evaluation uses every image)",
    )
    stop_at_target: bool = Field(
        False,
        description="end the run (completed) at the first evaluation whose val_top1 on every validation "
        "image reaches target_top1: a steps-to-result trial pays only for the steps it measures (the run's "
        "meta: stopped_at_target)",
    )
    ema_epochs: PositiveFloat | None = Field(
        None,
        description="evaluate (and read the target on) an exponential moving average of the weights and "
        "BatchNorm buffers (torch.optim.swa_utils.AveragedModel) with this time constant in epochs: decay "
        "exp(-global_batch / (ema_epochs x training images)) per step, the same images averaged at every batch "
        "(null: evaluate the trained weights)",
    )


class CheckpointSpec(Strict):
    """When to checkpoint (always also at the end); null cadences = at every evaluation."""

    every_steps: PositiveInt | None = Field(None, description="optimizer steps between checkpoints")
    every_epochs: PositiveFloat | None = Field(None, description="epochs between checkpoints")
    keep: PositiveInt = Field(2, description="newest checkpoints kept while the run goes on")
    at_images: list[PositiveInt] = Field(
        default_factory=list,
        description="also checkpoint at the first step whose images seen reach each of these, and keep those "
        "checkpoints to the end (kept-<images>.pt, never pruned): the points `bench branch` branches from",
    )
    keep_final: bool = Field(
        True,
        description="a finished run (completed or diverged) keeps its final checkpoint "
        "(false: none; the analysis needs none)",
    )


class EngineSpec(Strict):
    """How the step is computed; none of these change the mathematics except sync_bn."""

    precision: Literal["fp32", "bf16", "fp64"] = Field(
        "fp32",
        description="bf16 = autocast forward/backward, fp32 weights; fp64 = float64 weights and inputs, "
        "for checking that two batch plans compute the same steps (rounding differences near 1e-16), not for speed",
    )
    channels_last: bool = Field(False, description="NHWC memory format (faster convolutions on GPUs)")
    compile: Union[
        bool, Literal["auto", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]
    ] = Field(
        False,
        description="torch.compile the model: false, true (torch's default mode) or a mode: reduce-overhead (CUDA "
        "graphs where torch finds them safe), max-autotune, max-autotune-no-cudagraphs; auto = the mode measured "
        "fastest on this GPU model (bench/defaults.json), else false (docs/performance.md)",
    )
    ghost_bn: Literal["auto", "batch_norm", "custom"] = Field(
        "auto",
        description="ghost BatchNorm's implementation (model.bn_batch): batch_norm = torch's kernel on a view of the "
        "chunks (a layout copy in and out for a channels_last input), custom = bench's own forward and backward on "
        "a free view; auto = the one measured fastest on this GPU model (bench/defaults.json), else "
        "custom for a channels_last input and batch_norm for a contiguous one",
    )
    optimizer_step: Literal["auto", "eager", "compiled"] = Field(
        "auto",
        description="LARS's update (LARS, LARC and their VRGD, AdaScale and SimiGrad forms): eager = its foreach ops, "
        "compiled = the same under torch.compile (compiled at the first step); auto = the one measured fastest on "
        "this GPU model (bench/defaults.json), else eager",
    )
    sync_bn: bool = Field(False, description="BatchNorm statistics over all ranks' micro-batches (SyncBatchNorm)")
    threads: Union[PositiveInt, Literal["auto"]] = Field(
        "auto",
        description=(
            "CPU threads for the math of each process; auto = the cores it may use (affinity, cgroup quota) over the "
            "local workers, capped by OMP_NUM_THREADS (changes float rounding: pin N for bitwise repeats)"
        ),
    )
    micro_batch_cap: PositiveInt = Field(256, description="largest micro-batch `micro_batch: auto` may pick")
    group_pass: Literal["auto", "batched", "sequential"] = Field(
        "auto",
        description=(
            "gradient groups inside one micro-batch (model.bn_batch): batched = one torch.func.vmap pass, "
            "sequential = group by group; auto = sequential (measured faster on a CPU and on an H200: "
            "docs/performance.md)"
        ),
    )
    dead_params: Literal["warn", "refuse"] = Field(
        "warn",
        description=(
            "parameters that get exactly zero gradient whatever the images (feature maps smaller than the kernel: "
            "a stem built for larger images), found by a probe before training: above 1% of them, warn, or refuse "
            "to run (bench/engine/dead.py)"
        ),
    )


class WandbSpec(Strict):
    """A Weights & Biases run per bench run (the wandb package: pip install -e '.[wandb]')."""

    project: str = Field(min_length=1, description="W&B project")
    entity: str | None = Field(None, description="W&B team or user (default: the logged-in user's)")
    mode: Literal["offline", "online"] = Field(
        "offline", description="offline: <run>/wandb/offline-run-* for `wandb sync`; online: sent as it goes"
    )


class LoggingSpec(Strict):
    """Where a run's curves go besides its run directory's metrics and events; none of it changes a number."""

    tensorboard: bool = Field(
        False,
        description="TensorBoard event files in <run>/tensorboard as the run goes "
        "(the tensorboard package: pip install -e '.[tensorboard]')",
    )
    wandb: WandbSpec | None = Field(None, description="Weights & Biases curves, sent as checkpoints keep them")
    events_every_steps: PositiveInt = Field(
        1,
        description="events.jsonl gets a step's line when step % N == 0 and at the last step (Lightning's "
        "log_every_n_steps): a long run's log within a committed study's size budget. The diagnostics' "
        "means and the noise scale are then read on those steps; N > 1 needs a fixed pace (no adaptive_batch "
        "or AdaScale), where a step's images follow from its number",
    )


class AdaptiveBatchSpec(Strict):
    """A batch that moves during training, always a whole number of `min_batch` chunks within [min_batch,
    max_batch]; lr x sqrt(batch / global_batch). The recipe's global_batch is then the first step's batch and the
    lr's reference, and min_batch the unit a step counts (the batch plan's `batch`, bench/engine/plan.py). Two
    controllers, one of them named:
    - SimiGrad's (`target_similarity`): after every `every_steps` steps the batch grows by `adjust` when the mean
      similarity of the two halves' gradients is below the target (noisy gradients) and shrinks by it when above;
      needs an optimizer with pace "adaptive" (simigrad_*).
    - a declared schedule (`by_images`): the batch by images seen, as a batch-size warm-up (Merrill et al. 2025)
      or the schedule `bench table branching` implies; any optimizer of a fixed pace."""

    target_similarity: float | None = Field(
        None, gt=-1, lt=1, description="cosine similarity SimiGrad's controller steers toward"
    )
    by_images: dict[NonNegativeInt, PositiveInt] | None = Field(
        None,
        description="the batch by images seen instead of a controller: {8192: 256} runs batch 256 from 8,192 images "
        "on (global_batch before the first)",
    )
    min_batch: PositiveInt = Field(description="smallest batch, and the unit every batch is a multiple of")
    max_batch: PositiveInt = Field(description="largest batch")
    adjust: float = Field(0.1, gt=0, le=1, description="relative change per adjustment (at least one chunk)")
    every_steps: PositiveInt = Field(1, description="steps between adjustments (their similarities averaged)")
    rule: Literal["proportional", "authors"] = Field(
        "proportional",
        description=(
            "proportional: x (1 + adjust) up, / (1 + adjust) down, rounded, at least one chunk; authors: SimiGrad's "
            "code, x (1 + adjust) up and x (1 - adjust) down, floored, at least one chunk each way (bench/engine/pace.py)"
        ),
    )

    @model_validator(mode="after")
    def _one_controller(self):
        if (self.target_similarity is None) == (self.by_images is None):
            raise ValueError("give exactly one of target_similarity (SimiGrad's controller) and by_images")
        for images, batch in (self.by_images or {}).items():
            if batch % self.min_batch or not self.min_batch <= batch <= self.max_batch:
                raise ValueError(
                    f"by_images.{images}: batch {batch} is not a multiple of min_batch {self.min_batch} within "
                    f"[{self.min_batch}, {self.max_batch}]"
                )
        return self


class Recipe(Strict):
    name: str = Field(description="the run directory's folder name")
    model: ModelSpec = Field(description="the network")
    data: DataSpec = Field(DataSpec(), description="the dataset, its transforms and its loader")
    global_batch: PositiveInt = Field(
        description="images per optimizer step over all ranks and micro-batches "
        "(with adaptive_batch: the first step's, and the lr's reference)"
    )
    micro_batch: Union[PositiveInt, Literal["auto"]] = Field(
        "auto",
        description=(
            "images per forward/backward on one rank; accumulation covers the rest of the batch (auto: the largest "
            "divisor not above engine.micro_batch_cap)"
        ),
    )
    gsnr_groups: PositiveInt | None = Field(
        None,
        description="gradient groups k per step (per min_batch chunk with adaptive_batch); null = one per micro-batch",
    )
    adaptive_batch: AdaptiveBatchSpec | None = Field(
        None, description="SimiGrad-style adaptive batch; global_batch is then the first step's batch"
    )
    optimizer: OptimizerSpec = Field(description="the optimizer and its hyperparameters")
    schedule: ScheduleSpec = Field(ScheduleSpec(), description="the learning-rate schedule")
    epochs: PositiveFloat = Field(description="training length in epochs (passes over the training images)")
    label_smoothing: float = Field(0.0, ge=0, lt=1, description="cross-entropy label smoothing")
    weight_decay: float = Field(0.0, ge=0, description="L2 weight decay (not on BatchNorm weights or biases)")
    seed: int = Field(0, ge=0, le=2**32 - 1, description="0 .. 2^32 - 1 (numpy's seed range)")
    eval: EvalSpec = Field(EvalSpec(), description="when to evaluate")
    engine: EngineSpec = Field(EngineSpec(), description="how the step is computed")
    checkpoint: CheckpointSpec = Field(CheckpointSpec(), description="when to checkpoint")
    logging: LoggingSpec = Field(LoggingSpec(), description="live curves (TensorBoard, Weights & Biases)")
    target_top1: float = Field(gt=0, le=100, description="percent; epochs-to-target uses the first eval at or above it")
    tags: dict[str, Union[str, int, float, bool]] = Field(
        default_factory=dict,
        description=(
            "labels that do not change training (bench sweep writes sweep, arm, trial, study, role); "
            "runs with different tags are different recipes in the analysis"
        ),
    )

    @model_validator(mode="after")
    def _name_is_a_folder_name(self):
        check_path_component(self.name, "name")
        return self

    @model_validator(mode="after")
    def _warmup_within_training(self):
        if self.schedule.warmup_epochs > self.epochs:
            raise ValueError(
                f"schedule.warmup_epochs {self.schedule.warmup_epochs:g} is longer than training "
                f"(epochs {self.epochs:g})"
            )
        return self

    @model_validator(mode="after")
    def _batch_divides(self):
        unit, unit_key = self.global_batch, "global_batch"
        if self.adaptive_batch:
            a = self.adaptive_batch
            unit, unit_key = a.min_batch, "adaptive_batch.min_batch"
            if not a.min_batch <= self.global_batch <= a.max_batch:
                raise ValueError(
                    f"global_batch {self.global_batch} must lie in [adaptive_batch.min_batch "
                    f"{a.min_batch}, adaptive_batch.max_batch {a.max_batch}]"
                )
            for key, value in (("global_batch", self.global_batch), ("adaptive_batch.max_batch", a.max_batch)):
                if value % a.min_batch:
                    raise ValueError(f"{key} {value} is not a multiple of adaptive_batch.min_batch {a.min_batch}")
            record = catalog.OPTIMIZERS.get(self.optimizer.name)  # an unknown name is reported by _check_names
            if a.by_images is not None and record is not None and record.pace != "fixed":
                raise ValueError(
                    f"adaptive_batch.by_images needs an optimizer of a fixed pace, not '{self.optimizer.name}' "
                    f"(its {record.pace} pace moves the batch or the schedule itself)"
                )
            if a.target_similarity is not None and record is not None and record.pace != "adaptive":
                adaptive = ", ".join(name for name, r in catalog.OPTIMIZERS.items() if r.pace == "adaptive")
                raise ValueError(
                    f"adaptive_batch needs an optimizer that measures the halves' similarity "
                    f"({adaptive}), not '{self.optimizer.name}'"
                )
        for key in ("micro_batch", "gsnr_groups"):
            value = getattr(self, key)
            if isinstance(value, int) and unit % value:
                raise ValueError(f"{unit_key} {unit} is not a multiple of {key} {value}")
        return self

    @model_validator(mode="after")
    def _sparse_events_need_a_fixed_pace(self):
        every = self.logging.events_every_steps
        record = catalog.OPTIMIZERS.get(self.optimizer.name)  # an unknown name is reported by _check_names
        if every > 1 and (self.adaptive_batch or (record is not None and record.pace != "fixed")):
            moved = (
                "adaptive_batch" if self.adaptive_batch else f"'{self.optimizer.name}' (its gain moves the schedule)"
            )
            raise ValueError(
                f"logging.events_every_steps {every} needs a fixed pace: with {moved} every step's batch or gain "
                "is logged (events_every_steps 1)"
            )
        return self

    @model_validator(mode="after")
    def _bn_batch_divides(self):
        g, micro = self.model.bn_batch, self.micro_batch
        if g is None:
            return self
        if isinstance(micro, int) and g > micro:
            raise ValueError(f"model.bn_batch {g} is larger than micro_batch {micro} (it splits a micro-batch)")
        if isinstance(micro, int) and micro % g:
            raise ValueError(f"model.bn_batch {g} does not divide micro_batch {micro} into equal BatchNorm batches")
        if self.engine.sync_bn:
            raise ValueError(
                "model.bn_batch and engine.sync_bn contradict each other: BatchNorm over a few images, "
                "or over all ranks; drop one"
            )
        return self

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)

    @staticmethod
    def as_today(saved: dict) -> dict:
        """A resolved recipe saved by a run, read with today's schema: keys added since are filled in
        at their defaults. As saved when it no longer validates."""
        try:
            return Recipe.model_validate(saved).model_dump(mode="json")
        except (ValidationError, TypeError):
            return saved

    def same_as(self, saved_yaml: str) -> bool:
        """Whether a resolved recipe saved by a run is this one, read with today's schema: a key
        added to the schema since, at its default, is no change, and neither are `logging`, `engine.threads`
        and `engine.dead_params`."""
        try:
            saved = Recipe.model_validate(yaml.safe_load(saved_yaml))
            # logging changes no number; the thread count only float rounding, as another machine would
            engine = saved.engine.model_copy(
                update={"threads": self.engine.threads, "dead_params": self.engine.dead_params}
            )  # a check only
            neutral = {"logging": self.logging, "engine": engine}
            return saved.model_copy(update=neutral) == self
        except (ValidationError, yaml.YAMLError, TypeError):
            return False


def describe_error(error: ValidationError, root: type[BaseModel] | None = None) -> str:
    """The first problem of a pydantic error as one sentence naming the key; an unknown key comes first
    (a misspelt `epoch:` is the cause of the missing `epochs`), with the closest known key of its section.
    `root`: the schema the error is of (default: Recipe; a sweep file's is bench.sweep.SweepSpec)."""
    errors = [_untagged(e) for e in error.errors()]
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    key = ".".join(str(p) for p in err["loc"]) or "(top level)"
    if err["type"] == "extra_forbidden":
        section = _section(err["loc"][:-1], root)
        close = difflib.get_close_matches(str(err["loc"][-1]), list(section.model_fields) if section else [], n=1)
        return f"unknown key '{key}'" + (f" (did you mean '{close[0]}'?)" if close else "")
    if err["type"] == "missing":
        return f"missing required key '{key}'"
    members = [e for e in errors if len(e["loc"]) > 1 and e["loc"][:-1] == err["loc"][:-1]]
    parent = _section(err["loc"][:-2], root)
    if len(members) > 1 and parent and err["loc"][-1] not in parent.model_fields:
        # a union's members (an integer or 'auto'): pydantic names each by a tag after the key
        key = ".".join(str(p) for p in err["loc"][:-1])
        said = " or ".join(dict.fromkeys(e["msg"][0].lower() + e["msg"][1:] for e in members))
        return f"key '{key}': {said} (got {_shown(err['input'])})"
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "value_error":
        return msg if not err["loc"] else f"key '{key}': {msg}"
    if err["type"] in ("model_type", "dict_type"):  # pydantic's "instance of ModelSpec" names a class, not the file
        return f"key '{key}': a section (a mapping of keys) is expected (got {_shown(err['input'])})"
    return f"key '{key}': {msg[0].lower() + msg[1:]} (got {_shown(err['input'])}{_text_hint(err)})"


def _untagged(err: dict) -> dict:
    """The error with the union-member tags pydantic puts inside its key path ('budget.function-after[_one(),
    Budget].epoch': a sweep's one budget or budgets by batch) dropped; a tag at the end stays (the union case of
    describe_error reads it)."""
    loc = err["loc"]
    inner = [p for p in loc[:-1] if not (isinstance(p, str) and "[" in p)]
    return {**err, "loc": (*inner, *loc[-1:])}


def _text_hint(err) -> str:
    """Why a number or a boolean came as text (strict types): it was quoted (1e-3 unquoted is a float here)."""
    wanted = {"int_type": int, "float_type": (int, float), "bool_type": bool}.get(err["type"])
    if wanted is None or not isinstance(err["input"], str):
        return ""
    try:  # what the text would be unquoted, read as a recipe is ('abc' stays text: no quotes to drop)
        value = yaml.load(err["input"], Loader=_RecipeLoader)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError:
        return ""
    fits = isinstance(value, wanted) and (wanted is bool or not isinstance(value, bool))
    return ", text: write it without quotes" if fits else ""


def _shown(value, limit: int = 60) -> str:
    """A value as an error message echoes it: its repr, or its type and the first `limit` characters of it."""
    text = repr(value)
    return text if len(text) <= limit else f"a {type(value).__name__} starting {text[:limit]}..."


def _check_names(recipe: Recipe, models: bool = True) -> None:
    """The names a recipe refers to: the optimizer and its options (the catalog, torch-free), the extras its logging
    needs, and (models) the timm model and its keywords, built on the meta device (imports torch and timm)."""
    if models:
        from bench import models as model_checks  # imports torch and timm

        model_checks.check(recipe.model.name, recipe.model.kwargs, recipe.model.bn_batch)
    # create() takes the top-level key as weight_decay: here it, or a misspelling of it, is the wrong place
    own = getattr(catalog.OPTIMIZERS.get(recipe.optimizer.name), "options", ())
    near = [
        k
        for k in recipe.optimizer.hparams
        if k not in own and difflib.get_close_matches(k, ["weight_decay"], cutoff=0.8)
    ]
    if near:
        raise UserError(
            f"key 'optimizer.{near[0]}': weight decay is the recipe's top-level key weight_decay (every optimizer's, "
            "the excluded tensors aside); move it there"
        )
    record = catalog.check_optimizer(recipe.optimizer.name, recipe.optimizer.hparams, section="optimizer")
    if record.schedule_free and recipe.eval.ema_epochs is not None:
        raise UserError(
            f"key 'eval.ema_epochs': optimizer '{record.name}' is schedule-free and evaluates its own average of the "
            "iterates (optimizer.eval()), while an EMA would average the other sequence it trains; set "
            "eval.ema_epochs: null"
        )
    if record.schedule_free and recipe.schedule.decay != "constant":
        warnings.warn(
            f"optimizer '{record.name}' is schedule-free, yet schedule.decay is '{recipe.schedule.decay}': it needs no "
            "decay (set schedule.decay: constant; its warm-up is schedule.warmup_epochs or its warmup_steps)",
            BenchWarning,
        )
    warmup, decay = recipe.schedule.warmup_epochs, recipe.schedule.decay
    if warmup >= 0.9 * recipe.epochs and decay != "constant":  # the schedule named is barely the one run
        warnings.warn(
            f"schedule.warmup_epochs {warmup:g} is {warmup / recipe.epochs:.0%} of the run (epochs {recipe.epochs:g}): "
            f"the lr rises almost to the end and the {decay} decay barely acts; shorten the warm-up",
            BenchWarning,
        )
    for package in ("tensorboard", "wandb"):
        if getattr(recipe.logging, package):
            require_extra(package, f"logging.{package}")


MAX_ALIASES = 100  # YAML anchors used more often than this are refused (a "billion laughs" file)


class _RecipeLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing duplicate keys (PyYAML keeps the last silently) and alias bombs."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            self.aliases_used = getattr(self, "aliases_used", 0) + 1
            if self.aliases_used > MAX_ALIASES:
                raise yaml.YAMLError(f"more than {MAX_ALIASES} uses of YAML aliases (*name); write the values out")
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                raise yaml.YAMLError(f"a key at line {line} is a {type(key).__name__}; keys are names")
            if key in seen:
                raise yaml.YAMLError(f"key '{key}' appears twice, at lines {seen[key]} and {line}; keep one")
            seen[key] = line
        return super().construct_mapping(node, deep)


# No YAML timestamps: no key takes a date, and 2020-01-01 read as one is a value no key allows (or, as a tag, one
# JSON cannot write); it stays text, as in YAML 1.2's core schema.
_RecipeLoader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
# YAML 1.2's floats without a decimal point (1e-3, 5E4), which PyYAML (YAML 1.1) reads as text: with strict types
# a learning rate written as timm's configs write it would be refused, and a quoted "1e-3" could not be told apart.
_RecipeLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)[eE][-+]?\d+$"), list("-+.0123456789")
)


def read_yaml(path: Path, what: str = "recipe"):
    """A YAML file's contents; one-sentence UserErrors for a folder, a missing, non-UTF-8 or malformed file."""
    if path.is_dir():
        raise UserError(f"{path}: a folder, not a {what} file")
    try:
        return yaml.load(path.read_text(encoding="utf-8"), Loader=_RecipeLoader)  # noqa: S506 - a SafeLoader
    except FileNotFoundError:
        raise UserError(f"{path}: no such {what} file") from None
    except OSError as e:
        raise UserError(f"{path}: cannot read the {what} file ({e.strerror or e})") from None
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: not UTF-8 text (byte {e.start}); save the {what} as UTF-8") from None
    except (yaml.YAMLError, ValueError, TypeError) as e:  # ValueError: a tagged value (!!float x) it cannot be
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise UserError(f"{path}: malformed YAML{where}: {getattr(e, 'problem', None) or e}") from None


def top_keys(path: str | Path) -> set:
    """The keys of a YAML file's top-level mapping, none where it is unreadable or not one (its loader then says
    why): how a recipe, a sweep file and a branch file are told apart."""
    try:
        raw = read_yaml(Path(path))
    except UserError:
        return set()
    return set(raw) if isinstance(raw, dict) else set()


def load_file_spec(path: str | Path, model: type[BaseModel], what: str, shape: str):
    """A sweep or branch file (`what`) read into `model`: a YAML mapping (`shape`: its keys, for the message), its
    name from the file's stem by default, and its `base` recipe resolved beside it; bad input is one sentence."""
    path = Path(path)
    raw = read_yaml(path, what)
    if not isinstance(raw, dict):
        raise UserError(f"{path}: a {what} file is a YAML mapping ({shape})")
    if {"model", "optimizer"} <= set(raw):
        raise UserError(f"{path}: a recipe, not a {what} file ({shape}); `bench run {path}` runs it")
    raw.setdefault("name", path.stem)
    try:
        check_path_component(str(raw["name"]), "name")
        spec = model.model_validate(raw)
    except ValueError as e:  # pydantic's ValidationError is a ValueError too
        message = describe_error(e, model) if isinstance(e, ValidationError) else str(e)
        raise UserError(f"{path}: {message}") from None
    base = (path.parent / spec.base).resolve()
    if not base.is_file():
        raise UserError(f"{path}: key 'base': no recipe file at {base}")
    return spec.model_copy(update={"base": base})


def parse_set(assignment: str) -> tuple[list[str], Any]:
    """'schedule.decay=poly' -> (['schedule', 'decay'], 'poly'); values parse as YAML."""
    key, value = split_set(assignment)
    try:
        return key.split("."), yaml.load(value, Loader=_RecipeLoader)  # noqa: S506 - a SafeLoader, as recipe files
    except (yaml.YAMLError, ValueError, TypeError) as e:
        raise UserError(
            f"--set '{assignment}': the value is not valid YAML ({getattr(e, 'problem', None) or e})"
        ) from None


def _section(loc, root: type[BaseModel] | None = None) -> type[BaseModel] | None:
    """The schema class of the section at `loc` (() is `root` itself, by default the Recipe), if it is one; a
    mapping of sections (a sweep's `arms: {NAME: Arm}`) takes its key as one part of `loc`."""
    model: Any = root or Recipe
    keyed = False
    for part in loc:
        if keyed:  # the mapping's own key (an arm's name): the section is its values'
            keyed = False
            continue
        field = model.model_fields.get(str(part)) if model else None
        if field is None:
            return None
        model = _schema_class(field.annotation)
        keyed = getattr(field.annotation, "__origin__", None) is dict
    return model


def _schema_class(ann) -> type[BaseModel] | None:
    """The section class an annotation names (also inside `X | None`), if any."""
    options = getattr(ann, "__args__", None) or (ann,)
    return next((a for a in options if isinstance(a, type) and issubclass(a, BaseModel)), None)


# Keys the schema requires that load() fills in from the file when the recipe leaves them out: their default.
FILLED_IN = {"name": "the file's name"}


def keys() -> list[tuple[str, str, str, str]]:
    """Every recipe key as (dotted key, type, default, meaning), read from the schema (`bench recipe keys`); a key
    load() fills in (FILLED_IN) shows what it is filled with, not 'required'."""
    rows = []

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, field in model.model_fields.items():
            section = _schema_class(field.annotation)
            value = None if field.is_required() else field.get_default(call_default_factory=True)
            default = (
                FILLED_IN[prefix + name]
                if prefix + name in FILLED_IN
                else "required"
                if field.is_required()
                else ""
                if value is not None and section
                else json.dumps(value, default=str)
            )
            kind = "section" if section else f"{_type_name(field.annotation)} {_bounds(field.metadata)}".strip()
            rows.append((prefix + name, kind, default, field.description or ""))
            if section:
                walk(section, f"{prefix}{name}.")

    walk(Recipe, "")
    return rows


def _bounds(metadata) -> str:
    return " ".join(
        f"{op} {getattr(m, name)}"
        for m in metadata
        for name, op in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="))
        if getattr(m, name, None) is not None
    )


def _type_name(ann) -> str:
    """A schema annotation in words: 'int > 0', 'one of cosine, poly', 'float or null', ..."""
    origin, args = get_origin(ann), get_args(ann)
    if origin is Literal:
        return "one of " + ", ".join(map(str, args))
    if origin is Annotated:
        return f"{_type_name(args[0])} {_bounds(args[1:])}".strip()
    if args and origin in (Union, types.UnionType):
        return " or ".join("null" if a is type(None) else _type_name(a) for a in args)
    if origin is not None:
        return str(ann).replace("typing.", "")
    return getattr(ann, "__name__", str(ann))


def _known_key(path: list[str]) -> bool:
    """Whether a dotted key exists in the schema (free-form dicts accept any sub-key)."""
    model: Any = Recipe
    for part in path:
        if model is OptimizerSpec and part not in model.model_fields:
            return True  # optimizer hyperparameters are checked by bench.optim
        if not (isinstance(model, type) and issubclass(model, BaseModel)) or part not in model.model_fields:
            return model is dict
        ann = model.model_fields[part].annotation
        model = _schema_class(ann) or getattr(ann, "__origin__", ann)  # a section, also one that may be null
    return True


def _unknown_key_message(assignment: str, path: list[str]) -> str:
    known = [p for p in (_section(tuple(path[:i])) for i in range(len(path))) if p][-1:]
    fields = list(known[0].model_fields) if known else []
    close = difflib.get_close_matches(path[-1], fields, n=1)
    return (
        f"--set '{assignment}': '{'.'.join(path)}' is not a recipe key"
        + (f" (did you mean '{'.'.join(path[:-1] + [close[0]])}'?)" if close else "")
        + "; `bench recipe keys` lists them"
    )


def apply_sets(raw: dict, assignments: list[str]) -> dict:
    for assignment in assignments:
        path, value = parse_set(assignment)
        if not _known_key(path):
            raise UserError(_unknown_key_message(assignment, path))
        node = raw
        for part in path[:-1]:
            if node.get(part) is None:  # absent, or a section that is null (logging.wandb, adaptive_batch)
                node[part] = {}
            node = node[part]
            if not isinstance(node, dict):
                raise UserError(f"--set '{assignment}': '{part}' is not a section")
        node[path[-1]] = value
    return raw


def recipe_from_dict(source: str, raw: dict) -> Recipe:
    """A recipe built in code (a benchmark's), validated with the same one-sentence errors as a file."""
    try:
        recipe = Recipe.model_validate(raw)
    except ValidationError as e:
        raise UserError(f"{source}: {describe_error(e)}") from None
    _check_names(recipe)
    return recipe


# The keys a comparison is made by: a --set of one of them makes another recipe, which gets another name.
COMPARED = ("optimizer.name", "global_batch", "model.name", "data.dataset")
_SEED_SUFFIX = re.compile(r"(?<=[-_]seed)\d+$")


def _value_at(raw: dict, key: str):
    node = raw
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def named_after_sets(before: dict, after: dict, sets: list[str]) -> str:
    """The name of the recipe `after` (`before` with `sets` applied): its own, with each changed COMPARED key
    appended (`mnist-lars+optimizer.name=vrgd_lars`, an earlier append of that key replaced) and a `-seed<M>`
    suffix made the --set seed, so a run is filed and reported under what ran. A --set name is kept as given."""
    keys = [parse_set(s)[0] for s in sets]
    name = after["name"]
    if ["name"] in keys or not isinstance(name, str):  # not a name: validation says so
        return name
    if ["seed"] in keys:  # the suffix of the name before any appended key
        base, plus, appended = name.partition("+")
        name = _SEED_SUFFIX.sub(str(after.get("seed")), base) + plus + appended
    set_keys = [".".join(k) for k in keys]  # a section set (optimizer={...}) changes the compared keys inside it
    for key in dict.fromkeys(c for k in set_keys for c in COMPARED if c == k or c.startswith(k + ".")):
        value = _value_at(after, key)
        if value != _value_at(before, key):
            name = re.sub(rf"\+{re.escape(key)}=[^+]*", "", name) + "+" + file_stem(f"{key}={value}")
    return name


def load(
    path: str | Path, sets: list[str] = (), models: bool = True, notes: list[str] | None = None, blame: bool = True
) -> Recipe:
    """Read, override, validate and resolve one recipe file. models=False: the timm model is not built (no torch).
    A --set that changes what is compared renames the recipe (named_after_sets), said in `notes`. blame=False: an
    error says what is wrong without naming the file and the --set (a caller that made the sets blames its own
    key: a sweep file's)."""
    path = Path(path)
    said = (lambda message: _blamed(path, message, list(sets))) if blame else (lambda message: message)
    raw = read_yaml(path)
    if not isinstance(raw, dict):
        raise UserError(f"{path}: a recipe is a YAML mapping of keys (model, global_batch, optimizer, ...)")
    raw.setdefault("name", path.stem)  # FILLED_IN
    before = copy.deepcopy(raw)
    try:
        apply_sets(raw, list(sets))
    except UserError as e:
        raise UserError(f"{path}: {e}" if blame else str(e)) from None
    name = named_after_sets(before, raw, list(sets))
    if name != raw["name"]:
        if notes is not None:
            notes.append(f"run name {name!r}: {path}'s name {str(before['name'])!r} with what --set changed")
        raw["name"] = name
    try:
        recipe = Recipe.model_validate(raw)
    except ValidationError as e:
        raise UserError(said(describe_error(e))) from None
    try:
        _check_names(recipe, models)
    except UserError as e:
        raise UserError(said(str(e))) from None
    return recipe


def _blamed(path: Path, message: str, sets: list[str]) -> str:
    """An error as `path: message`, naming the --set assignments whose keys the message names: a value given on
    the command line is not blamed on the file alone."""
    named = [s for s in sets if re.search(rf"\b{re.escape(s.partition('=')[0])}\b", message)]
    return f"{path} with --set {', '.join(named)}: {message}" if named else f"{path}: {message}"
