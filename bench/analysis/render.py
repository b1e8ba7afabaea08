"""Tables as data (cells that know what they hold), rendered as markdown, csv or latex.

A `Cell` is a published number, a measured mean (with std and n), a derived
value, or a note ("—" for no number, "diverged"). Markdown and LaTeX print
"mean ± std (n=k)"; CSV keeps numbers in their own columns (`<col>`,
`<col> std`, `<col> n`, `<col> note`), each rounded to its kind's DIGITS, and
nothing else: a plain table `pandas.read_csv(path)` loads with its defaults. Its
title, notes and claims are `notes_text()`, which the CLI prints on stderr (and
which the markdown of the same table, written beside a csv by `bench suite` and
`bench sweep`, holds).

A table's claims are its conclusions in words, each made by `claim()` from the
table's own numbers; the markdown ends with them under "**Claims**", one a line,
and `claims_of()` reads them back (a write-up quotes them verbatim).
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field

from bench.errors import UserError

FORMATS = ("markdown", "csv", "latex")
NO_NUMBER = "—"
DIGITS = {
    "pct": "{:.2f}",
    "epochs": "{:.2f}",
    "steps": "{:,.0f}",
    "images": "{:,.0f}",
    "seconds": "{:,.1f}",
    "ratio": "{:.2f}",
    "size": "{:,.1f}",
    "loss": "{:.3f}",
    "int": "{:d}",
    "float": "{:g}",
    "p": "{:.3g}",
}


@dataclass(frozen=True)
class Cell:
    value: float | None = None
    std: float = math.nan
    n: int | None = None
    note: str = ""
    kind: str = "pct"
    ci: tuple[float, float] | None = None  # a confidence interval, shown as "[low, high]"

    @property
    def empty(self) -> bool:
        return self.value is None or (isinstance(self.value, float) and math.isnan(self.value))

    def number(self, value) -> str:
        if isinstance(value, float) and math.isinf(value):
            return "∞" if value > 0 else "-∞"
        return DIGITS[self.kind].format(int(value) if self.kind == "int" else value)

    def text(self) -> str:
        if self.empty:
            return self.note or NO_NUMBER
        out = self.number(self.value)
        if self.std == self.std and math.isfinite(self.std) and not math.isinf(self.value):
            out += f" ± {self.number(self.std)}"
        if self.ci is not None and all(map(math.isfinite, self.ci)):
            out += f" [{self.number(self.ci[0])}, {self.number(self.ci[1])}]"
        extra = [f"n={self.n}"] if self.n is not None else []
        extra += [self.note] if self.note else []
        return out + (f" ({'; '.join(extra)})" if extra else "")


def cell(value, kind: str = "pct", **kw) -> Cell:
    """A Cell for a plain published/derived number; NaN or None becomes '—'."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return Cell(None, note=kw.pop("note", NO_NUMBER), kind=kind, **kw)
    return Cell(float(value) if kind != "int" else int(value), kind=kind, **kw)


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    claims: list[str] = field(default_factory=list)  # claim()'s sentences: the table's conclusions in words

    def text_rows(self) -> list[list[str]]:
        return [[c.text() if isinstance(c, Cell) else str(c) for c in row] for row in self.rows]

    def numeric(self, j: int) -> bool:
        return any(isinstance(row[j], Cell) for row in self.rows)


CLAIMS = "**Claims** (written from the numbers above)"


def claim(
    subject: str,
    conclusion: str,
    interval: tuple[float, float] | None = None,
    coverage: str = "",
    kind: str = "ratio",
    unit: str = "x",
) -> str:
    """One conclusion of a table in words, made from its numbers: '<subject>: between <low><unit> and
    <high><unit> (<coverage>); <conclusion>.' (without an interval: '<subject>: <conclusion>.'). `kind` formats
    the ends as the table's cells do (DIGITS; ∞ for infinity); `coverage`: the interval's, as the table states it
    ('99.21%', '95%, uncorrected')."""
    if interval is None:
        return f"{subject}: {conclusion}."
    low, high = (Cell(v, kind=kind).number(v) + unit for v in interval)
    return f"{subject}: between {low} and {high} ({coverage}); {conclusion}."


def claims_of(markdown_text: str) -> list[str]:
    """The claims a markdown table ends with (what claim() wrote), in order."""
    if CLAIMS not in markdown_text:
        return []
    lines = markdown_text.split(CLAIMS, 1)[1].splitlines()
    return [line[2:] for line in lines if line.startswith("- ")]


def markdown(table: Table) -> str:
    rows = table.text_rows()
    widths = [max([len(c)] + [len(r[j]) for r in rows]) for j, c in enumerate(table.columns)]
    right = [table.numeric(j) for j in range(len(table.columns))]

    def line(cells):
        return "| " + " | ".join(c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right)) + " |"

    rule = "|" + "|".join(("-" * (w + 1) + ":") if r else ("-" * (w + 2)) for w, r in zip(widths, right)) + "|"
    body = "\n".join([line(table.columns), rule, *map(line, rows)])
    notes = "".join(f"\n- {n}" for n in table.notes)
    claims = f"\n{CLAIMS}\n\n" + "".join(f"- {c}\n" for c in table.claims) if table.claims else ""
    return f"**{table.title}**\n\n{body}\n{notes}\n{claims}"


def csv_number(value, kind: str) -> str:
    """A number as the csv holds it: its kind's DIGITS without the thousands separator (1.2000000000000028 of a
    pct is 1.20), infinities as 'inf' (read_csv's float), no number as ''."""
    if value is None or isinstance(value, str):
        return value or ""
    if isinstance(value, float) and math.isnan(value):
        return ""
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return DIGITS[kind].replace(",", "").format(int(value) if kind == "int" else value)


def _csv_value(c) -> str:
    if isinstance(c, Cell):
        return "" if c.empty else csv_number(c.value, c.kind)
    if isinstance(c, float):  # a bare number a table did not wrap in a Cell: printed as markdown would
        return csv_number(c, "float")
    return str(c)


def notes_text(table: Table) -> str:
    """What a csv leaves out: the table's title and its notes, one a line (the CLI prints them on stderr)."""
    return "".join(f"{line}\n" for line in [table.title, *table.notes, *table.claims])


def csv_text(table: Table) -> str:
    """A plain table: numbers in columns, rounded to their kind's DIGITS; a measured column (cells with n or a
    std) gains '<col> std' and '<col> n', a column with confidence intervals '<col> ci low' and '<col> ci high';
    notes in '<col> note'. The title and the table's notes are notes_text()'s."""
    layout = []
    for j, name in enumerate(table.columns):
        cells = [row[j] for row in table.rows]
        measured = any(isinstance(c, Cell) and (c.n is not None or c.std == c.std) for c in cells)
        noted = any(isinstance(c, Cell) and c.note and c.note != NO_NUMBER for c in cells)
        interval = any(isinstance(c, Cell) and c.ci is not None for c in cells)
        layout.append((j, name, measured, noted, interval))
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    header = []
    for _, name, measured, noted, interval in layout:
        header += (
            [name]
            + ([f"{name} std", f"{name} n"] if measured else [])
            + ([f"{name} ci low", f"{name} ci high"] if interval else [])
            + ([f"{name} note"] if noted else [])
        )
    writer.writerow(header)
    for row in table.rows:
        out = []
        for j, _, measured, noted, interval in layout:
            c = row[j]
            out.append(_csv_value(c))
            if measured:
                std = csv_number(c.std, c.kind) if isinstance(c, Cell) and not c.empty else ""
                out += [std, c.n if isinstance(c, Cell) and c.n is not None else ""]
            if interval:
                ci = c.ci if isinstance(c, Cell) and c.ci is not None else (None, None)
                out += [csv_number(v, c.kind) for v in ci]
            if noted:
                out.append(c.note if isinstance(c, Cell) and c.note != NO_NUMBER else "")
        writer.writerow(out)
    return buf.getvalue()


LATEX_SPECIAL = {
    "&": r"\&",
    "%": r"\%",
    "#": r"\#",
    "_": r"\_",
    "$": r"\$",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "\\": r"\textbackslash{}",
    "±": r"$\pm$",
    "∞": r"$\infty$",
    "—": "---",
    "–": "--",
    "≥": r"$\geq$",
    "×": r"$\times$",
    "−": "$-$",
}


def latex_escape(text: str) -> str:
    return "".join(LATEX_SPECIAL.get(ch, ch) for ch in text)


def latex(table: Table) -> str:
    align = "".join("r" if table.numeric(j) else "l" for j in range(len(table.columns)))
    lines = [
        r"\begin{table}[t]",
        r"\centering\small",
        rf"\caption{{{latex_escape(table.title)}}}",
        rf"\begin{{tabular}}{{{align}}}",
        r"\toprule",
        " & ".join(latex_escape(c) for c in table.columns) + r" \\",
        r"\midrule",
    ]
    lines += [" & ".join(latex_escape(c) for c in row) + r" \\" for row in table.text_rows()]
    lines += [r"\bottomrule", r"\end{tabular}"]
    if table.notes or table.claims:
        lines += [r"\par\smallskip\footnotesize", r" \\ ".join(latex_escape(n) for n in table.notes + table.claims)]
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"


def side_notes(tables: list[Table], fmt: str) -> str:
    """What goes to stderr beside `tables` rendered in `fmt`: a csv's titles and notes (the other formats hold
    theirs)."""
    return "\n".join(notes_text(t) for t in tables) if fmt == "csv" else ""


def render(table: Table, fmt: str = "markdown") -> str:
    renderers = {"markdown": markdown, "csv": csv_text, "latex": latex}
    if fmt not in renderers:
        raise UserError(f"unknown format '{fmt}'; choose from {', '.join(FORMATS)}")
    return renderers[fmt](table)
