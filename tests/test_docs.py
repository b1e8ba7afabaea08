"""The README is the front door and docs/ the manual: every relative link in them resolves (to a file, and to a
heading where it names one), every `bench ...` line in the README's code blocks parses, and the README's own-data
block works on a small idx dataset up to `bench validate` (no training: that is test_own_data's and the
engine's)."""

import re
import shlex
from pathlib import Path

import pytest

from bench import cli, errors
from bench.cli import main
from bench.commands.perf import cmd_perf
from tests.helpers import family

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _links(text: str) -> list[str]:
    """The targets of markdown links and images outside code (fenced blocks, indented blocks, inline code)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    text = re.sub(r"^(?: {4}|\t).*$", "", text, flags=re.M)
    text = re.sub(r"`[^`\n]*`", "", text)
    return LINK.findall(text)


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S)
    found = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(slug)
    return found


def _readme_commands() -> list[str]:
    """The `bench ...` lines of README.md's code blocks (indented or fenced), comments cut, `&&` chains split."""
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.M | re.S)
    blocks += [
        "\n".join(line[4:] for line in group.splitlines())
        for group in re.findall(r"(?:^ {4}.*\n?)+", re.sub(r"^```.*?^```", "", text, flags=re.M | re.S), flags=re.M)
    ]
    commands = []
    for block in blocks:
        for line in block.splitlines():
            for part in line.split("&&"):
                words = shlex.split(part, comments=True)
                if words[:1] in (["bench"], [".venv/bin/bench"]):
                    commands.append(part.strip())
    return commands


def test_the_manual_pages_exist_and_each_says_what_it_is_for():
    names = {p.name for p in PAGES[1:]}
    assert {
        "getting-started.md",
        "own-data.md",
        "recipes.md",
        "studies.md",
        "cluster.md",
        "reliability.md",
        "performance.md",
        "extending.md",
        "conventions.md",
        "algorithms.md",
    } <= names
    for page in PAGES[1:]:
        title, blank, purpose = page.read_text().split("\n")[:3]
        assert title.startswith("# ") and blank == "" and purpose.startswith("This page"), page.name


def test_every_relative_link_of_the_readme_and_docs_resolves():
    broken = []
    checked = 0
    for page in PAGES:
        for target in _links(page.read_text()):
            if re.match(r"[a-z]+:", target):  # http(s), mailto
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            checked += 1
            if not file.is_file():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no file {file})")
            elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no heading #{anchor} in {file.name})")
    assert checked > 30  # the links were found
    assert broken == []


def test_the_readme_is_a_front_door():
    text = (ROOT / "README.md").read_text()
    assert len(text.encode()) <= 16_000
    assert "    ./setup.sh && .venv/bin/bench run recipes/demo.yaml\n" in text  # the two commands, as they were
    assert "    ./setup.sh && .venv/bin/python -m pytest\n" in text
    for page in PAGES[1:]:
        assert f"(docs/{page.name})" in text, f"README links no docs/{page.name}"


def test_the_readme_lists_each_optimizer_under_the_code_it_runs():
    """The README's optimizer list is bench/catalog.py's records, one line a source: bench's own, then each library's
    package (a record of bench's VRGD over a library's step: after that library's own), so the two cannot drift."""
    from bench import catalog

    sources = {}  # "bench" or a package -> (its records, bench's VRGD over its step)
    for name, record in catalog.OPTIMIZERS.items():
        own, over = sources.setdefault(record.distribution or "bench", ([], []))
        (over if record.source.startswith("bench over") else own).append(name)
    expected = [
        f"- {source}: {', '.join(own)}" + (f"; bench's VRGD over their step: {', '.join(over)}" if over else "")
        for source, (own, over) in sources.items()
    ]
    block = (ROOT / "README.md").read_text().split("<!-- optimizers: ")[1].split("<!-- /optimizers -->")[0]
    listed = re.sub(r"\n  ", " ", block).splitlines()[1:]  # a long line goes on, indented, on the next
    assert listed == expected


class _Parsed(Exception):
    """Raised by the parse of a `bench perf` benchmark instead of running it."""


def _parse_only(monkeypatch):
    for name in ("parse_args", "parse_known_args"):
        original = getattr(errors.ArgumentParser, name)

        def parse(self, *args, _original=original, **kwargs):
            _original(self, *args, **kwargs)  # a bad argument raises UserError here
            raise _Parsed

        monkeypatch.setattr(errors.ArgumentParser, name, parse)


@pytest.mark.parametrize("command", _readme_commands())
def test_every_bench_command_of_the_readme_parses(command, monkeypatch):
    words = shlex.split(command, comments=True)[1:]
    try:
        args, rest = cli.parser().parse_known_args(words)
    except SystemExit as e:  # --version and --help print and exit
        assert e.code == 0, command
        return
    if args.func is not cmd_perf:
        assert rest == [], f"{command}: unrecognized {rest}"
        return
    import importlib

    _parse_only(monkeypatch)  # the benchmark's own options, parsed by its main() and not run
    with pytest.raises(_Parsed):
        importlib.import_module(f"bench.perf.{args.benchmark}").main(rest)


def test_the_readme_shows_the_own_data_block():
    commands = _readme_commands()
    assert any(c.startswith("bench data idx ") and "--out data/mine" in c for c in commands)
    assert "bench data check data/mine" in commands
    runs = [c for c in commands if c.startswith("bench run recipes/own-data.yaml --set data.path=data/mine")]
    assert len(runs) == 2 and "--set optimizer.name=vrgd_lars" in runs[1]
    assert any(
        c.startswith(("bench table compare results/own-data", "bench report results/own-data")) for c in commands
    )


def test_the_own_data_block_converts_checks_and_validates(tmp_path, capsys, monkeypatch):
    """The README's block on an MNIST-like idx dataset: convert, check, validate the recipe for both optimizers;
    data.path is relative to the working directory, as docs/own-data.md says."""
    monkeypatch.chdir(tmp_path)
    family(tmp_path / "downloads", train_per_class=4, val_per_class=1, gz=True)
    assert main(["data", "idx", "downloads", "--out", "data/mine", "--per-class", "3"]) == 0
    assert "wrote 30 train and 10 val images in 10 classes" in capsys.readouterr().out
    assert main(["data", "check", "data/mine"]) == 0
    assert "10 classes" in capsys.readouterr().out
    recipe = str(ROOT / "recipes" / "own-data.yaml")
    for extra in ([], ["--set", "optimizer.name=vrgd_lars"]):
        assert main(["validate", recipe, "--set", "data.path=data/mine", *extra]) == 0
        said = capsys.readouterr().out
        assert "ok (own-data" in said and "resnet20_cifar" in said and "global_batch 256" in said
        assert "data.path" not in said  # checked, not skipped
    assert main(["validate", recipe, "--set", f"data.path={tmp_path / 'nowhere'}"]) == 2


def test_the_own_data_recipe_gives_vrgd_groups_and_one_batchnorm_batch():
    from bench import recipe
    from bench.engine.plan import recipe_plan

    lars, vrgd = (
        recipe.load(ROOT / "recipes" / "own-data.yaml", sets, models=False)
        for sets in ([], ["optimizer.name=vrgd_lars"])
    )
    assert (lars.model.name, lars.data.dataset, lars.data.image_size, lars.data.augment) == (
        "resnet20_cifar",
        "folder",
        28,
        "pad_crop",
    )
    assert str(lars.data.path) == "data/mine" and not lars.data.path.is_absolute()  # the working directory's
    assert (lars.optimizer.name, vrgd.optimizer.name) == ("lars", "vrgd_lars")
    assert lars.micro_batch == vrgd.micro_batch == 32  # a fixed BatchNorm batch, not auto's device-chosen one
    plan = recipe_plan(vrgd, 1)
    assert (plan.batch, plan.micro_batch, plan.accum_steps, plan.gsnr_groups) == (256, 32, 8, 8)
