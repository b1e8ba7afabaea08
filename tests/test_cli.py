"""The command line: every subcommand answers bad arguments in one sentence with exit 2, and says its version;
the documents it points a user to are in the repository."""

import ast
import io
import re
import subprocess
import tokenize
from importlib import metadata
from pathlib import Path

import pytest

from bench import catalog
from bench.cli import main
from bench.data import resolve_loader
from bench.rundir import versions
from tests.conftest import RECIPES, cli


@pytest.mark.parametrize(
    "args",
    [
        ["frobnicate"],
        ["run"],
        ["run", "r.yaml", "--nproc", "0"],
        ["run", "r.yaml", "--bogus"],
        ["validate"],
        ["suite"],
        ["sweep"],
        ["submit", "r.yaml"],
        ["submit", "r.yaml", "--nodes", "two", "--gpus-per-node", "1"],
        ["submit", "r.yaml", "--nodes", "1", "--gpus-per-node", "1", "--partition", "gpu\nrm -rf x"],  # a script line
        ["submit", "r.yaml", "--nodes", "1", "--gpus-per-node", "1", "--sbatch", "--mail-type=END\nx"],
        ["report", ".", "--out", "."],  # a folder where a file is written
        ["report", ".", "--out", "no/such/folder.md"],
        ["report", "--format", "pdf"],
        ["table"],
        ["table", "no-such-table", "."],
        ["plot", "--bogus"],
        ["run", "r.yaml", "--set", "optimizer.lr", "0.1"],  # a space for the '=': said as --set's, not "0.1"
        ["data"],
        ["data", "synth"],
        ["data", "synth", "--out", "x", "--classes", "zero"],
        ["data", "check"],
        ["data", "check", "x", "--workers", "-2"],
        ["perf"],
        ["perf", "nope"],
        ["perf", "memory", "--bogus"],
        ["perf", "memory", "--micro-batch", "0"],
        ["perf", "memory", "--small", "1000", "--micro-batch", "256"],
        ["perf", "memory", "--model", "typo"],
        ["perf", "optim", "--model", "typo"],
        ["perf", "optim", "--groups", "1"],
        ["perf", "optim", "--repeats", "x"],
        ["perf", "data"],
        ["perf", "data", "--root", "x", "--batch", "0"],
        ["perf", "sweep", "--trials", "1"],
        ["perf", "sweep", "--recipe", "nowhere.yaml"],
        ["perf", "train", "--steps", "0"],
        ["perf", "train", "nowhere.yaml"],
        ["perf", "train", "--model", "typo"],
    ],
    ids=lambda args: " ".join(args),
)
def test_every_subcommand_answers_bad_arguments_in_one_sentence(args, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(args) == 2
    out, err = capsys.readouterr()
    assert err.startswith("bench: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and "usage:" not in err
    assert "--set" not in args or "argument --set: 'optimizer.lr': expected KEY.PATH=VALUE" in err
    assert list(tmp_path.iterdir()) == []  # nothing written


@pytest.mark.parametrize(
    "args",
    [["plot", ".", "--out", "f"], ["export", "tensorboard", ".", "--out", "f/x"], ["run", "r.yaml", "--out", "f"]],
)
def test_a_file_where_a_folder_is_written_is_one_sentence(args, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "f").write_text("kept")
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("bench: error: ") and err.count("\n") == 1 and "a folder to write into is expected" in err, (
        err
    )
    assert [p.name for p in tmp_path.iterdir()] == ["f"] and (tmp_path / "f").read_text() == "kept"


def test_version_names_bench_and_what_it_runs_on(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["--version"])
    assert exit.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    found = versions()
    assert lines[0] == f"bench {found['bench']}"
    for name in ("python", "torch", "torchvision", "timm"):
        assert f"{name} {found[name]}" in lines
    for name in catalog.LIBRARIES:  # every package a library optimizer's record names (schedulefree, ...)
        assert f"{name} {metadata.version(name)}" in lines


def _flat(d: dict, prefix: str = "") -> set[str]:
    """The dotted keys of a dumped recipe, sections included; free-form dicts are one key."""
    out = set()
    for key, value in d.items():
        out.add(prefix + key)
        if isinstance(value, dict) and key not in ("kwargs", "tags"):
            out |= _flat(value, f"{prefix}{key}.")
    return out


def test_recipe_keys_lists_every_schema_key_with_a_meaning(capsys, monkeypatch):
    from bench.recipe import Recipe

    full = Recipe.model_validate(
        {
            "name": "x",
            "model": {"name": "resnet50"},
            "global_batch": 64,
            "epochs": 1,
            "target_top1": 50,
            "optimizer": {"name": "simigrad_sgd", "lr": 0.1},
            "adaptive_batch": {"target_similarity": 0.5, "min_batch": 32, "max_batch": 128},
            "logging": {"wandb": {"project": "p"}},  # the optional sections set, so their keys appear
        }
    ).model_dump(mode="json")
    monkeypatch.setenv("COLUMNS", "250")  # wide enough for a meaning column (a narrow terminal: under the key)
    assert main(["recipe", "keys"]) == 0
    header, *lines = capsys.readouterr().out.splitlines()
    schema = lines[: lines.index("")]  # then the optimizers' own keys
    meanings, key = {}, None
    for line in schema:  # a key's row, then the lines its wrapped cells continue on (starting with spaces)
        key = line.split()[0] if not line.startswith(" ") else key
        meanings[key] = (meanings.get(key, "") + " " + line[header.index("meaning") :].strip()).strip()
    assert set(meanings) == _flat(full)
    assert all(meanings.values()), [key for key, meaning in meanings.items() if not meaning]
    listed = re.sub(r"\n {6}", " ", "\n".join(lines[lines.index("") :])).splitlines()  # wrapped lines joined
    optimizers = {line.split()[0]: line for line in listed if line.startswith("  ")}
    assert list(optimizers) == list(catalog.OPTIMIZERS)  # each once, with its source and its options by name
    assert optimizers["vrgd_lars"].startswith("  vrgd_lars [bench]: momentum, eta,")
    assert optimizers["vrgd_lars"].endswith("trust_grad; plumbing: fused")
    assert optimizers["nesterov"] == (
        "  nesterov [torch.optim:SGD]: momentum, dampening, nesterov; plumbing: maximize, foreach, differentiable, fused"
    )
    assert optimizers["vrgd_muon"].startswith("  vrgd_muon [bench over timm.optim:Muon]: momentum, nesterov,")
    assert optimizers["muon"].endswith("; plumbing: capturable, verbose")  # its own keys first, the plumbing apart


def test_recipe_keys_of_one_optimizer_give_its_source_and_defaults_with_the_plumbing_apart(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    assert main(["recipe", "keys", "--optimizer", "muon"]) == 0
    head, title, own, plumbing = re.sub(r"\n {6}", " ", capsys.readouterr().out).splitlines()
    assert head.startswith("muon [timm.optim:Muon, timm>=1.0.31]: Muon; Jordan et al. 2024")
    assert "weight_decay is a top-level key" in title
    assert own.startswith("    momentum (0.95), nesterov (False), ns_steps (5),") and "capturable" not in own
    assert plumbing == "    plumbing (how a step is computed, not what): capturable (False), verbose (False)"
    assert main(["recipe", "keys", "--optimizer", "vrgd_lars"]) == 0
    said = capsys.readouterr().out
    assert said.startswith("vrgd_lars [bench]: VRGD-LARS\n") and "gamma (0.1)" in said and "fused (None)" in said
    assert main(["recipe", "keys", "--optimizer", "muonn"]) == 2
    assert "unknown value 'muonn' for --optimizer (did you mean 'muon'?)" in capsys.readouterr().err


# Cited on purpose though absent: the untracked module that shadows a tracked one, which the dirty-tree check finds
HYPOTHETICAL = {"bench/optim/lars/__init__.py"}
CITED_PATH = re.compile(r"(?<![\w./-])((?:bench|docs|recipes|tests|tools)/[\w./-]*\w|[A-Z][A-Z_]*\.md)")


def _prose(source: str) -> list[str]:
    """A Python file's comments and docstrings (module, class, function): where it cites other files."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    comments = [token.string for token in tokens if token.type == tokenize.COMMENT]
    nodes = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    docstrings = [ast.get_docstring(n, clean=False) for n in ast.walk(ast.parse(source)) if isinstance(n, nodes)]
    return comments + [d for d in docstrings if d]


def test_every_cited_document_is_in_the_repository():
    """Docs, recipes and code cite files a user of this repository has: docs/algorithms.md, not a file outside it;
    every path a module, test or tool names in its comments and docstrings (docs/..., bench/..., tests/...,
    tools/..., recipes/..., README.md) is in the tree; and that page states every optimizer family bench
    registers."""
    root = Path(__file__).resolve().parents[1]
    listed = ["git", "ls-files", "--cached", "--others", "--exclude-standard"]  # the working tree's, new files too
    tracked = subprocess.run(listed, cwd=root, capture_output=True, text=True, check=True).stdout.split()
    texts = [p for p in tracked if p.endswith((".md", ".yaml", ".py", ".txt")) and (root / p).is_file()]
    outside = [p for p in texts if "../" + "shared" in (root / p).read_text(errors="replace")]
    assert outside == []
    cited = {m for p in texts for m in re.findall(r"\bdocs/[\w./-]+\.md", (root / p).read_text(errors="replace"))}
    assert "docs/algorithms.md" in cited and all((root / c).is_file() for c in cited), cited
    code = [p for p in texts if p.endswith(".py") and p.split("/")[0] in ("bench", "tests", "tools")]
    cited_by = {}  # a path -> the files citing it
    for p in code:
        for chunk in _prose((root / p).read_text()):
            for path in CITED_PATH.findall(chunk):
                cited_by.setdefault(path, set()).add(p)
    assert {"bench/rundir.py", "tests/helpers.py", "docs/extending.md", "README.md"} <= cited_by.keys()
    missing = {c: sorted(by) for c, by in cited_by.items() if not (root / c).exists() and c not in HYPOTHETICAL}
    assert missing == {}
    page = (root / "docs" / "algorithms.md").read_text()
    for family in ("LARS", "LARC", "LAMB", "VRGD", "AdaScale", "SimiGrad", "B_simple", "OPEN"):
        assert family in page


def test_the_conventions_page_lists_every_open_choice_of_the_algorithms_page():
    """docs/conventions.md names each row of docs/algorithms.md's OPEN table (its choice and its option)."""
    root = Path(__file__).resolve().parents[1]
    page = (root / "docs" / "algorithms.md").read_text()
    table = page[page.index("**OPEN** choices") :].split("\n\n")[1]
    rows = [line.split("|")[1:3] for line in table.splitlines()[2:]]
    conventions = " ".join((root / "docs" / "conventions.md").read_text().split())
    assert len(rows) >= 8 and any("gsnr_norm" in option for _, option in rows)  # the table was parsed
    for choice, option in rows:
        assert f"**{choice.strip()}**" in conventions, choice
        for name in re.findall(r"`(\w+)`", option)[:1]:
            assert f"`{name}`" in conventions, (choice, name)


def test_a_mistyped_command_or_choice_gets_a_suggestion_and_one_prefix(capsys):
    for args, said in (
        (["rnu"], "bench: error: unknown command 'rnu' (did you mean 'run'?) (see bench --help)\n"),
        (["data", "idxx"], "bench: error: bench data: unknown command 'idxx' (did you mean 'idx'?)"),
        (["perf", "trian"], "bench: error: bench perf: unknown command 'trian' (did you mean 'train'?)"),
        (["report", "--format", "parqet"], "unknown value 'parqet' for --format (did you mean 'parquet'?)"),
    ):
        assert main(args) == 2
        assert said in capsys.readouterr().err


def test_a_warning_is_one_line_of_bench_s_own(tmp_path):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "validate",
            "--schema-only",
            str(RECIPES / "demo-sgd.yaml"),
            "--set",
            "data.loader=synthetic",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 0
    assert done.stderr == (
        "bench: warning: key 'data.loader': 'synthetic' is deprecated, use 'random' (the same "
        "random tensors; the dataset 'synthetic' is generated images)\n"
    )


LIGHT = """
import sys
from bench.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
heavy = sorted({m.split(".")[0] for m in sys.modules} & {"torch", "timm", "nvidia", "torchvision", "pandas"})
print("HEAVY", heavy)
"""


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["report", "--columns"], ["recipe", "keys"]])
def test_help_version_column_definitions_and_recipe_keys_import_no_torch(args):
    """They answer in a second or two: torch, timm, DALI and pandas are imported only where a command needs them
    (`bench validate` needs timm: it checks the model name in timm's registry, as `bench run` does; `bench recipe
    keys --optimizer NAME` imports that optimizer, for its defaults)."""
    import sys

    done = subprocess.run([sys.executable, "-c", LIGHT, *args], capture_output=True, text=True)
    assert done.stdout.strip().splitlines()[-1] == "HEAVY []", done.stdout[-500:] + done.stderr[-500:]


def test_validate_warns_of_dead_parameters_and_upscaled_images(tmp_path):
    """The Fashion-MNIST study's first model on its 28 px images (bench data idx): --models prints the share of
    parameters no image reaches, and a warning; a recipe that upscales those images to 224 px gets one too."""
    from tests.helpers import family

    data = tmp_path / "fashion"
    assert main(["data", "idx", str(family(tmp_path / "idx")), "--out", str(data)]) == 0
    base = f"""
data: {{dataset: folder, path: {data}, image_size: 28, augment: pad_crop}}
global_batch: 64
micro_batch: 8
optimizer: {{name: lars, lr: 1.0}}
epochs: 1
target_top1: 80
"""
    small = tmp_path / "small.yaml"
    small.write_text(
        "model: {name: resnet18, kwargs: {layers: [1, 1, 1, 1], channels: [32, 64, 128, 256], stem_width: 32}}" + base
    )
    big = tmp_path / "big.yaml"
    big.write_text("model: {name: resnet20_cifar}" + base.replace("image_size: 28", "image_size: 224"))
    done = cli("validate", "--models", str(small), str(big), show_warnings=True)
    assert done.returncode == 0, done.stderr
    # 688,128 structural zeros (the padding-only taps); a coordinate or two of the unseeded model may also read
    # exactly zero by chance on the probe's images: the count is checked as at least the structural ones, few more
    counts = [int(c.replace(",", "")) for c in re.findall(r"\((688,\d{3}) of 1,248,906\)", done.stdout + done.stderr)]
    assert len(counts) == 2 and all(688_128 <= c <= 688_200 for c in counts), counts
    said = re.sub(r"\(688,\d{3} of", "(688,128 of", done.stdout + done.stderr)
    stdout, stderr = said[: len(done.stdout)], said[len(done.stdout) :]
    HERE = resolve_loader("auto")  # noqa: N806 - the loader a run would use here, as validate names it
    assert stdout.splitlines() == [
        f"{small}: ok (small: resnet18, lars, global_batch 64, loader {HERE} here, dead parameters 55.1% (688,128 of 1,248,906) at 28 px)",
        f"{big}: ok (big: resnet20_cifar, lars, global_batch 64, loader {HERE} here, dead parameters 0.0% (0 of 269,722) at 224 px)",
    ]
    first, second = stderr.splitlines()
    assert (
        first.startswith(
            f"bench: warning: {small}: 55% of resnet18's parameters (688,128 of 1,248,906) get "
            "exactly zero gradient at 28 px"
        )
        and "resnet20_cifar" in first
    )
    assert second.startswith(
        f"bench: warning: {big}: data.image_size 224 is 8x the dataset's own 28 px images ({data / 'train'}"
    )
    refused = cli("validate", "--models", str(small), "--set", "engine.dead_params=refuse", show_warnings=True)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.startswith(f"bench: error: {small}: key 'engine.dead_params' is refuse and 55% of ")
    assert refused.stderr.count("\n") == 1
