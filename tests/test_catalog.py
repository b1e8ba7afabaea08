"""The guard of bench/catalog.py: every record resolves to its code and declares what the code does, every piece of
code has a record, every record has its behaviour tests, and the lists elsewhere are derived from the catalog."""

import importlib
import inspect
import itertools
import math
import pkgutil
import re
import subprocess
import sys
import typing
from importlib import metadata
from pathlib import Path

import pytest

import bench
from bench import catalog
from bench.data import loaders
from bench.optim.base import GroupOptimizer
from bench.optim.factory import hyperparameters
from bench.recipe import DataSpec

ROOT = Path(bench.__file__).parent
MIXINS = {"GroupOptimizer", "GroupGradients", "VRGD", "AdaScale", "SimiGrad"}  # bases, no update of their own


@pytest.mark.parametrize("name", sorted(catalog.OPTIMIZERS))
def test_every_optimizer_record_declares_what_its_class_does(name):
    from bench.optim import REGISTRY

    record = catalog.OPTIMIZERS[name]
    cls = REGISTRY[name]  # a library record's: its adapted class
    assert record.pace == cls.pace and record.reduces_gradients == cls.reduces_gradients
    if record.reduces_gradients:
        assert {"sums": None, "squares": "squares", "halves": "halves"}[record.groups] == cls.second
    # its options and their defaults, in order, are the class's (the analysis reads the defaults from the record)
    assert list(record.defaults.items()) == [
        (k, v) for k, v in hyperparameters(cls).items() if k not in ("lr", "weight_decay")
    ]
    assert all(type(record.defaults[k]) is type(v) for k, v in hyperparameters(cls).items() if k in record.defaults)
    if record.library:  # the library class's signature is the list (the library checks its own values)
        library = tuple(  # the library's own defaults (bench's differ only in `presets`), then VRGD's if a mixin
            (p.name, p.default)
            for p in inspect.signature(record.load_library().__init__).parameters.values()
            if p.name not in ("self", "params", "lr", "weight_decay")
            and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        )
        assert record.signature[: len(library)] == library
        assert cls.library is record.load_library() and cls.swaps_weights == record.schedule_free
        assert record.package and record.paper and set(dict(record.presets)) <= set(record.options)
    else:
        assert all(option in catalog.RULES for option in record.options), "every option has a rule"
    assert record.base in catalog.OPTIMIZERS and catalog.OPTIMIZERS[record.base].base == record.base
    assert record.display and record.color.startswith("#")


def test_every_optimizer_record_has_a_marker_and_no_two_of_one_hue_share_it():
    """A figure tells arms apart by colour and marker (bench.analysis.style.looks): every record's marker is one of
    style.MARKERS, no two records share a (colour, marker) pair, and two records whose colours read as one hue
    (LARS's and Lion's blues, LAMB's and Nesterov's green) have different markers."""
    from bench.analysis import style

    records = catalog.OPTIMIZERS.values()
    assert all(r.marker in style.MARKERS for r in records)
    assert len({(r.color, r.marker) for r in records}) == len(records)
    alike = [
        (a.name, b.name)
        for a, b in itertools.combinations(records, 2)
        if style.same_hue(a.color, b.color) and a.marker == b.marker
    ]
    assert alike == []
    assert catalog.OPTIMIZERS["lamb"].color == catalog.OPTIMIZERS["nesterov"].color  # one green: the markers differ
    assert catalog.OPTIMIZERS["lamb"].marker != catalog.OPTIMIZERS["nesterov"].marker


def test_each_library_record_names_the_package_its_class_comes_from():
    """The package a library record names, whose version each run records (bench.rundir.versions), is the installed
    distribution that provides the record's class."""
    provides = metadata.packages_distributions()
    name = lambda n: re.sub(r"[-_.]+", "-", n).lower()  # noqa: E731 - as PEP 503 normalizes distribution names
    for record in catalog.OPTIMIZERS.values():
        if record.library:
            module = record.library.partition(":")[0].partition(".")[0]
            assert name(record.distribution) in map(name, provides[module]), record.name
    assert set(catalog.LIBRARIES) == {r.distribution for r in catalog.OPTIMIZERS.values() if r.library}


def test_every_optimizer_class_has_a_record():
    classes = set()
    for info in pkgutil.iter_modules([str(ROOT / "optim")]):
        module = importlib.import_module(f"bench.optim.{info.name}")
        classes |= {
            f"{cls.__module__}:{cls.__name__}"
            for _, cls in inspect.getmembers(module, inspect.isclass)
            if issubclass(cls, GroupOptimizer) and cls.__module__ == module.__name__ and cls.__name__ not in MIXINS
        }
    assert classes == {r.target for r in catalog.OPTIMIZERS.values()}


@pytest.mark.parametrize("name", sorted(n for n, r in catalog.OPTIMIZERS.items() if r.default_space()))
def test_every_default_search_space_is_a_sweep_arm_s_space_over_recipe_keys(name):
    import json

    from bench import recipe
    from bench.sweep import Arm

    arm = Arm.model_validate({"set": {"optimizer.name": name}, "space": "default"})
    assert set(arm.space) == set(catalog.OPTIMIZERS[name].default_space())
    for u in (0.0, 0.5, 0.99):
        sets = [f"optimizer.name={name}", *(f"{k}={json.dumps(axis.at(u))}" for k, axis in arm.space.items())]
        sets += ["schedule.decay=constant"] if catalog.OPTIMIZERS[name].schedule_free else []  # its own schedule
        recipe.load(ROOT.parent / "recipes" / "sweeps" / "base" / "digits.yaml", sets)  # each point: a valid recipe


def test_every_optimizer_record_has_its_tests():
    from tests.helpers import HPARAMS

    assert set(HPARAMS) == set(catalog.OPTIMIZERS)  # the training and resume tests run each one


@pytest.mark.parametrize("name", sorted(catalog.LOADERS))
def test_every_loader_record_declares_what_its_module_does(name):
    record = catalog.LOADERS[name]
    if not record.available():
        pytest.skip(f"{record.requires} does not import here")
    module = loaders.get(name)
    assert module.READS_FILES == record.reads_files == catalog.reads_files(name)
    assert callable(module.train) and callable(module.evaluation)


def test_every_loader_module_has_a_record_and_the_recipe_offers_each():
    with_protocol = {
        f"bench.data.{p.stem}" for p in (ROOT / "data").glob("*.py") if "\nREADS_FILES = " in p.read_text()
    }
    assert with_protocol == {r.module for r in catalog.LOADERS.values()}
    offered = set(typing.get_args(DataSpec.model_fields["loader"].annotation))
    assert offered == {"auto", *catalog.LOADERS, *catalog.LOADER_ALIASES}
    assert set(catalog.LOADER_ALIASES.values()) <= set(catalog.LOADERS)
    assert set(catalog.AUTO_LOADERS) <= set(catalog.LOADERS)


def test_every_file_loader_record_has_the_behaviour_tests():
    from tests.helpers import BACKENDS

    assert set(BACKENDS) == {n for n, r in catalog.LOADERS.items() if r.reads_files}


def test_every_dataset_record_is_in_the_recipe_and_the_analysis():
    from bench.analysis.results import SETTING_KEYS
    from bench.recipe import DataSpec

    assert set(typing.get_args(DataSpec.model_fields["dataset"].annotation)) == set(catalog.DATASETS)
    for record in catalog.DATASETS.values():
        assert record.reads in DataSpec.model_fields, record.name
        assert set(record.setting_keys) <= set(SETTING_KEYS), f"{record.name}'s runs would merge with others'"


@pytest.mark.parametrize("name", sorted(catalog.DATASETS))
def test_every_dataset_record_resolves_to_its_functions(name):
    from bench.recipe import DataSpec

    record = catalog.DATASETS[name]
    assert record.name == name and record.layout in typing.get_args(typing.get_type_hints(catalog.Dataset)["layout"])
    assert len(inspect.signature(record.load("root")).parameters) == 1  # it takes the recipe's data.<reads>
    if record.virtual:  # its layout without files has the shape of the dataset its section describes
        section = DataSpec.model_fields[record.reads].default
        layout = record.load("virtual")(section)
        assert len(layout.train) == section.classes * section.train_per_class == len(layout.train.labels)


@pytest.mark.parametrize("name", sorted(catalog.CONVERTERS))
def test_every_converter_record_resolves_and_declares_its_function_s_arguments(name):
    from bench.recipe import DataSpec

    record = catalog.CONVERTERS[name]
    signature = inspect.signature(record.load()).parameters
    assert [a.keyword for a in record.arguments] == list(signature)[: len(record.arguments)]
    assert all(p.default is not p.empty for p in list(signature.values())[len(record.arguments) :])
    for argument in record.arguments:
        assert argument.help, f"bench data {name} --help: {argument.flag} has no description"
        default = signature[argument.keyword].default
        assert argument.required or argument.default == (None if default is inspect.Parameter.empty else default)
        assert (
            argument.choices is None
            or argument.default is None
            or argument.default in catalog.resolve(argument.choices)
        )
    assert catalog.DATASETS[record.writes].user_path  # a recipe reads what it writes from its data.path
    if record.generates:  # the same images as the generated dataset's recipe section, with the same defaults
        section = DataSpec.model_fields[catalog.DATASETS[record.generates].reads].default.model_dump()
        assert {a.keyword: a.default for a in record.arguments if a.keyword in section} == {
            k: v for k, v in section.items() if k in signature
        }


def test_every_dataset_writer_has_a_converter_record_and_bench_data_offers_each():
    from bench.cli import parser

    writers = {f"bench.data.{p.stem}" for p in (ROOT / "data").glob("*.py") if "write_atomically(" in p.read_text()}
    assert writers == {r.target.partition(":")[0] for r in catalog.CONVERTERS.values()}
    data = next(a for a in parser()._subparsers._group_actions[0].choices["data"]._actions if a.dest == "data_command")
    assert list(data.choices) == [*catalog.CONVERTERS, "check"]


def test_every_table_record_resolves_and_the_cli_offers_each():
    from bench.analysis import commands

    for record in catalog.TABLES.values():
        assert callable(record.load())
    assert commands.TABLE_NAMES == tuple(catalog.TABLES)


def test_every_table_s_needs_names_a_paper_setting_record():
    needed = {record.needs for record in catalog.TABLES.values() if record.needs is not None}
    assert needed <= set(catalog.PAPER_SETTINGS)
    for name, setting in catalog.PAPER_SETTINGS.items():
        assert setting.name == name
        assert setting.tables == tuple(t for t, record in catalog.TABLES.items() if record.needs == name)
    assert needed, "no table needs a paper setting: the check below would hold nothing to account"


FILE_LOADERS = tuple(name for name, record in catalog.LOADERS.items() if record.reads_files)
IMAGE_DATASETS = tuple(name for name, record in catalog.DATASETS.items() if record.user_path)


def paper_runs(setting):
    """(resolved recipe, meta.json) pairs that are `setting`: each model pattern, real-image dataset and file loader,
    and the least and the most training images it allows."""
    least = math.ceil(setting.min_train_share * setting.train_size)
    for pattern, dataset, loader, train in itertools.product(
        setting.models, IMAGE_DATASETS, FILE_LOADERS, sorted({least, setting.train_size})
    ):
        model = pattern.replace("*", "_any").replace("?", "x")
        data = {"dataset": dataset, "loader": loader, "image_size": setting.image_size or 32}
        recipe = {"model": {"name": model}, "data": data, "target_top1": setting.target}
        yield recipe, {"train_size": train, "val_size": setting.val_size, "loader": loader}


def off_by_one_criterion(setting, recipe, meta):
    """(criterion, recipe, meta): the run changed in that criterion alone."""
    least = math.ceil(setting.min_train_share * setting.train_size)

    def changed(data=None, model=None, **facts):
        model = recipe["model"] if model is None else model
        return {**recipe, "data": {**recipe["data"], **(data or {})}, "model": model}, {**meta, **facts}

    for dataset, record in catalog.DATASETS.items():
        if not record.user_path:
            yield f"dataset {dataset}", *changed(data={"dataset": dataset})
    for loader, record in catalog.LOADERS.items():
        if not record.reads_files:
            yield f"loader {loader}", *changed(data={"loader": loader}, loader=loader)
    yield "model", *changed(model={"name": "x" + recipe["model"]["name"]})
    yield "no model name", *changed(model={})
    if setting.image_size is not None:
        yield "image size", *changed(data={"image_size": setting.image_size // 2})
    yield "more validation images", *changed(val_size=setting.val_size + 1)
    yield "fewer validation images", *changed(val_size=setting.val_size - 1)
    yield "more training images", *changed(train_size=setting.train_size + 1)
    yield "fewer training images", *changed(train_size=least - 1)
    yield "no sizes recorded", *changed(train_size=None, val_size=None)


@pytest.mark.parametrize("name", sorted(catalog.PAPER_SETTINGS))
def test_every_paper_setting_is_recognised_from_a_run_that_is_it_and_from_none_that_differs(name):
    """Its record is the whole of a setting: a run that meets each criterion is it (and no other setting); a run
    that differs in any one criterion is not it; the criteria sentence names what the record requires."""
    from bench.analysis import paper

    setting = catalog.PAPER_SETTINGS[name]
    runs = list(paper_runs(setting))
    assert len(runs) >= len(IMAGE_DATASETS) * len(FILE_LOADERS)
    for recipe, meta in runs:
        assert paper.paper_setting(recipe, meta) == name, (recipe, meta)
        assert paper.setting_label(recipe, meta, name) == f"{setting.label}, target {setting.target:g}%"
        for criterion, other, other_meta in off_by_one_criterion(setting, recipe, meta):
            assert paper.paper_setting(other, other_meta) != name, criterion
    said = paper.criteria(setting)
    assert said.startswith(f"{setting.dataset} setting = ")
    assert all(pattern in said for pattern in setting.models)
    assert f"{setting.train_size:,}" in said and f"{setting.val_size:,}" in said
    assert setting.image_size is None or f"image_size {setting.image_size}" in said


def test_every_record_is_written_by_keyword():
    """A record reads without counting arguments: each field named (name="lars", target=..., marker=...), as timm
    writes its OptimInfo records."""
    import ast
    import dataclasses

    kinds = {name for name, obj in vars(catalog).items() if dataclasses.is_dataclass(obj) and isinstance(obj, type)}
    calls = [
        node
        for node in ast.walk(ast.parse((ROOT / "catalog.py").read_text()))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in kinds
    ]
    assert len(calls) > len(catalog.OPTIMIZERS) + len(catalog.TABLES)  # the records were found
    assert [f"{c.func.id} at line {c.lineno}" for c in calls if c.args] == []


def test_the_analysis_reads_facts_not_names():
    """No optimizer family, baseline order, loader or dataset name is guessed in bench/analysis/ (the paper's own
    methods, LARS and VRGD-LARS, are the tables' subject and stay named)."""
    guesses = (
        '"simigrad_',
        '"adascale_',
        'startswith("vrgd',
        '("lars", "sgd")',
        '("sgd", "lars")',
        '"random"',
        '"dali"',
        '"torchvision"',
        'dataset == "',
        '("folder", "filelist")',
    )
    for path in sorted((ROOT / "analysis").glob("*.py")):
        source = path.read_text()
        for guess in guesses:
            assert guess not in source, f"{path.name} guesses a fact the catalog declares: {guess}"


def test_the_catalog_and_bench_validate_schema_only_load_without_torch(tmp_path):
    """`bench validate --schema-only` checks a recipe's schema and the catalog's names without torch (plain
    validate builds the model on the meta device, as bench run does, so it imports torch and timm)."""
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "model: {name: resnet18}\nglobal_batch: 64\noptimizer: {name: vrgd_lars, lr: 0.1, gamma: 0.1}\n"
        "epochs: 1\ntarget_top1: 50\n"
    )
    code = (
        "import sys\nfrom bench import catalog\nfrom bench.cli import main\n"
        f"assert main(['validate', {str(recipe)!r}, '--schema-only']) == 0\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'timm', 'nvidia')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().endswith("[]")


def test_the_old_adascale_option_name_gain_warns_and_means_gain_scope():
    from torch import nn

    from bench import optim
    from bench.recipe import OptimizerSpec

    with pytest.warns(FutureWarning, match="optimizer option 'gain' is deprecated, use 'gain_scope'"):
        spec = OptimizerSpec(name="adascale_sgd", lr=0.1, gain="per_group")
    assert spec.hparams == {"gain_scope": "per_group"}
    with pytest.warns(FutureWarning, match="'gain' is deprecated"):
        assert optim.create(nn.Linear(3, 2), "adascale_sgd", lr=0.1, gain="per_group").per_group


@pytest.mark.parametrize("name", sorted(catalog.TABLES))
def test_every_table_record_builds_and_renders(tmp_path, name):
    """Each table (a future one too) builds from a study holding a sweep's trials and reruns (compare: runs made by
    hand) and renders in every format: its behaviour tests are its own (tests/test_analysis.py, tests/test_sweep.py),
    this is the floor."""
    from bench.analysis import results, tables
    from bench.analysis.render import FORMATS, render
    from tests.helpers import make_run, sweep_run

    for arm in ("lars", "vrgd_lars"):
        if name in ("compare", "schedules"):  # tables of runs made by bench run (compare refuses a sweep's)
            for seed in (1, 2, 3):
                make_run(tmp_path, f"{arm}-seed{seed}", arm, 100, seed, [50, 58 + seed, 60 + seed + (arm == "lars")])
            continue
        sweep_run(tmp_path, arm, 100, "trial", 0, [50, 55, 61])
        for seed in (1, 2, 3):
            sweep_run(tmp_path, arm, 100, "rerun", seed, [50, 58 + seed, 60 + seed + (arm == "lars")])
    table = tables.build(name, results.load_study([tmp_path]))
    assert table.columns and all(render(table, fmt) for fmt in FORMATS)
