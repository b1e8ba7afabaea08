"""The verdict's words (bench/analysis/pairs.py, verdict.py) on hand-made sweep trees: no winner past what the seeds allow,
why a side has no reruns, the primary family a sweep file declares (or --baseline sets), and no Python warning on
the way."""

import json
import math
import shutil

import pytest

from bench import sweep
from bench.analysis import across, cells, pairs, power, results, scaling, tables, tuning, verdict
from bench.analysis.render import render, side_notes
from tests.conftest import cli, write_recipe
from tests.helpers import BASE, LAYOUTS, compile_latex, make_run, needs_pdflatex


def run(root, arm, batch, role, seed, val, trial=0, status="completed", select="top1"):
    """A trial or rerun of sweep 's' (one evaluation an epoch of 1,000 images, target 60%)."""
    tags = {"sweep": "s", "arm": arm, "trial": trial, "study": 0, "role": role, "select": select}
    name = f"s-{arm}-b{batch}-" + (f"t{trial:02d}" if role == "trial" else f"best-seed{seed}")
    return make_run(root, name, arm, batch, seed, val, status=status, tags=tags)


def hit(evaluation: int, final: float = 61.0) -> list[float]:
    """A curve that first reaches the target at `evaluation` (1-based) and stops there."""
    return [50.0] * (evaluation - 1) + [final]


def speed_tree(root):
    """A steps-to-target sweep of Lion and NAdamW. Batch 100: 2 vs 2 reruns, every Lion rerun slower than every
    NAdamW one; batch 200: 5 vs 5, the same; batch 400: Lion's two trials both missed the target and are not rerun
    yet, NAdamW's both diverged (no point to rerun)."""
    steps = "steps_to_target"
    for batch, lion, nadamw in ((100, [4, 5], [1, 2]), (200, [4, 4, 5, 4, 5], [1, 1, 2, 1, 1])):
        for arm, hits in (("lion", lion), ("nadamw", nadamw)):
            run(root, arm, batch, "trial", 0, hit(hits[0]), select=steps)
            for seed, evaluation in enumerate(hits, 1):
                run(root, arm, batch, "rerun", seed, hit(evaluation), select=steps)
    for trial in (0, 1):
        run(root, "lion", 400, "trial", 0, [50, 55 - trial], trial=trial, select=steps)
        run(root, "nadamw", 400, "trial", 0, [30, 10], trial=trial, status="diverged", select=steps)


def verdict_rows(root, baseline=None):
    table = verdict.verdict(results.load_study([root]), baseline)
    return {(r[0], r[1], r[2]): dict(zip(table.columns, r)) for r in table.rows}, table


def test_a_speed_verdict_past_what_the_seeds_allow_is_too_few_seeds_with_the_numbers(tmp_path):
    """2 vs 2 reruns reach at most 66.67% (the smallest to the largest ratio), short of the family's 97.5% (two
    batches tested): no winner, but how far they reach and how many would; 5 vs 5 reach it and name one."""
    speed_tree(tmp_path)
    rows, table = verdict_rows(tmp_path)
    short, enough = rows[(100, "Lion", "NAdamW")], rows[(200, "Lion", "NAdamW")]
    assert short["verdict"] == "speed: too few seeds for 97.5%: 2 vs 2 reach at most 66.67%; 5 vs 5 reach 98.41%"
    assert enough["verdict"].startswith("speed: NAdamW faster (98.41% interval [")
    assert table.claims[0] == (
        "Lion / NAdamW steps to target at batch 100: between 2.00x and 5.00x (66.67%); too few seeds for 97.5%: "
        "2 vs 2 reach at most 66.67%; 5 vs 5 reach 98.41%."
    )
    assert rows[(400, "Lion", "NAdamW")]["verdict"] == (
        "speed: no reruns: Lion not yet rerun; every trial of NAdamW diverged"
    )


def test_the_headers_say_what_each_cell_ran_and_wait_only_for_reruns_a_sweep_can_still_run(tmp_path):
    """Every table's title states the trials and seeds most cells ran, then each other cell's: a cell whose sweep
    can still rerun it is waiting, one whose trials all diverged never will be (and the scaling table says which)."""
    speed_tree(tmp_path)
    study = results.load_study([tmp_path])
    assert cells.describe(cells.cells(study)).endswith(
        "1 trial per cell (batch 400: 2 trials), 2 seeds per rerun (batch 200: 5 seeds; Lion at 400: no reruns "
        "yet; NAdamW at 400: no reruns, every trial diverged)"
    )
    table = scaling.scaling(study)
    fits = {row[0]: row[11] for row in table.rows if row[1] == 100}
    assert fits == {"Lion": "waiting for reruns at 400", "NAdamW": "no reruns at 400 (every trial diverged)"}


@pytest.fixture
def top1_tree(tmp_path):
    """LARS and VRGD-LARS selected on Top-1. Batch 100: VRGD-LARS's reruns trained 1 of 3; batch 200: every
    VRGD-LARS trial diverged, so none was rerun."""
    for batch in (100, 200):
        run(tmp_path, "lars", batch, "trial", 0, [50, 70])
        for seed in (1, 2, 3):
            run(tmp_path, "lars", batch, "rerun", seed, [50, 70 + seed])
    run(tmp_path, "vrgd_lars", 100, "trial", 0, [50, 70])
    run(tmp_path, "vrgd_lars", 100, "rerun", 1, [50, 72])
    for seed in (2, 3):
        run(tmp_path, "vrgd_lars", 100, "rerun", seed, [30, 10], status="diverged")
    for trial in (0, 1):
        run(tmp_path, "vrgd_lars", 200, "trial", 0, [30, 10], trial=trial, status="diverged")
    return tmp_path


def test_a_top1_verdict_names_too_few_trained_reruns_and_a_cell_whose_trials_all_diverged(top1_tree):
    rows, _ = verdict_rows(top1_tree)
    assert rows[(100, "VRGD-LARS", "LARS")]["verdict"] == "too few seeds: 1 vs 3 trained, a test needs 2 a side"
    assert rows[(200, "VRGD-LARS", "LARS")]["verdict"] == "no reruns: every trial of VRGD-LARS diverged"


def test_a_finished_sweeps_tables_wait_for_nothing(tmp_path):
    """Once Lion's cell at 400 is rerun (its reruns missed the target, as its trials did), every cell that could be
    rerun was: no title or row waits, and NAdamW's ladder says why it has no fit."""
    speed_tree(tmp_path)
    for seed in (1, 2):
        run(tmp_path, "lion", 400, "rerun", seed, [50, 55], select="steps_to_target")
    study = results.load_study([tmp_path])
    assert cells.describe(cells.cells(study)).endswith(
        "1 trial per cell (batch 400: 2 trials), 2 seeds per rerun (batch 200: 5 seeds; NAdamW at 400: no reruns, "
        "every trial diverged)"
    )
    for table in (verdict.verdict(study), scaling.scaling(study), tuning.tuning(study)):
        shown = " ".join([table.title, *(" ".join(row) for row in table.text_rows())])
        assert "waiting" not in shown and "yet" not in shown, table.title
    fits = {row[0]: row[11] for row in scaling.scaling(study).rows if row[1] == 100}
    assert fits["NAdamW"] == "no reruns at 400 (every trial diverged)"


@needs_pdflatex
@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_a_latex_verdict_compiles_with_plain_pdflatex(top1_tree, layout):
    """The verdict's LaTeX float and its notes (±, Δ, α, ≥ and − as LaTeX commands) in a bare article, two columns
    or one at NeurIPS's 5.5 in: pdflatex, no package, no error, no missing glyph, nothing wider or taller than the
    page (compile_latex)."""
    table = verdict.verdict(results.load_study([top1_tree]))
    tex, notes = render(table, "latex"), side_notes([table], "latex")
    assert all(symbol in tex + notes for symbol in (r"$\pm$", r"$\Delta$", r"$\alpha$", r"$\geq$"))
    compile_latex(top1_tree / "tex", "verdict", layout, tex + notes)


def test_a_latex_speed_verdict_leaves_out_the_columns_it_does_not_fill(tmp_path):
    """A speed verdict fills no Top-1 column: LaTeX leaves each out (the same placeholder in every row) and names
    it in the notes, which go beside the table float (side_notes: stderr), whose caption is the title alone."""
    speed_tree(tmp_path)
    table = verdict.verdict(results.load_study([tmp_path]))
    tex, notes = render(table, "latex"), side_notes([table], "latex")
    head = next(line for line in tex.splitlines() if "& X & Y & family &" in line)
    assert head == r"batch & X & Y & family & \raggedright steps to target X / Y & \raggedright verdict \tabularnewline"
    assert "not compared (speed) &" not in tex and tex.isascii()
    assert r"\item Columns left out, 'not compared (speed)' in every row: val Top-1 X, val Top-1 Y." in notes
    caption = next(line for line in tex.splitlines() if line.startswith(r"\caption{"))
    assert r"\item" not in tex and "Holm" not in caption  # the notes go beside the float (stderr), not in it


SWEEP = """
name: s
base: base.yaml
batches: [100, 200]
arms:
  lars: {set: {optimizer.name: lars}, space: {optimizer.lr: {low: 0.1, high: 1.0, scale: log}}}
  vrgd_lars: {set: {optimizer.name: vrgd_lars}, space: {optimizer.lr: {low: 0.1, high: 1.0, scale: log}}}
  nesterov: {set: {optimizer.name: nesterov}, space: {optimizer.lr: {low: 0.01, high: 0.1, scale: log}}}
trials: 2
budget: {epochs: 2}
reruns: {seeds: [1, 2, 3]}
"""


def three_arms(root, primary: str | None):
    """Reruns of three arms at batches 100 and 200, and the sweep as run (bench sweep's <results>/s.sweep.yaml)
    declaring `primary` (None: no key, as a tree made before it)."""
    root.mkdir(exist_ok=True)
    write_recipe(root / "base.yaml", BASE.replace("DATA", str(root)))
    path = write_recipe(root / "s.yaml", SWEEP + (f"primary: {primary}\n" if primary else ""))
    sweep.write_space(sweep.load(path), root)
    for batch in (100, 200):
        for arm, finals in (("lars", [70, 71, 72.5]), ("vrgd_lars", [69, 71.5, 71]), ("nesterov", [66, 68, 67.5])):
            for seed, final in enumerate(finals, 1):
                run(root, arm, batch, "rerun", seed, [50, final + batch / 100])


def families(root, baseline=None) -> dict:
    rows, table = verdict_rows(root, baseline)
    return {key: row["family"] for key, row in rows.items() if key[0] == 100}, table


def test_a_declared_control_batch_is_named_kept_in_its_family_and_left_out_of_the_average(tmp_path):
    """`primary: {reference: lars, control: [100]}` (the gap study's small batch, where the paper expects no
    difference): its comparisons are tested and Holm-corrected with the family as declared, read 'primary
    (control)' in the table and '(control)' in the claims, and the exploratory average over the batches leaves
    them out (one batch left: no average). Without the key, the average is over both batches."""
    three_arms(tmp_path, "{reference: lars, control: [100]}")
    rows, table = verdict_rows(tmp_path)
    assert rows[(100, "VRGD-LARS", "LARS")]["family"] == "primary (control)"
    assert rows[(200, "VRGD-LARS", "LARS")]["family"] == "primary"
    secondary = [v["family"] for k, v in rows.items() if k[0] == 100 and "LARS" not in k[1:]]
    assert secondary == ["secondary"]  # VRGD-LARS against Nesterov SGD: not a declared pair
    assert not [key for key in rows if key[0] == "all (pooled)"]
    assert any(c.startswith("VRGD-LARS − LARS val Top-1 at batch 100 (control): ") for c in table.claims)
    assert any(c.startswith("VRGD-LARS − LARS val Top-1 at batch 200: ") for c in table.claims)
    assert "'primary (control)' at the batches the sweep declares a control" in " ".join(table.notes)
    study = results.load_study([tmp_path])
    control = [p for p in pairs.pairs_of(study, cells.cells(study)) if p.control]
    assert {(p.batch, p.x) for p in control} == {(100, "vrgd_lars"), (100, "nesterov")}
    assert {p.alpha for p in control} == {0.05 / 2}  # corrected over both batches, as declared

    plain = tmp_path / "plain"
    three_arms(plain, "{reference: lars}")
    rows, table = verdict_rows(plain)
    assert rows[("all (pooled)", "VRGD-LARS", "LARS")]["family"] == "exploratory"
    assert "(control)" not in " ".join(table.notes + table.claims)


def test_the_primary_family_is_the_sweep_files_or_the_baselines_and_its_mde_follows(tmp_path):
    three_arms(tmp_path, "{reference: nesterov}")
    study = results.load_study([tmp_path])
    assert pairs.declared_reference(study) == "nesterov"
    found, table = families(tmp_path)
    assert found == {
        (100, "LARS", "VRGD-LARS"): "secondary",
        (100, "LARS", "Nesterov SGD"): "primary",
        (100, "VRGD-LARS", "Nesterov SGD"): "primary",
    }
    assert "; primary: each arm against Nesterov SGD (" in table.title
    assert "'primary' = each arm against Nesterov SGD at each batch (declared by the sweep file's `primary`)" in (
        " ".join(table.notes)
    )
    found = pairs.pairs_of(study, cells.cells(study))
    primary = [p for p in found if p.family == "primary"]
    # each primary pair its own family over the 2 batches (a declared question each); the secondary one family
    assert {p.alpha for p in primary} == {0.05 / 2} and {p.alpha for p in found if p.family == "secondary"} == {0.025}
    rows, _ = verdict_rows(tmp_path)
    mde = rows[(100, "LARS", "Nesterov SGD")]["MDE 80% at α/m [95%]"].value
    assert mde == pytest.approx(power.comparison_mde(primary[0].c, 0.05 / 2))
    # --baseline overrides the declaration: every arm against it, one family
    found, table = families(tmp_path, baseline="lars")
    assert found == {(100, "VRGD-LARS", "LARS"): "primary", (100, "Nesterov SGD", "LARS"): "primary"}
    assert "(set by --baseline)" in " ".join(table.notes)


def test_declared_pairs_read_as_asked_and_a_tree_without_the_key_keeps_the_default(tmp_path):
    three_arms(tmp_path / "pairs", "{pairs: [[lars, vrgd_lars]]}")
    assert pairs.declared_reference(results.load_study([tmp_path / "pairs"])) is None
    found, _ = families(tmp_path / "pairs")
    assert found[(100, "LARS", "VRGD-LARS")] == "primary" and list(found.values()).count("primary") == 1
    three_arms(tmp_path / "none", None)
    assert pairs.declared_reference(results.load_study([tmp_path / "none"])) is None
    found, table = families(tmp_path / "none")
    assert found[(100, "VRGD-LARS", "LARS")] == "primary" and list(found.values()).count("primary") == 1
    assert "(the default question; a sweep file's `primary` declares another)" in " ".join(table.notes)


def test_the_sweep_tables_warn_nothing(tmp_path):
    """A cell whose trials all missed the target once warned from numpy (∞ − ∞) in every table; a warning that
    leaks is an error here (cli's strict)."""
    speed_tree(tmp_path)
    for table in ("verdict", "scaling", "tuning", "plan"):
        done = cli("table", table, str(tmp_path), strict=True)
        assert done.returncode == 0 and not done.stderr, (table, done.stderr)


def gap_tree(root):
    """A Top-1 sweep of LARS and VRGD-LARS at batches 100 and 400, 5 reruns a cell: LARS's gap falls from about 8
    to about 1 point and its val Top-1 by about 4; VRGD-LARS's gap and val Top-1 stay within their seeds' noise."""
    finals = {
        ("lars", 100): ([90.0, 90.2, 89.8, 90.1, 89.9], [98.0, 98.3, 97.9, 98.1, 98.2]),
        ("lars", 400): ([86.0, 86.3, 85.8, 86.1, 85.9], [87.0, 87.5, 87.0, 87.2, 86.8]),
        ("vrgd_lars", 100): ([90.1, 89.7, 90.3, 89.9, 90.0], [97.0, 98.5, 97.2, 98.9, 97.4]),
        ("vrgd_lars", 400): ([89.8, 90.4, 89.6, 90.2, 90.1], [98.1, 97.0, 98.4, 97.3, 98.0]),
    }
    for (arm, batch), (val, train) in finals.items():
        tags = {"sweep": "s", "arm": arm, "trial": 0, "study": 0, "role": "trial", "select": "top1"}
        make_run(root, f"s-{arm}-b{batch}-t00", arm, batch, 0, [50, val[0]], [55, train[0]], tags=tags)
        for seed, (v, t) in enumerate(zip(val, train), 1):
            tags = {**tags, "role": "rerun"}
            make_run(root, f"s-{arm}-b{batch}-best-seed{seed}", arm, batch, seed, [50, v], [55, t], tags=tags)


def test_each_arm_across_batches_against_its_smallest_batch(tmp_path):
    """bench table batches: each cell's val Top-1 and gap with a 95% t interval, and each arm at 400 against
    itself at 100 (Welch, Holm over the table's tests of one metric): LARS's gap and val Top-1 smaller at 400,
    VRGD-LARS within noise with the difference it could detect; the claims in words; a steps sweep points to the
    scaling table instead."""
    gap_tree(tmp_path)
    table = tables.build("batches", results.load_study([tmp_path]))
    rows = {
        (r[0], r[1]): dict(zip(table.columns, (c.text() if hasattr(c, "text") else c for c in r))) for r in table.rows
    }
    lars = rows[("LARS", 400)]
    assert rows[("LARS", 100)]["Δ gap [95%]"] == "reference (100)" and rows[("LARS", 100)]["verdict"] == "the reference"
    assert rows[("LARS", 100)]["gap [95%]"].startswith("8.10 [") and rows[("LARS", 100)]["gap [95%]"].endswith("(n=5)")
    assert rows[("LARS", 100)]["train-eval Top-1 [95%]"].startswith("98.10 [")  # how well the budget fitted
    assert rows[("LARS", 400)]["train-eval Top-1 [95%]"].startswith("87.10 [")
    assert lars["verdict"] == "gap smaller at 400; val Top-1 lower at 400"
    assert lars["Δ gap [95%]"] == "-7.02 [-7.20, -6.84]"
    vrgd = rows[("VRGD-LARS", 400)]["verdict"]
    assert vrgd.startswith("gap within noise (could detect ≥ ") and "; val Top-1 within noise" in vrgd
    welch = power.compare([1.0, 1.2, 1.2, 1.1, 0.9], [8.0, 8.1, 8.1, 8.0, 8.3])
    low, high = welch.low, welch.high
    # LARS at 100: does a gap exist? The seeds' spread and the two 300-image sets' binomial error (98.1%, 90.0%)
    sets = 1e4 * (0.981 * 0.019 + 0.9 * 0.1) / 300
    _, gap_low, gap_high = power.mean_interval([8.0, 8.1, 8.1, 8.0, 8.3], shared_var=sets)
    assert gap_high - gap_low > 2 * 1.96 * math.sqrt(sets)  # wider than the sets' error alone, let alone the seeds'
    assert table.claims[0] == (
        f"LARS gap at batch 100: between {gap_low:.2f} pp and {gap_high:.2f} pp (95%: seeds and image sampling, "
        "uncorrected); a gap (train-eval Top-1 above val)."
    )
    assert (
        table.claims[2]
        == f"LARS gap at batch 400 − at 100: between {low:.2f} pp and {high:.2f} pp (95%, uncorrected); gap smaller at 400."
    )
    assert len(table.claims) == 4 + 4 and all("Holm" in n for n in table.notes[2:3])  # a gap a cell, 2 tests a row
    speed_tree(tmp_path / "speed")
    steps = tables.build("batches", results.load_study([tmp_path / "speed"]))
    assert not steps.rows and steps.notes == [across.STEPS_SWEEP]


def test_a_cell_whose_runs_lack_their_image_set_sizes_is_not_judged(tmp_path):
    """A run's meta without its sets' sizes (no val_size, no evaluated_images): the sets' error is unknown, so the
    cell's gap is not judged, in words, rather than a claim of nan."""
    gap_tree(tmp_path)
    for meta in tmp_path.glob("s-lars-b100-*/*/meta.json"):
        record = json.loads(meta.read_text())
        for size in ("evaluated_images", "val_size", "train_eval_size"):
            record.pop(size, None)
        meta.write_text(json.dumps(record))
    claims = tables.build("batches", results.load_study([tmp_path])).claims
    assert claims[0] == "LARS gap at batch 100: not judged (its runs do not record the image sets' sizes)."
    assert claims[1].startswith("LARS gap at batch 400: between ") and all("nan" not in c for c in claims)


def test_a_within_noise_claim_whose_uncorrected_interval_excludes_0_says_so():
    """A claim prints the uncorrected 95% interval beside a word judged on Holm's p: where the interval excludes 0
    and Holm's p resolves nothing, the sentence says the interval excludes 0 only uncorrected, with Holm's p; an
    interval holding 0, or a resolved difference, is left as it is."""
    apart = power.compare([1.0, 1.3, 1.1, 1.4, 1.2], [0.0, 0.1, 0.0, 0.2, 0.1], seeds_x=range(5), seeds_y=range(5))
    straddles = power.compare([1.0, -1.3, 1.1, -1.4, 1.2], [0.0, 0.1, 0.0, 0.2, 0.1])
    assert apart.low > 0 and straddles.low < 0 < straddles.high
    word = "within noise (could detect ≥ 1.0 pp)"
    ends = f"between {apart.low:.2f} pp and {apart.high:.2f} pp (95%, uncorrected)"
    said = pairs.difference_claim("x − y", word, apart, 0.0649)
    assert said == f"x − y: {ends}; {word}; the interval excludes 0 only uncorrected (p Holm 0.0649)."
    assert pairs.difference_claim("x − y", "x better", apart, 0.01) == f"x − y: {ends}; x better."
    assert pairs.difference_claim("x − y", word, straddles, 0.9).endswith(f"; {word}.")


def test_a_cells_gap_in_words_follows_its_interval():
    words = [across._gap_exists_word(*ends) for ends in ((0.1, 2.0), (-2.0, -0.1), (-0.5, 0.5), (0.0, 1.0))]
    assert words == ["a gap (train-eval Top-1 above val)", "val Top-1 above train-eval", *["no gap resolved"] * 2]


def test_across_batches_says_why_a_cell_has_no_test(tmp_path):
    """A gap no rerun has (no train-eval) is neither a number nor a test; equal values on both sides are no spread
    to test, not too few seeds."""
    nan = float("nan")
    for batch, val, train in ((100, [90.0, 90.0, 90.0], [95.0] * 3), (400, [90.0, 90.0, 90.0], [nan] * 3)):
        tags = {"sweep": "s", "arm": "lars", "trial": 0, "study": 0, "role": "trial", "select": "top1"}
        make_run(tmp_path, f"s-lars-b{batch}-t00", "lars", batch, 0, [50, val[0]], [55, train[0]], tags=tags)
        for seed, (v, t) in enumerate(zip(val, train), 1):
            make_run(
                tmp_path,
                f"s-lars-b{batch}-best-seed{seed}",
                "lars",
                batch,
                seed,
                [50, v],
                [55, t],
                tags={**tags, "role": "rerun"},
            )
    table = tables.build("batches", results.load_study([tmp_path]))
    row = dict(zip(table.columns, table.rows[1]))
    assert row["gap [95%]"].text() == "no rerun has one" and row["Δ gap [95%]"].empty
    assert row["verdict"] == "gap: too few seeds (0 vs 3, a test needs 2 a side); val Top-1: no spread to test"
    assert all("nan" not in claim for claim in table.claims)
    # no spread between the seeds: the image sets' error alone, a normal interval (95%, 90% on 300 images each)
    half = 1.959964 * math.sqrt(1e4 * (0.95 * 0.05 + 0.9 * 0.1) / 300)
    assert table.claims[0] == (
        f"LARS gap at batch 100: between {5 - half:.2f} pp and {5 + half:.2f} pp (95%: seeds and image sampling, "
        "uncorrected); a gap (train-eval Top-1 above val)."
    )


def test_across_batches_of_a_one_batch_sweep_says_there_is_nothing_to_compare(tmp_path):
    gap_tree(tmp_path)
    for run in tmp_path.glob("s-*-b400-*"):
        shutil.rmtree(run)
    table = tables.build("batches", results.load_study([tmp_path]))
    assert [row[-1] for row in table.rows] == ["the reference"] * 2
    assert [c.split(":")[0] for c in table.claims] == ["LARS gap at batch 100", "VRGD-LARS gap at batch 100"]
    assert table.notes[0].startswith("One batch per arm: nothing to compare across batches")


FIELD_BATCHES = (64, 128, 256, 512, 1024, 2048)
FIELD_ARMS = ("lars", "vrgd_lars", "nesterov", "nadamw")
FIELD_SWEEP = (
    f"""
name: s
base: base.yaml
batches: {list(FIELD_BATCHES)}
arms:
"""
    + "".join(
        f"  {arm}: {{set: {{optimizer.name: {arm}}}, space: {{optimizer.lr: {{low: 0.1, high: 1.0, scale: log}}}}}}\n"
        for arm in FIELD_ARMS
    )
    + """trials: 5
budget: {epochs: 20}
select: {split: validation, metric: steps_to_target}
reruns: {seeds: [1, 2, 3, 4, 5]}
primary: {reference: lars}
"""
)
# the evaluation (an epoch each) at which each seed's rerun first reaches the target: VRGD-LARS's every rerun
# slower than LARS's every rerun at every batch (complete separation: the 5 vs 5 interval's most extreme level)
FIELD_HITS = {
    "lars": [4, 4, 5, 4, 4],
    "vrgd_lars": [7, 7, 8, 7, 7],
    "nesterov": [5, 6, 5, 6, 5],
    "nadamw": [3, 4, 3, 3, 4],
}


def field_shaped(root):
    root.mkdir(exist_ok=True)
    write_recipe(root / "base.yaml", BASE.replace("DATA", str(root)))
    sweep.write_space(sweep.load(write_recipe(root / "s.yaml", FIELD_SWEEP)), root)
    tags = {"sweep": "s", "trial": 0, "study": 0, "role": "rerun", "select": "steps_to_target"}
    for batch in FIELD_BATCHES:
        for arm, hits in FIELD_HITS.items():
            for seed, hit in enumerate(hits, 1):
                val = [50.0] * (hit - 1) + [61.0]
                name = f"s-{arm}-b{batch}-best-seed{seed}"
                make_run(root, name, arm, batch, seed, val, train_size=64_000, tags={**tags, "arm": arm})
    return results.load_study([root])


def test_each_primary_pair_is_a_family_of_its_own_over_its_batches(tmp_path):
    """The field study's shape (recipes/sweeps/field-ladder.yaml, question 3): 4 arms, 6 batches, 5 reruns a side,
    `primary: {reference: lars}`. VRGD-LARS against LARS is judged at Bonferroni over its 6 batches, as declared,
    not over the 18 primary comparisons pooled (1 - 0.05/18 = 99.72%, past the 99.21% 5 vs 5 reruns reach at
    most: the declared question could never have had an answer)."""
    study = field_shaped(tmp_path)
    tested = [p for p in pairs.pairs_of(study, cells.cells(study)) if (p.x, p.y) == ("vrgd_lars", "lars")]
    assert len(tested) == 6 and all(p.family == "primary" and p.speed for p in tested)
    table = verdict.verdict(study)
    words = {r[0]: r[-1] for r in table.rows if (r[1], r[2]) == ("VRGD-LARS", "LARS")}
    assert all(p.alpha == pytest.approx(0.05 / 6) for p in tested), words
    assert all(w.startswith("speed: LARS faster (99.21% interval [") for w in words.values()), words
    plan = verdict.plan(study)  # a speed sweep: nothing to plan seeds for on Top-1, and the table says why
    assert not plan.rows and plan.notes[0].startswith("This sweep selected on steps to the target")
    assert "(one image budget)" not in table.title  # 20 epochs everywhere: one budget, said once
    by_batch = cells.cells(study)
    by_batch["planned_epochs"] = by_batch["global_batch"] / 64  # 1-32 epochs: more images at the larger batches
    by_batch["planned_images"] = by_batch["planned_epochs"] * 64_000
    assert ", 1-32 epochs (by batch) per run," in cells.describe(by_batch)
    by_batch["planned_images"] = 64_000.0  # epochs differ, images not: a training set of another size per cell
    assert ", 1-32 epochs (one image budget) per run," in cells.describe(by_batch)


def test_the_gap_is_tested_as_val_top1_is_in_its_own_holm_family(tmp_path):
    """The gap study's question 2 (recipes/sweeps/gap.yaml): VRGD-LARS against LARS in val Top-1 and in the
    generalization gap, paired by seed, Holm over the family's batches for each metric on its own, the MDE at that
    level; a verdict word and a claim for the gap."""
    root = tmp_path
    root.mkdir(exist_ok=True)
    write_recipe(root / "base.yaml", BASE.replace("DATA", str(root)))
    sweep.write_space(
        sweep.load(write_recipe(root / "s.yaml", SWEEP + "primary: {pairs: [[vrgd_lars, lars]]}\n")), root
    )
    tags = {"sweep": "s", "trial": 0, "study": 0, "role": "rerun", "select": "top1"}
    # val Top-1 alike at both batches; the train-eval Top-1 3 points lower for VRGD-LARS at 200, alike at 100
    for batch, lower in ((100, 0.0), (200, 3.0)):
        for arm in ("lars", "vrgd_lars", "nesterov"):
            for seed in (1, 2, 3, 4, 5):
                val = 70 + 0.3 * seed
                train = 80 + 0.2 * seed + (0.1 * (-1) ** seed) - (lower if arm == "vrgd_lars" else 0.0)
                name = f"s-{arm}-b{batch}-best-seed{seed}"
                make_run(root, name, arm, batch, seed, [50, val], [55, train], tags={**tags, "arm": arm})
    study = results.load_study([root])
    [small, large] = [p for p in pairs.pairs_of(study, cells.cells(study)) if p.family == "primary"]
    assert small.gap_alpha == large.gap_alpha == pytest.approx(0.05 / 2)
    assert large.gap.diff == pytest.approx(-3.0) and large.gap_p_holm < 0.05 and not small.gap_p_holm < 0.05
    assert pairs.gap_word(large) == "VRGD-LARS smaller gap"
    assert pairs.gap_word(small).startswith("within noise (could detect ≥ ")
    table = verdict.verdict(study)
    claims = [c for c in table.claims if "generalization gap" in c]
    assert any(c.startswith("VRGD-LARS − LARS generalization gap at batch 200: between -3") for c in claims)
    assert any(c.endswith("; VRGD-LARS smaller gap.") for c in claims)
    assert "p Holm (gap)" in table.columns and "gap verdict" in table.columns
