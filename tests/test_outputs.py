"""Outputs that other tools read as they expect (issue 39, sections 5 and 6): a csv is a plain table read_csv loads
with its defaults, unfinished numbers say so, the verdict's messages say what is missing, and the small things."""

import io
import math

import pandas as pd
import pytest

from bench.analysis import results, tables
from bench.analysis.render import Cell, Table, claim, claims_of, render, side_notes
from bench.cli import main
from tests.helpers import make_run


def compare_tree(root):
    """LARS and VRGD-LARS at one batch, two seeds each, with finals that average to long floats."""
    for seed, (lars, vrgd) in enumerate(((50.1, 60.7), (70.3, 80.9))):
        make_run(root, "lars", "lars", 100, seed, [40.0, lars])
        make_run(root, "vrgd", "vrgd_lars", 100, seed, [45.0, vrgd])


# ---- csv ------------------------------------------------------------------------------------------------------


def test_compare_csv_is_a_plain_table_with_rounded_numbers(tmp_path, capsys):
    """`bench table compare --format csv`: read_csv with its defaults loads it (no '#' lines), its numbers are
    printed at their stated precision (two decimals for a percentage), and the title and notes go to stderr."""
    compare_tree(tmp_path)
    assert main(["table", "compare", str(tmp_path), "--format", "csv"]) == 0
    out, err = capsys.readouterr()
    assert not any(line.startswith("#") for line in out.splitlines())
    frame = pd.read_csv(io.StringIO(out))
    assert list(frame["optimizer"]) == ["LARS", "VRGD-LARS"]
    assert frame.loc[1, "val Top-1"] == pytest.approx(70.8) and frame.loc[1, "val Top-1 n"] == 2
    for line in out.splitlines()[1:]:  # no float printed past its precision (1.2000000000000028)
        for value in line.split(","):
            assert len(value.partition(".")[2]) <= 2, line
    assert "Optimizers compared at each global batch" in err and "baseline B = LARS" in err


def test_every_cell_kind_is_rounded_to_its_digits_in_csv():
    table = Table(
        "t",
        ["pct", "steps", "p", "plain"],
        [
            [
                Cell(1.2000000000000028, 0.30000000000000004, 2),
                Cell(12345.6, kind="steps"),
                Cell(0.012345, kind="p"),
                0.1,
            ]
        ],
    )
    table.rows.append([Cell(math.inf), Cell(None, kind="steps"), Cell(0.5, kind="p", ci=(0.25, 1 / 3)), "x"])
    text = render(table, "csv")
    assert text.splitlines()[1] == "1.20,0.30,2,12346,0.0123,,,0.1"
    assert text.splitlines()[2] == "inf,,,,0.5,0.25,0.333,x"
    frame = pd.read_csv(io.StringIO(text))
    assert math.isinf(frame.loc[1, "pct"]) and frame.loc[0, "steps"] == 12346


def test_a_tables_claims_are_sentences_from_its_numbers_that_markdown_ends_with_and_reads_back():
    """render.claim formats the interval as the cells do (∞ too); markdown ends with the claims, claims_of reads them
    back verbatim, and csv keeps them beside the table (notes_text, on stderr)."""
    said = claim("VRGD-LARS / LARS steps at 128", "no speedup resolved", (0.8354, 1.1979), "99.21%")
    assert said == "VRGD-LARS / LARS steps at 128: between 0.84x and 1.20x (99.21%); no speedup resolved."
    assert claim("X − Y at 64", "within noise", (-1.344, math.inf), "95%", "pct", " pp") == (
        "X − Y at 64: between -1.34 pp and ∞ pp (95%); within noise."
    )
    assert claim("X / Y at 1024", "no ratio (X missed 3/5)") == "X / Y at 1024: no ratio (X missed 3/5)."
    # a ratio's end at 0 or ∞ comes from the other side's misses: a bound, not a speedup of 0x
    assert (
        claim("X / Y at 2048", "X faster", (0.0, 0.7412), "99.21%")
        == "X / Y at 2048: at most 0.74x (99.21%); X faster."
    )
    assert claim("X / Y at 2048", "Y faster", (1.31, math.inf), "99.21%") == (
        "X / Y at 2048: at least 1.31x (99.21%); Y faster."
    )
    table = Table("t", ["a"], [[Cell(1.0)]], notes=["a note"], claims=[said, "Another: one."])
    assert claims_of(render(table)) == [said, "Another: one."] and claims_of(render(Table("t", ["a"]))) == []
    assert "between 0.84x and 1.20x (99.21\\%)" in side_notes([table], "latex")  # beside the LaTeX float
    from bench.analysis.render import notes_text

    assert notes_text(table).splitlines()[-2:] == [said, "Another: one."]


def test_report_csv_to_a_file_is_plain_and_its_notes_go_to_stderr(tmp_path, capsys):
    compare_tree(tmp_path / "runs")
    out = tmp_path / "report.csv"
    assert main(["report", str(tmp_path / "runs"), "--format", "csv", "--out", str(out)]) == 0
    frame = pd.read_csv(out)
    assert set(frame["optimizer"]) == {"lars", "vrgd_lars"}
    assert "Recipes (seeds aggregated)" in capsys.readouterr().err


def test_tables_written_beside_a_study_are_plain_csv(tmp_path):
    from bench.analysis import commands

    compare_tree(tmp_path)
    commands._write_tables(tmp_path, {"compare": tables.build("compare", results.load_study([tmp_path]))})
    assert len(pd.read_csv(tmp_path / "compare.csv")) == 2
    assert "baseline B = LARS" in (tmp_path / "compare.md").read_text()  # the notes: in the markdown beside it


# ---- the Python API -------------------------------------------------------------------------------------------


def test_api_curves_say_which_optimizer_batch_seed_and_recipe_made_them(tmp_path):
    from bench import api

    compare_tree(tmp_path)
    curves = api.curves(tmp_path)
    assert list(curves.columns[:5]) == ["run", "recipe", "optimizer", "global_batch", "seed"]
    assert len(curves) == 8 and "val_top1" in curves.columns
    final = curves.groupby(["optimizer", "seed"])["val_top1"].last()  # by optimizer, with no merge
    assert final[("vrgd_lars", 1)] == pytest.approx(80.9) and final[("lars", 0)] == pytest.approx(50.1)
    assert set(curves["global_batch"]) == {100} and set(curves["recipe"]) == {"lars", "vrgd"}


# ---- the verdict on runs made by hand --------------------------------------------------------------------------


def test_verdict_on_hand_runs_says_how_to_pair_them_and_that_way_works(tmp_path, capsys):
    """Seeds run by hand (no sweep): the error says how to get a paired verdict without a sweep, and doing what it
    says (the runs tagged role: rerun) gives one, paired by seed."""
    for seed, (lars, vrgd) in enumerate(((50.0, 52.0), (55.0, 56.5), (60.0, 63.0)), 1):
        make_run(tmp_path / "hand", "lars", "lars", 100, seed, [40.0, lars])
        make_run(tmp_path / "hand", "vrgd", "vrgd_lars", 100, seed, [40.0, vrgd])
        make_run(tmp_path / "tagged", "lars", "lars", 100, seed, [40.0, lars], tags={"role": "rerun"})
        make_run(tmp_path / "tagged", "vrgd", "vrgd_lars", 100, seed, [40.0, vrgd], tags={"role": "rerun"})
    assert main(["table", "verdict", str(tmp_path / "hand")]) == 2
    err = capsys.readouterr().err
    assert "--set tags.role=rerun" in err and "`bench table compare`" in err and "paired verdict" in err
    assert main(["table", "verdict", str(tmp_path / "tagged"), "--format", "csv"]) == 0
    row = pd.read_csv(io.StringIO(capsys.readouterr().out)).iloc[0]
    assert (row["X"], row["Y"], row["test"]) == ("VRGD-LARS", "LARS", "paired")  # the declared question, as asked
    assert row["Δ val Top-1 (X − Y)"] == pytest.approx(2.17, abs=0.01)


# ---- a running run in the report --------------------------------------------------------------------------------


@pytest.fixture
def running_tree(tmp_path):
    """A finished recipe and one whose run is still training (a live process holds its lock) at epoch 1 of 10."""
    import fcntl
    import json

    make_run(tmp_path, "done", "lars", 100, 0, [40.0, 61.0])
    run = make_run(tmp_path, "live", "vrgd_lars", 100, 0, [52.5], epochs=10, status="running")
    meta = json.loads((run / "meta.json").read_text())
    (run / "meta.json").write_text(json.dumps({**meta, "total_steps": 100}))
    with open(run / ".lock", "w") as lock:  # held as the training process holds it
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        yield tmp_path


@pytest.mark.parametrize("per_run", [False, True])
def test_report_marks_a_running_runs_numbers_as_not_final(running_tree, per_run, capsys):
    from bench.analysis import report

    runs = results.load([running_tree])
    assert set(runs["status"]) == {"completed", "running"}
    table = report.table(runs, per_run)
    rows = {r[0]: dict(zip(table.columns, r)) for r in table.rows}
    assert rows["live"]["val_top1"].text() == "52.50 (not final)" and rows["done"]["val_top1"].text() == "61.00"
    assert "not final" in rows["live"]["gap_top1"].text() and "not final" not in rows["live"]["epochs"].text()
    assert any("'not final'" in note for note in table.notes)
    assert main(["report", str(running_tree), "--format", "csv", *["--runs"] * per_run]) == 0
    frame = pd.read_csv(io.StringIO(capsys.readouterr().out)).set_index("recipe")
    assert frame.loc["live", "val_top1 note"] == "not final" and pd.isna(frame.loc["done", "val_top1 note"])
    assert frame.loc["live", "val_top1"] == 52.5  # the number stays, marked


# ---- the verdict on reruns without trials ------------------------------------------------------------------------


def test_verdict_on_reruns_without_trials_says_what_is_missing(tmp_path, capsys):
    """A tree of a sweep's reruns alone (their trials elsewhere), which held images out: no claim that selection
    used the validation set, and no '0 trials per cell'."""
    from tests.helpers import sweep_run

    for arm in ("lars", "nesterov"):
        for seed in (1, 2):
            sweep_run(tmp_path, arm, 128, "rerun", seed, [50, 60 + seed + (arm == "lars")])
    assert results.load([tmp_path])["holdout_top1"].notna().all()  # holdout_top1 logged: images were held out
    assert main(["table", "verdict", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "no images were held out" not in out and "Selection used the validation set" not in out
    assert "0 trials per cell" not in out
    assert "no trials in this tree, 2 seeds per rerun" in out and "No trials in this tree (reruns only)" in out


# ---- small things -------------------------------------------------------------------------------------------------


def test_the_fused_kernel_message_says_it_compiles_once_and_is_cached(tmp_path, monkeypatch, capsys):
    """No duration a loaded machine would contradict (30 s idle, 105 s under load): once, then from the cache."""
    import torch.utils.cpp_extension as cpp

    from bench.optim import fused

    monkeypatch.setattr(cpp, "_get_build_directory", lambda name, verbose: str(tmp_path))
    monkeypatch.setattr(cpp, "load", lambda *a, **k: "module")  # the compiler is not run here
    assert fused._build.__wrapped__() == ("module", None)
    err = capsys.readouterr().err
    assert "once" in err and "cache" in err and str(tmp_path) in err
    assert "about" not in err and " s;" not in err


def test_setup_s_prebuild_says_in_one_line_whether_the_kernels_are_ready(monkeypatch, capsys):
    from bench.optim import fused

    monkeypatch.setattr(fused, "_build", lambda: (None, "CalledProcessError: no compiler"))
    fused.prebuild()
    out = capsys.readouterr().out
    assert (
        out == "setup.sh: VRGD's fused CPU kernels not built (CalledProcessError: no compiler): the eager code runs\n"
    )


TINY_RUN = """
model: {name: resnet20_cifar}
data: {dataset: folder, path: DATA, image_size: 16, augment: pad_crop, workers: 0, eval_batch: 64}
global_batch: 40
optimizer: {name: sgd, lr: 0.1, momentum: 0.9}
epochs: 2
target_top1: 40
"""  # 160 training images: 8 steps, evaluations after steps 4 and 8


def test_a_batch_beyond_the_training_set_says_what_the_run_trains_on(tiny_dataset, tmp_path):
    """160 training images at batch 200 for 1 epoch: one whole step, 200 images; the plan line says so, and a
    warning that each step reads some images twice (it said "1 steps = 1 epoch of 160 images" and no more)."""
    from tests.conftest import cli

    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(
        TINY_RUN.replace("DATA", str(tiny_dataset))
        .replace("global_batch: 40", "global_batch: 200")
        .replace("epochs: 2", "epochs: 1")
    )
    done = cli("run", str(recipe), "--out", str(tmp_path / "out"), show_warnings=True)
    assert done.returncode == 0, done.stderr
    assert "1 step = 1 epoch of 160 images (200 images, 1.25 epochs: steps are whole)" in done.stdout
    assert "global_batch 200 is larger than the training set (160 images)" in done.stderr


@pytest.mark.slow
def test_a_run_whose_reader_left_still_completes(tiny_dataset, tmp_path):
    """`bench run ... 2>&1 | head -1`: the reader goes away after the first line; the run goes on, ends completed
    (not 'failed BrokenPipeError') and exits 0."""
    import json
    import subprocess
    import sys

    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(TINY_RUN.replace("DATA", str(tiny_dataset)))
    child = subprocess.Popen(
        [sys.executable, "-m", "bench", "run", str(recipe), "--out", str(tmp_path / "out")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    child.stdout.readline()
    child.stdout.close()  # as head does after its lines
    assert child.wait(timeout=600) == 0
    [meta] = (tmp_path / "out").rglob("meta.json")
    assert json.loads(meta.read_text())["status"] == "completed"


def test_output_to_a_closed_pipe_goes_nowhere_instead_of_failing():
    import os

    from bench.commands import _Unbroken

    read, write = os.pipe()
    os.close(read)
    stream = _Unbroken(io.TextIOWrapper(io.FileIO(write, "w"), line_buffering=True))
    assert stream.write("epoch 1.00  step 4\n") == len("epoch 1.00  step 4\n")  # EPIPE: swallowed
    stream.write("epoch 2.00  step 8\n")
    stream.flush()
    stream.close()


@pytest.mark.parametrize("columns", [80, 120, 250])
def test_recipe_keys_fit_the_terminal_and_name_has_its_default(columns, monkeypatch, capsys):
    from bench import recipe

    monkeypatch.setenv("COLUMNS", str(columns))
    assert main(["recipe", "keys"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) <= columns
    rows = {line.split()[0]: line for line in lines if line and not line.startswith(" ")}
    assert {key for key, *_ in recipe.keys()} <= set(rows)
    assert "the file's name" in rows["name"] and "required" not in rows["name"]  # load() fills it in
    assert "required" in rows["epochs"]


@pytest.mark.parametrize("name", ["compare", "verdict", "vrgd-imagenet"])
def test_each_table_has_its_own_help(name, capsys):
    from bench import catalog

    with pytest.raises(SystemExit) as done:
        main(["table", name, "--help"])
    assert done.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"usage: bench table {name}" in out
    assert "".join(catalog.TABLES[name].help.split()) in "".join(out.split())  # argparse wraps at hyphens too
    assert ("--batch B" in out) == (name == "compare")  # the options it takes, not every table's
    assert ("--baseline ARM" in out) == catalog.TABLES[name].sweep


def test_run_of_a_folder_points_to_suite(tmp_path, capsys):
    (tmp_path / "recipes").mkdir()
    assert main(["run", str(tmp_path / "recipes")]) == 2
    err = capsys.readouterr().err
    assert "a folder, not a recipe file" in err and f"`bench suite {tmp_path / 'recipes'}`" in err


@pytest.mark.parametrize(
    "typo, said",
    [
        (("trials: 2", "trails: 2"), "unknown key 'trails' (did you mean 'trials'?)"),
        (("batches: [32]", "bathces: [32]"), "unknown key 'bathces' (did you mean 'batches'?)"),
        (("budget: {epochs: 2}", "budget: {epoch: 2}"), "unknown key 'budget.epoch' (did you mean 'epochs'?)"),
        (("reruns: {seeds: [1, 2]}", "reruns: {seed: [1, 2]}"), "unknown key 'reruns.seed' (did you mean 'seeds'?)"),
        (
            ("    space:\n      optimizer.lr: {low: 0.01", "    spaces:\n      optimizer.lr: {low: 0.01"),
            "unknown key 'arms.sgd.spaces' (did you mean 'space'?)",
        ),
        (("{low: 0.01, high: 0.5, scale: log}", "{low: 0.01, hihg: 0.5, scale: log}"), "(did you mean 'high'?)"),
    ],
)
def test_sweep_keys_get_did_you_mean_as_recipe_keys_do(tmp_path, typo, said):
    from bench import sweep
    from bench.errors import UserError
    from tests.helpers import SWEEP

    (tmp_path / "base.yaml").write_text("name: b\n")
    path = tmp_path / "s.yaml"
    path.write_text(SWEEP.replace(*typo, 1))
    with pytest.raises(UserError) as e:
        sweep.load(path)
    assert said in str(e.value)


STRICT = """
model: {name: resnet10t}
global_batch: 32
optimizer: {name: sgd, lr: 1e-3}
epochs: EPOCHS
target_top1: 30
"""


@pytest.mark.parametrize(
    "epochs, flip, said",
    [
        ('"2"', "true", "key 'epochs': input should be a valid number (got '2', text: write it without quotes)"),
        ("2", '"no"', "key 'data.random_flip': input should be a valid boolean (got 'no', text: write it without"),
        ("2.5", "yes", None),  # YAML's own booleans and an integer or float where a float goes are fine
        # a word is no quoted number: no hint to drop quotes the user never wrote
        ("two", "true", "key 'epochs': input should be a valid number (got 'two')\n"),
        ("2", "maybe", "key 'data.random_flip': input should be a valid boolean (got 'maybe')\n"),
    ],
)
def test_a_quoted_number_or_boolean_is_refused_not_converted(tmp_path, epochs, flip, said):
    from bench import recipe
    from bench.errors import UserError

    path = tmp_path / "r.yaml"
    path.write_text(STRICT.replace("EPOCHS", epochs) + f"data: {{random_flip: {flip}}}\n")
    if said is None:
        r = recipe.load(path, models=False)
        assert r.epochs == 2.5 and r.data.random_flip is True
        return
    with pytest.raises(UserError) as e:
        recipe.load(path, models=False)
    assert said in str(e.value) + "\n"


def test_a_learning_rate_in_scientific_notation_is_a_number(tmp_path):
    """1e-3 (as timm's configs write it) is a float in the file and in --set, though PyYAML alone reads it as text."""
    from bench import recipe

    path = tmp_path / "r.yaml"
    path.write_text(STRICT.replace("EPOCHS", "2"))
    assert recipe.load(path, models=False).optimizer.lr == 0.001
    assert recipe.load(path, ["optimizer.lr=5E-2", "weight_decay=5e-5"], models=False).weight_decay == 5e-5


def test_steps_to_target_with_no_run_at_the_target_says_so_on_the_panel(tmp_path):
    from bench.analysis import plots, style

    make_run(tmp_path, "lars-100", "lars", 100, 0, [40, 50])  # target 60: never reached
    make_run(tmp_path, "lars-400", "lars", 400, 0, [30, 45])
    study = results.load_study([tmp_path])
    groups, order = plots.series(study, study.runs["setting"].iloc[0])
    with style.plt.rc_context(style.STYLE):
        fig = plots.plot_steps_to_target(groups, order, "t", "")
    ax = fig.axes[0]
    [note] = [t for t in ax.texts if t.get_gid() == "no-run-reached"]
    assert note.get_text() == "no run reached 60% val Top-1"
    assert ax.get_yscale() == "linear" and not len(ax.get_yticks())  # no empty log axis to read
    plots.plt.close(fig)
    data = pd.DataFrame(
        {
            "line": ["a", "a", "b"],
            "global_batch": [100, 400, 100],
            "steps_to_target": [math.inf] * 3,
            "steps_to_target_std": [math.nan] * 3,
            "target_top1": [60.0] * 3,
            "problem_label": ["toy"] * 3,
        }
    )
    with style.plt.rc_context(style.STYLE):
        fig = plots.plot_by_model(data)
    assert [t.get_text() for t in fig.axes[0].texts if t.get_gid() == "no-run-reached"] == [
        "no run reached 60% val Top-1"
    ]
    plots.plt.close(fig)


def test_a_missing_relative_data_path_names_the_directory_it_was_resolved_against(tmp_path, monkeypatch, capsys):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(STRICT.replace("EPOCHS", "2") + "data: {dataset: folder, path: data/mnist}\n")
    monkeypatch.chdir(tmp_path)
    assert main(["validate", str(recipe)]) == 2
    err = capsys.readouterr().err
    assert "data/mnist: dataset directory does not exist" in err
    assert f"resolved against the working directory, {tmp_path}" in err
    recipe.write_text(STRICT.replace("EPOCHS", "2") + f"data: {{dataset: folder, path: {tmp_path / 'none'}}}\n")
    assert main(["validate", str(recipe)]) == 2
    assert "working directory" not in capsys.readouterr().err  # an absolute path is where it says
