"""The committed studies' headline tables, recomputed from their committed results trees (no training), so that a
changed analysis cannot silently change a number the README or docs/studies.md quotes: a change that moves one
fails here until the tables are regenerated (bench sweep ... --plots, or analysis.commands.regenerate_sweep) and
the diff is committed and explained."""

from pathlib import Path

import pytest

from bench.analysis import results, tables

ROOT = Path(__file__).resolve().parents[1]
HEADLINES = ("scaling", "verdict", "matched")  # the tables the write-ups quote
COMMITTED = sorted(
    path
    for study in ("ladder-speed", "ladder-quality", "fashion-mnist-superseded")
    for name in HEADLINES
    if (path := ROOT / "results" / study / f"{name}.md").exists()
)


def rows(markdown: str) -> list[str]:
    """A rendered table's rows (its numbers), without the title and notes (wording may be edited freely)."""
    return [line for line in markdown.splitlines() if line.startswith("|")]


def test_the_headline_studies_have_committed_tables():
    assert {"fashion-mnist-superseded", "ladder-speed"} <= {p.parent.name for p in COMMITTED}


def test_the_readmes_ladder_table_quotes_the_committed_tables():
    """Each steps figure and ratio interval of the README's headline table is in the committed tables (which the
    test below recomputes from the tree): an edited README cannot drift from the study's numbers."""
    readme = (ROOT / "README.md").read_text()
    block = readme[readme.index("<!-- ladder-status -->") : readme.index("<!-- /ladder-status -->")]
    scaling = (ROOT / "results" / "ladder-speed" / "scaling.md").read_text()
    verdict = (ROOT / "results" / "ladder-speed" / "verdict.md").read_text()
    rows = [line.split("|")[1:-1] for line in block.splitlines() if line.startswith("| ") and "] |" in line]
    rows = [row for row in rows if row[0].strip()[0].isdigit()]  # not the header
    assert len(rows) == 4  # the batches with a ratio: 64-512
    for batch, lars, vrgd, ratio, *_ in (map(str.strip, row) for row in rows):
        assert f"| {batch} " in scaling and lars in scaling and vrgd in scaling, (batch, lars, vrgd)
        assert f"99.0% interval {ratio.split(' ', 1)[1]}" in verdict, (batch, ratio)


@pytest.fixture(scope="module")
def studies():
    return {}


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_a_committed_table_is_what_its_tree_gives(path, studies):
    from bench.analysis.render import render

    if path.parent not in studies:
        studies[path.parent] = results.load_study([path.parent])
    fresh = rows(render(tables.build(path.stem, studies[path.parent]), "markdown"))
    committed = rows(path.read_text())
    assert fresh and fresh == committed, f"{path} differs from what its results tree gives now"
