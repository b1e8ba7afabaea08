"""The committed studies' headline tables, recomputed from their committed results trees (no training), so that a
changed analysis cannot silently change a number the README or docs/studies.md quotes: a change that moves one
fails here until the tables are regenerated (bench sweep ... --plots, or analysis.commands.regenerate_sweep) and
the diff is committed and explained."""

import functools
import hashlib
import re
import shutil
from pathlib import Path

import pytest

from bench.analysis import results, tables
from bench.analysis.render import claims_of
from tests.helpers import LAYOUTS, compile_latex

ROOT = Path(__file__).resolve().parents[1]
HEADLINES = ("scaling", "verdict", "matched", "batches")  # the tables the write-ups quote
HEADLINE_STUDIES = (
    "field",
    "field-ladder",
    "field-decay",
    "field-warmup",
    "field-speed",
    "ladder-speed",
    "ladder-quality",
    "fashion-mnist-superseded",
    "gap",
)
COMMITTED = sorted(
    path
    for study in HEADLINE_STUDIES
    for name in HEADLINES
    if (path := ROOT / "results" / study / f"{name}.md").exists()
) + [
    ROOT / "results" / "mlperf-scaling" / "mlperf-scaling.md",  # a published ladder through the fit (no runs)
    *sorted((ROOT / "results").glob("*/branching.md")),  # the critical batch along training
    ROOT / "results" / "batch-schedule" / "schedules.md",  # the schedule it implies, run against the others
]
LADDER_CHECKS = sorted((ROOT / "results").glob("*/ladder-check-*.md"))  # a branch tree's against results/<ladder>
SWAPS = sorted((ROOT / "results").glob("*/scaling-in-*.md"))  # a check's cells in place of results/<study>'s


def table_claims(markdown: str) -> list[str]:
    """A table's claims: its **Claims** section (verdict, matched) and its 'Claim:' notes (scaling)."""
    notes = [line.removeprefix("- Claim: ") for line in markdown.splitlines() if line.startswith("- Claim: ")]
    return claims_of(markdown) + notes


def rows(markdown: str) -> list[str]:
    """A rendered table's rows (its numbers) and its claims (the sentences made from them), without the title and
    the other notes (wording may be edited freely)."""
    return [line for line in markdown.splitlines() if line.startswith("|")] + table_claims(markdown)


CLAIM = re.compile(r"^(?:> |- )?(?P<sentence>.+?) <!-- claim: (?P<table>\S+) -->$")
WRITE_UPS = ("README.md", "docs/studies.md")


def misquoted_claims(text: str) -> list[str]:
    """The lines of a write-up that quote a table's claim (a line ending '<!-- claim: results/.../TABLE.md -->')
    whose sentence is not, verbatim, one of that committed table's claims."""
    wrong = []
    for line in text.splitlines():
        if (found := CLAIM.match(line)) and found["sentence"] not in table_claims((ROOT / found["table"]).read_text()):
            wrong.append(line)
    return wrong


@pytest.mark.parametrize("write_up", WRITE_UPS)
def test_the_write_ups_quote_the_tables_claims_verbatim(write_up):
    """Every sentence the README or docs/studies.md marks as a table's claim is that table's, word for word (the
    committed tables are recomputed from their trees below); editing one word of a quote fails here."""
    text = (ROOT / write_up).read_text()
    assert not misquoted_claims(text)
    quoted = [line for line in text.splitlines() if CLAIM.match(line)]
    if write_up == "README.md":
        assert len(quoted) >= 3  # the field study's critical-batch ratios to LARS
    for line in quoted:  # one word or one figure changed, or a word of strength added, is caught
        assert misquoted_claims(re.sub(r"\b[a-z]{4,}\b", "other", line, count=1))
        if re.search(r"\d", line):
            assert misquoted_claims(re.sub(r"\d", lambda d: str((int(d[0]) + 1) % 10), line, count=1))
        assert misquoted_claims(line.replace(": ", ": clearly ", 1))


def test_the_headline_studies_have_committed_tables():
    assert set(HEADLINE_STUDIES) <= {p.parent.name for p in COMMITTED}


def test_the_readmes_gap_figures_are_the_committed_tables():
    """The README's gap-study words are the committed tables' numbers: LARS's gap per batch, its train-eval Top-1
    and val Top-1 at 2,048 against 128, VRGD-LARS's gap and train-eval difference at 2,048; 'a gap exists at both
    batches' is every cell's claim, 'smaller at 2,048' each arm's Holm-resolved difference, and 'at neither batch'
    every verdict's Holm p at 0.05 or above (the tables themselves are recomputed from the tree above)."""
    import pandas as pd

    tree = ROOT / "results" / "gap"
    text = (ROOT / "README.md").read_text()
    text = " ".join(text[text.index("## The gap study") : text.index("## Earlier")].split())
    batches = pd.read_csv(tree / "batches.csv").set_index(["arm", "batch"])
    verdict = pd.read_csv(tree / "verdict.csv").set_index("batch")
    lars, lars0, vrgd = batches.loc[("LARS", 2048)], batches.loc[("LARS", 128)], batches.loc[("VRGD-LARS", 2048)]
    assert f"LARS: {lars0['gap [95%]']:.1f} pp at 128, {lars['gap [95%]']:.1f} at 2,048" in text
    te = "train-eval Top-1 [95%]"
    assert f"train-eval Top-1 {lars[te]:.1f}% against {lars0[te]:.1f}%" in text
    assert f"reaches {-lars['Δ val Top-1 [95%]']:.2f} pp less val Top-1" in text
    at = verdict.loc[2048]
    assert f"gap is {-at['Δ gap (X − Y)']:.2f} pp smaller," in text
    assert f"its train-eval Top-1 {lars[te] - vrgd[te]:.1f} pp lower" in text
    cells = [c for c in table_claims((tree / "batches.md").read_text()) if re.match(r"[\w-]+ gap at batch \d+:", c)]
    assert len(cells) == 4 and all(c.endswith("; a gap (train-eval Top-1 above val).") for c in cells)
    assert "smaller at 2,048, not larger" in text
    assert all(batches.loc[(arm, 2048), "verdict"].startswith("gap smaller at 2048") for arm in ("LARS", "VRGD-LARS"))
    assert "resolved from LARS at neither batch" in text
    assert (verdict[["p Holm", "p Holm (gap)"]] >= 0.05).all().all()


def page_tables(page: str, start: str = "", end: str = "") -> list[list[list[str]]]:
    """A write-up's tables (between the markers `start` and `end` when given), in order, as rows of stripped cells
    without the header and rule."""
    text = (ROOT / page).read_text()
    block = text[text.index(start) : text.index(end)] if start else text
    found, table = [], []
    for line in [*block.splitlines(), ""]:
        if line.startswith("|"):
            table.append([cell.strip() for cell in line.split("|")[1:-1]])
        elif table:
            found.append(table[2:])
            table = []
    return found


def test_the_ladder_speed_table_quotes_the_committed_tables():
    """Each steps figure and ratio interval of docs/studies.md's ladder table is in the committed tables (which the
    test below recomputes from the tree): an edited write-up cannot drift from the study's numbers."""
    scaling = (ROOT / "results" / "ladder-speed" / "scaling.md").read_text()
    verdict = (ROOT / "results" / "ladder-speed" / "verdict.md").read_text()
    table = page_tables("docs/studies.md", "<!-- ladder-results -->", "<!-- /ladder-results -->")[0]
    rows = [row for row in table if "]" in row[4]]
    assert len(rows) == 4  # the batches with a ratio: 64-512
    for batch, _, lars, vrgd, ratio, _ in rows:
        assert f"| {batch} " in scaling and lars in scaling and vrgd in scaling, (batch, lars, vrgd)
        assert f"99.21% interval {ratio.split(' ', 1)[1]}" in verdict, (batch, ratio)


FIELD_RATIO_WORDS = {  # the README's headline sentence, arm by arm, as the scaling claims' words
    "Muon": ": no difference resolved;",
    "SOAP": ": no difference resolved;",
    "NAdamW": ": depends on the curve (curve: smaller; bent curve: no difference resolved; model-free: no difference",
    "Nesterov SGD": ": depends on the curve (curve: smaller; bent curve: no difference resolved; model-free: no",
    "Schedule-Free AdamW": ": depends on the curve (curve: smaller; bent curve: smaller; model-free: no difference",
    "VRGD-LARS": ": depends on the curve (curve: no difference resolved; bent curve: no difference resolved; "
    "model-free: larger)",
}


def test_the_readmes_field_words_are_the_committed_tables():
    """The README's headline block on the field study says what its committed tables say (recomputed from the
    tree above): each arm's critical batch, each ratio's word, the warm-up check's rule, the speed verdicts, the
    rungs in the linear regime, the run count, and the figures it compares with the 4-arm answer."""
    import pandas as pd

    from bench import rundir

    tree = ROOT / "results" / "field"
    scaling_md = (tree / "scaling.md").read_text()
    claims = table_claims(scaling_md)
    text = (ROOT / "README.md").read_text()
    block = " ".join(text[text.index("<!-- field-status -->") : text.index("<!-- /field-status -->")].split())
    assert f"**Results ({len(rundir.find_runs([tree]))} runs," in block
    assert re.search(r"LARS's is (\d+ \[\d+, \d+\])", block)[1] in " ".join(c for c in claims if c.startswith("LARS: "))
    for arm, word in FIELD_RATIO_WORDS.items():
        (figure,) = re.findall(rf"(?<![\w-]){arm}'s \((\d+)\)", block)
        assert any(c.startswith(f"{arm}: critical batch {figure} [") for c in claims), arm
        (ratio,) = [c for c in claims if c.startswith(f"{arm} / LARS critical batch")]
        assert word in ratio, (arm, ratio)
    (swap,) = [
        c
        for c in table_claims((ROOT / "results" / "field-warmup" / "scaling-in-field.md").read_text())
        if c.startswith("The cells of")
    ]
    assert "changes neither checked word" in block and swap.endswith("the answer holds (no ratio word changes)")
    speed = [c for c in table_claims((tree / "verdict.md").read_text()) if c.startswith("VRGD-LARS / LARS steps")]
    assert len(speed) == 8 and all("too few seeds for 99.38%" in c or "unresolved" in c for c in speed)
    assert "5 cannot reach the 99.38% 8 batches ask" in block
    sixth = ROOT / "results" / "field-speed"  # question 3 again with a sixth seed a side, at the declared level
    speed = [c for c in table_claims((sixth / "verdict.md").read_text()) if c.startswith("VRGD-LARS / LARS steps")]
    resolved = [c for c in speed if "faster;" in c]
    assert len(speed) == 8 and all("(99.57%)" in c for c in speed)
    assert len(resolved) == 1 and resolved[0].startswith("VRGD-LARS / LARS steps to target at batch 16: ")
    assert "; LARS faster; rests on a near tie" in resolved[0]
    ratio = pd.read_csv(sixth / "verdict.csv").set_index("batch").loc[16, "steps to target X / Y"]  # the median
    low, high = re.search(r"between ([\d.]+)x and ([\d.]+)x \(99.57%\)", resolved[0]).groups()  # at the level
    said = f"LARS is faster at 16 (VRGD-LARS takes {ratio:.2f}x LARS's steps, [{low}, {high}] at 99.57%;"
    assert "(`field-speed.yaml`, declared first" in block and f"resolves one batch: {said} a near tie)" in block
    rungs = [int(n) for n in re.findall(r"batches seen in the linear regime: (\d+) \(", " ".join(claims))]
    assert len(rungs) == 7 and f"seen at {min(rungs)} to {max(rungs)} batches" in block
    old = (ROOT / "results" / "field-ladder" / "scaling.md").read_text()
    assert "LARS: critical batch 162 [" in " ".join(table_claims(old)) and "LARS's 162 is 103" in block
    rows_of = {md: [re.sub(r" +", " ", line) for line in md.splitlines()] for md in (old, scaling_md)}
    (then,) = [line for line in rows_of[old] if line.startswith("| LARS | 64 |")]  # B_noise: the arm's first row
    (now,) = [line for line in rows_of[scaling_md] if line.startswith("| LARS | 16 |")]
    assert "| 426 [" in then and "| 421 [" in now and "B_noise, 426 then, is 421" in block
    assert f"1.2 B0 term: {1.2 * 64:.0f} then, {1.2 * 16:.0f} now" in block  # the ladder's smallest rung, 64 then

    table = pd.read_csv(tree / "scaling.csv")
    ratios = table.loc[table["arm"].str.contains(" / "), "critical batch, model-free [95%]"]
    least = min(float(r) for r in ratios.str.extract(r"resolves ≥ ([\d.]+)x")[0])
    assert 4.5 <= least and "Model-free resolves only ratios of 4.5x or more" in block
    nadamw = [c for c in table_claims((tree / "verdict.md").read_text()) if c.startswith("NAdamW / LARS steps")]
    highs = [float(re.search(r"between [\d.]+x and ([\d.]+)x \(99.21%\)", c)[1]) for c in nadamw]
    assert len(highs) == 8 and max(highs) < 1 and "NAdamW takes fewer than LARS at every batch (99.21%" in block


def test_the_quality_table_quotes_the_committed_tables():
    """Every figure of docs/studies.md's question-3 table (the best trials' holdout Top-1, the reruns' Top-1, the
    difference, p Holm, the MDE, the runner-ups' reruns) is in its batch's rows of the committed verdict and
    tuning tables."""
    study = ROOT / "results" / "ladder-quality"
    lines = [line for name in ("verdict", "tuning") for line in (study / f"{name}.md").read_text().splitlines()]
    (table,) = [t for t in page_tables("docs/studies.md") if t and "[-1.34, 0.50]" in " ".join(t[0])]
    assert [row[0] for row in table] == ["64", "128", "256", "512", "1,024"]
    for batch, *cells in table:
        mine = [line for line in lines if line.startswith(f"| {batch.replace(',', '')} ")]
        for figure in (part for cell in cells for part in cell.split(" / ")):  # "LARS / VRGD-LARS" cells
            assert any(figure in line for line in mine), (batch, figure)


@pytest.fixture(scope="module")
def studies():
    return {}


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_a_committed_table_is_what_its_tree_gives(path, studies):
    from bench.analysis.render import render

    if path.parent not in studies:
        studies[path.parent] = results.load_study([path.parent]) if tables.TABLES[path.stem].runs else None
    table = tables.build(path.stem, studies[path.parent])
    fresh = rows(render(table, "markdown"))
    committed = rows(path.read_text())
    assert fresh and fresh == committed, f"{path} differs from what its results tree gives now"
    twin = path.with_suffix(".csv")  # the same table for read_csv: no stale twin beside a regenerated markdown
    assert not twin.exists() or twin.read_text() == render(table, "csv"), f"{twin} differs from what its tree gives"


@pytest.mark.parametrize("path", LADDER_CHECKS, ids=lambda p: p.parent.name)
def test_the_committed_ladder_check_is_what_its_two_trees_give(path):
    """bench table ladder-check results/<branch tree> results/<ladder>, written beside the branch tree as
    ladder-check-<ladder>.md (it reads the ladder's tree too)."""
    from bench.analysis.render import render

    ladder = ROOT / "results" / path.stem.removeprefix("ladder-check-")
    study = results.load_study([path.parent, ladder])
    fresh = rows(render(tables.build("ladder-check", study), "markdown"))
    assert fresh and fresh == rows(path.read_text()), f"{path} differs from what its trees give now"


@pytest.mark.parametrize("path", SWAPS, ids=lambda p: p.parent.name)
def test_the_committed_swap_is_what_its_two_trees_give(path, studies):
    """bench table scaling results/<study> --cells results/<check>, written beside the check's tree as
    scaling-in-<study>.md: its numbers and its claims, the rule's words among them."""
    from bench.analysis.render import render

    tree = ROOT / "results" / path.stem.removeprefix("scaling-in-")
    if tree not in studies:
        studies[tree] = results.load_study([tree])
    table = tables.build("scaling", studies[tree], None, None, results.load_study([path.parent]))
    fresh = rows(render(table, "markdown"))
    assert any(claim.startswith(f"The cells of {path.parent.name} (") for claim in table_claims(path.read_text()))
    assert fresh and fresh == rows(path.read_text()), f"{path} differs from what its trees give now"


TABLE_TREES = sorted({path.parent for path in (ROOT / "results").glob("*/*.md") if path.stem in tables.TABLES})


@pytest.mark.parametrize("tree", TABLE_TREES, ids=lambda p: p.name)
def test_a_committed_trees_tables_are_ascii_in_latex(tree, studies, tmp_path):
    """pdflatex takes no raw Unicode: the LaTeX of each table a committed tree holds (and of its report) spells
    every ±, Δ, α, ≥, −, ×, ², ∞ and — in ASCII; and each fits the page, its width and its height (wrapped, or
    split into column or row parts): pdflatex, where installed, sets their floats and notes with nothing too wide or
    tall."""
    from bench.analysis import report
    from bench.analysis.render import render, side_notes

    names = [path.stem for path in sorted(tree.glob("*.md")) if path.stem in tables.TABLES]
    if tree not in studies:
        studies[tree] = results.load_study([tree]) if any(tables.TABLES[n].runs for n in names) else None
    built = [tables.build(name, studies[tree]) for name in names]
    built += [report.table(studies[tree].runs)] if (tree / "report.md").exists() else []
    document = []
    for table in built:
        tex = render(table, "latex") + side_notes([table], "latex")
        assert tex.isascii(), (table.title, sorted({c for c in tex if not c.isascii()}))
        assert "wider than a page" not in tex, table.title
        document.append(tex + "\\clearpage\n")  # the floats and the notes, each table's set before the next's
    if shutil.which("pdflatex"):
        for name, layout in LAYOUTS.items():
            compile_latex(tmp_path, name.replace(" ", "-"), layout, "".join(document))


def test_every_committed_run_directory_reads_through_the_run_directory_reader():
    """The committed results trees (some written by older versions of bench) are what the reader reads: each run
    reads into its record (rundir.read_run), with a recipe and a meta.json in today's layout with a known status and
    its planned batch, and a finished run a metrics.csv with its evaluations."""
    from bench import rundir

    runs = rundir.find_runs([ROOT / "results"])
    assert len(runs) > 100
    for run in runs:
        record = rundir.read_run(run)
        meta, metrics = record.meta, record.metrics
        assert meta == rundir.read_meta(run) and meta.get("status") in rundir.STATUSES, run
        assert "global_batch" not in meta.get("plan", {}) and record.batch == record.recipe["global_batch"], run
        if meta["status"] in rundir.FINISHED:
            assert (run / rundir.METRICS).is_file(), run
            assert len(metrics) and list(metrics.columns)[: len(rundir.METRIC_COLUMNS)] == list(
                rundir.METRIC_COLUMNS
            ), run


# docs/results.md: a committed study's size budget. 75 kB a run: a tree of LARS and VRGD-LARS runs alone
# (results/field-speed's own) averages 66 kB, VRGD's GSNR diagnostics at batch 16 packing to 342 kB; 250 kB a tree:
# field-ladder's tables, 209 kB
RUN_BYTES, TREE_BYTES = 75_000, 250_000


TREES = sorted(p for p in (ROOT / "results").iterdir() if p.is_dir() and any(p.rglob("meta.json")))


@functools.cache
def digest(path: Path) -> str:
    return hashlib.sha1(path.read_bytes()).hexdigest()


@functools.cache
def trees_holding() -> dict[str, set[str]]:
    """Each committed file's content (its digest) -> the trees that hold it."""
    holding = {}
    for tree in TREES:
        for f in tree.rglob("*"):
            if f.is_file():
                holding.setdefault(digest(f), set()).add(tree.name)
    return holding


@pytest.mark.parametrize("tree", TREES, ids=lambda p: p.name)
def test_a_committed_tree_keeps_its_size_budget_and_packed_events(tree):
    """Every committed file counted once, in the first tree by name that holds it (git stores a copy once:
    results/field-speed starts as results/field's LARS and VRGD-LARS runs), against 75 kB for each run counted
    there and 250 kB besides; and every finished run's events packed (events.jsonl.gz, 3.5 x smaller than the live
    log a next study would otherwise commit)."""
    from bench import rundir

    holding = trees_holding()

    def counted(f: Path) -> bool:
        return min(holding[digest(f)]) == tree.name  # each file read once, for every tree

    size = sum(f.stat().st_size for f in tree.rglob("*") if f.is_file() and counted(f))
    runs = rundir.find_runs([tree])
    own = [run for run in runs if counted(run / rundir.META)]  # a copy's allowance is its first tree's
    assert size <= RUN_BYTES * len(own) + TREE_BYTES, f"{tree}: {size:,} bytes for {len(own)} runs of its own"
    for run in runs:
        if rundir.read_meta(run).get("status") in rundir.FINISHED:
            assert (run / rundir.EVENTS_PACKED).is_file() and not (run / rundir.EVENTS).exists(), run


MIXED_PLATFORMS = {  # trees whose runs are known to come from two platforms, each disclosed where it is written up
    "field-decay": "docs/studies.md: 22 trials on an AMD EPYC, the rest on an Intel Xeon (2026-12-03)",
}


@pytest.mark.parametrize("tree", TREES, ids=lambda p: p.name)
def test_a_committed_trees_runs_come_from_one_platform(tree):
    """A study's runs come from one kernel platform (rundir.kernels: the kernel path and the processor; the same run
    on an Intel Xeon and an AMD EPYC differs from its first evaluation): bench sweep refuses another, and this holds
    a tree resumed by hand or by an older checkout (whose sweep did not know the processor) to the same rule, where
    a copy adds the runs to the checkout."""
    from bench import rundir

    platforms = {rundir.kernels(rundir.read_meta(run)) for run in rundir.find_runs([tree])}
    if tree.name in MIXED_PLATFORMS:
        assert len(platforms) > 1, f"{tree.name} is one platform now: drop it from MIXED_PLATFORMS"
    else:
        assert len(platforms) == 1, f"{tree}: runs from {sorted(platforms)}"
