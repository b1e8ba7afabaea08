"""LaTeX tables as pdflatex sets them (bench/analysis/render.py): a table too wide for the page is split into
column parts, one too tall into row parts, and pdflatex loses nothing past the page's edge or foot (compile_latex,
tests/helpers.py: the tests' document, which test_verdict and test_studies compile with too)."""

import shutil
import subprocess

import pytest

from bench.analysis import render as rendering
from bench.analysis.render import Cell, Table, latex_columns, latex_rows, render
from tests.helpers import LAYOUTS, compile_latex, needs_pdflatex

PAIRS = ("AdamW / LARS", "AdamW / Nesterov SGD", "LARS / VRGD-LARS", "Nesterov SGD / LARS", "VRGD-LARS / LARS")


def tall_table(batches: int = 12, columns: int = 0) -> Table:
    """A verdict-like table of `batches` batches of 5 pairs, each row's long verdict naming it (row00, row01, ...),
    and `columns` more numeric columns (to make it too wide as well)."""
    rows = [
        [
            Cell(float(64 * 2**b), kind="int"),
            pair,
            Cell(55.0 + i, std=0.9, n=5),
            f"row{5 * b + i:02d} within noise (could detect at least 2.4 pp); rests on a near tie whose runner-up "
            "was not rerun",
            *[Cell(123456.0)] * columns,
        ]
        for b in range(batches)
        for i, pair in enumerate(PAIRS)
    ]
    head = ["batch", "pair", "val Top-1 X", "verdict", *(f"column {k}" for k in range(columns))]
    return Table("Verdict: a synthetic sweep's every pair at every batch", head, rows, keys=2)


def floats_of(tex: str) -> list[str]:
    return tex.split(r"\begin{table*}")[1:]


def data_rows(part: str) -> list[str]:
    """A float's rows after its header (the second \\hline's)."""
    body = part.split("\\hline\n")[2]
    return [line for line in body.splitlines() if line.endswith(r"\tabularnewline")]


@needs_pdflatex
@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_a_table_too_tall_for_the_page_is_split_into_row_parts_and_loses_no_row(tmp_path, layout):
    """60 rows of long wrapped verdicts are several pages of table: each float holds whole rows under the repeated
    header, captioned '(part i of n)'; pdflatex sets every one (no 'Float too large', nothing too wide) and the PDF
    holds every row's text (pdftotext, where it is installed)."""
    table = tall_table()
    tex = render(table, "latex")
    floats = floats_of(tex)
    assert len(floats) > 1
    assert all(rf"\caption{{{table.title} (part {i} of {len(floats)})}}" in f for i, f in enumerate(floats, 1))
    heads = {f.split("\\hline\n")[1] for f in floats}  # the header, repeated
    assert len(heads) == 1 and heads.pop().startswith("batch & ")
    shown = [row for f in floats for row in data_rows(f)]
    assert [row.split(r"\raggedright row")[1][:2] for row in shown] == [f"{k:02d}" for k in range(60)]
    pdf = compile_latex(tmp_path, "tall", layout, tex)
    if shutil.which("pdftotext"):
        text = subprocess.run(["pdftotext", pdf, "-"], capture_output=True, text=True, check=True).stdout
        assert [k for k in range(60) if f"row{k:02d}" not in text] == []


@needs_pdflatex
def test_a_table_too_wide_and_too_tall_is_split_both_ways_and_numbered_over_all_its_floats(tmp_path):
    """Column parts (each repeating the key columns) times row blocks (the same rows in every column part): 'part
    k of n' counts every float, each column part's blocks in turn; each column part holds every row once."""
    table = tall_table(columns=30)
    tex = render(table, "latex")
    floats = floats_of(tex)
    columns = len({f.split(r"\begin{tabular}")[1].split("\n")[0] for f in floats})
    blocks = len(floats) // columns
    assert columns > 1 and blocks > 1 and len(floats) == columns * blocks
    assert all(rf"(part {i} of {len(floats)})}}" in f for i, f in enumerate(floats, 1))
    keys = [[" & ".join(row.split(" & ")[:2]) for row in data_rows(f)] for f in floats]
    assert all(keys[c * blocks + b] == keys[b] for c in range(columns) for b in range(blocks))
    assert sum(map(len, keys[:blocks])) == 60
    compile_latex(tmp_path, "both", LAYOUTS["one-column 5.5 in"], tex)


def test_a_table_that_fits_the_page_stays_one_float_as_before():
    """A table no taller than the page is the one float it always was, byte for byte (the committed trees' tables
    that fit keep their LaTeX), and a table of 10 wrapped rows stays one float too."""
    words = "a verdict in words that runs far longer than any column of numbers beside it"
    assert render(Table("t", ["batch", "verdict"], [[Cell(64.0), words]]), "latex") == (
        "\\begin{table*}[t]\n\\centering\\small\n\\caption{t}\n\\begin{tabular}{rp{0.866\\linewidth}}\n\\hline\n"
        "batch & \\raggedright verdict \\tabularnewline\n\\hline\n64.00 & \\raggedright a verdict in words that runs "
        "far longer than any column of numbers beside it \\tabularnewline\n\\hline\n\\end{tabular}\n\\end{table*}\n"
    )
    ten = render(tall_table(batches=2), "latex")
    assert len(floats_of(ten)) == 1 and "part" not in ten and len(data_rows(ten)) == 10


def test_row_blocks_keep_a_batchs_rows_together_when_that_takes_no_more_floats(monkeypatch):
    """Packing breaks where the batch changes when that needs no more floats than filling each float (two batches
    of 6 and one of 4 in floats of 11 rows: 6 + 10, not 11 + 5), and fills them where it would (three of 6: 11 + 7,
    not 6 + 6 + 6)."""
    # one-line rows at \small (11 pt), a one-line caption (12) and header (11): 11 rows to a float of 161.2 pt
    monkeypatch.setattr(rendering, "LATEX_TEXT_HEIGHT_PT", rendering.LATEX_FLOAT_PT + 12 + 11 + 11 * 11 + 5)

    def blocks(sizes):
        texts = [[str(64 * 2**b), f"p{i}"] for b, n in enumerate(sizes) for i in range(n)]
        table = Table("t", ["batch", "pair"], texts)
        layout = latex_columns(table, [0, 1], texts)
        return [len(block) for block in latex_rows(table, [([0, 1], layout)], texts)]

    assert blocks([6, 6, 4]) == [6, 10]
    assert blocks([6, 6, 6]) == [11, 7]
    assert blocks([6, 5]) == [11]
