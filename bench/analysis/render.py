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

LaTeX is for a paper and compiles with plain pdflatex (no package): ASCII only
(every other character as LaTeX spells it: ± and Δ in math mode, ² a superscript),
the title as the caption, the columns with no number in any row and the same
text in every one left out (named in the notes), and the notes and claims as
lists after the table float, outside its caption.
"""

from __future__ import annotations

import csv
import io
import math
import unicodedata
from dataclasses import dataclass, field
from typing import NamedTuple

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
    keys: int = 1  # the leading columns that name a row: each part of a LaTeX table split to fit a page repeats them

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
    the ends as the table's cells do (DIGITS); a ratio's end at 0 or ∞ (the other side's misses) is no number:
    'at most <high>' / 'at least <low>'. `coverage`: the interval's, as the table states it ('99.21%', '95%,
    uncorrected')."""
    if interval is None:
        return f"{subject}: {conclusion}."
    low, high = (Cell(v, kind=kind).number(v) + unit for v in interval)
    if kind == "ratio" and interval[0] <= 0 < interval[1] < math.inf:
        return f"{subject}: at most {high} ({coverage}); {conclusion}."
    if kind == "ratio" and 0 < interval[0] and interval[1] == math.inf:
        return f"{subject}: at least {low} ({coverage}); {conclusion}."
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


LATEX_SPECIAL = {  # every character a table may hold that pdflatex takes otherwise or not at all
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
    "<": "$<$",
    ">": "$>$",
    "|": "$|$",
    "±": r"$\pm$",
    "∞": r"$\infty$",
    "—": "---",
    "–": "--",
    "−": "$-$",
    "≥": r"$\geq$",
    "≤": r"$\leq$",
    "≠": r"$\neq$",
    "≈": r"$\approx$",
    "∝": r"$\propto$",
    "×": r"$\times$",
    "÷": r"$\div$",
    "·": r"$\cdot$",
    "∂": r"$\partial$",
    "α": r"$\alpha$",
    "γ": r"$\gamma$",
    "δ": r"$\delta$",
    "τ": r"$\tau$",
    "Δ": r"$\Delta$",
    "Σ": r"$\Sigma$",
    "²": r"\textsuperscript{2}",
    "½": r"$\frac{1}{2}$",
    "…": r"\ldots{}",
    "‘": "`",
    "’": "'",
    "“": "``",
    "”": "''",
}
LATEX_ACCENTS = {"\u0300": "`", "\u0301": "'", "\u0302": "^", "\u0303": "~", "\u0308": '"', "\u0327": "c"}


def _latex_char(ch: str) -> str:
    """One character as pdflatex takes it: LATEX_SPECIAL's, ASCII as it is, anything else (a folder's name) as its
    compatibility decomposition with LaTeX's accents (é: \\'{e}), '?' for what none of these spells."""
    if ch in LATEX_SPECIAL or ch.isascii():
        return LATEX_SPECIAL.get(ch, ch)
    out = ""
    for part in unicodedata.normalize("NFKD", ch):
        if part in LATEX_ACCENTS and out:
            out = rf"\{LATEX_ACCENTS[part]}{{{out}}}"
        else:
            out += LATEX_SPECIAL.get(part, part) if part.isascii() else "?"
    return out


def latex_escape(text: str) -> str:
    return "".join(map(_latex_char, text))


def blank_columns(table: Table) -> list[int]:
    """The columns with no number in any row and the same text in every one ('—' throughout, 'not compared
    (speed)'): LaTeX leaves them out."""
    texts = table.text_rows()
    return [
        j
        for j in range(len(table.columns))
        if table.rows
        and all(c.empty if isinstance(c, Cell) else str(c) in ("", NO_NUMBER) for c in (row[j] for row in table.rows))
        and len({row[j] for row in texts}) == 1
    ]


# The narrowest common text width: a one-column conference paper's 5.5 in (NeurIPS, ICLR), where table* is a
# plain float; a table that fits it fits a two-column paper's table* too (article's 469 pt, ICML's 487).
LATEX_PAGE_PT = 397
# LaTeX's sizes at 10 pt with their em (Computer Modern's quad, pt: small types are cut wider) and the gap between
# columns at each (twice \tabcolsep, pt; LaTeX's own: 12)
LATEX_SIZES = (("small", 9.25, 12), ("footnotesize", 8.5, 8), ("scriptsize", 7.97, 6), ("tiny", 6.81, 4))
LATEX_WRAP = 12  # characters: a text column with a longer cell wraps (p{...}) instead of widening the table
# The shortest common text height: article's at 10 pt on letter paper (size10.clo: 45 lines of 12 pt and \topskip,
# one column or two; the tests compile in it); A4 article's is 598 pt, NeurIPS, ICLR and ICML's 9 in 650 pt,
# ACL's taller still. A float taller than this is split into row parts (latex_rows).
LATEX_TEXT_HEIGHT_PT = 550
# \baselineskip at each of LATEX_SIZES in a 10 pt document (size10.clo), pt: a tabular row is a strut this tall, a
# wrapped (p) cell's lines this far apart
LATEX_BASELINE = {"small": 11, "footnotesize": 9.5, "scriptsize": 8, "tiny": 6}
# A caption's em and baselineskip, pt: LaTeX sets it in \normalsize whatever the float's size (\@caption)
LATEX_CAPTION = (10, 12)
# A float's height besides its caption's lines and its rows, pt: article's \abovecaptionskip (10), \lineskip under
# the caption (1) and three \hline rules (\arrayrulewidth 0.4)
LATEX_FLOAT_PT = 10 + 1 + 3 * 0.4
# Glyph widths in em, rounded up from Computer Modern Roman's (cmr10): digits 0.5, most lower case 0.44-0.56,
# capitals 0.68-0.75 (M, W wider); a character not listed counts as the widest of its kind.
_EM = {
    **dict.fromkeys("0123456789", 0.5),
    **dict.fromkeys("acegvxyzk", 0.53),
    **dict.fromkeys("il.,:;'![]|", 0.28),
    **dict.fromkeys("jft()-/ ", 0.39),
    **dict.fromkeys("rs", 0.4),
    **dict.fromkeys("mw%", 0.84),
    **dict.fromkeys("αβγδεζηθικλμνξοπρστυφχψω", 0.66),
    **dict.fromkeys("—∞…", 1.0),
    "Δ": 0.86,
}


def text_em(text: str) -> float:
    """A text's width in em of LaTeX's default font, a little over (margins may not stick out): each glyph's
    width from _EM (Greek, dashes and ∞ too), other lower case 0.56, capitals 0.76 (M and W 1.03), anything else
    (symbols in math mode, accented letters) 0.84."""
    return 1.03 * sum(
        _EM.get(c) or (0.56 if c.islower() else 1.03 if c in "MW" else 0.76 if c.isupper() else 0.84) for c in text
    )


class LatexLayout(NamedTuple):
    size: str  # one of LATEX_SIZES
    gap: int  # between columns, pt
    specs: list[str]  # each shown column's: r, l or p{a share of \linewidth}
    widths: list[float]  # each shown column's width in pt where it wraps (its p share before rounding), else 0
    fits: bool  # the table fits the page's width


def latex_columns(table: Table, shown: list[int], texts: list[list[str]], sizes=LATEX_SIZES) -> LatexLayout:
    """The type size, the gap between columns, each shown column's LaTeX spec and width, and whether the table fits
    the page (LatexLayout).
    A column is r (numeric) or l at its natural width when its cells are short; p{a share of \\linewidth} when a
    cell is longer than LATEX_WRAP characters: the page's width less the short columns' (text_em, plus the gaps),
    shared so that a column whose cells fit within an equal share keeps them on one line, and none narrower than
    its longest word (a word that cannot break would stick out); the header wraps within its column's width.
    The size and gap are the largest of `sizes` (LATEX_SIZES, largest first) at which the short columns and the
    long ones' longest words fit (else the smallest, and the table is wider than the page)."""
    cells = {j: [table.columns[j], *(row[j] for row in texts)] for j in shown}
    longest = {j: max(map(len, cells[j])) for j in shown}
    wide = [j for j in shown if longest[j] > LATEX_WRAP]
    natural = {j: max(map(text_em, cells[j])) for j in shown if j not in wide}
    word = {j: max(text_em(w) for c in cells[j] for w in c.split()) for j in wide}
    for size, em, gap in sizes:
        narrow = sum(em * natural[j] for j in natural) + gap * len(shown)
        least = {j: em * word[j] for j in wide}
        fits = narrow + sum(least.values()) <= LATEX_PAGE_PT
        if fits:
            break
    # Water-filling over what is left: first a column whose longest word is wider than an equal share gets that
    # word (the share shrinks: look again); then one whose longest cell fits the share stays whole (one line a
    # row; the share grows); the rest share equally. The widths never sum past the page when the words fit.
    whole = {j: max(least[j], em * max(text_em(row[j]) for row in texts)) if texts else least[j] for j in wide}
    width, free = {}, list(wide)
    while free:
        share = (LATEX_PAGE_PT - narrow - sum(width.values())) / len(free)
        settled = {j: least[j] for j in free if least[j] >= share} or {j: whole[j] for j in free if whole[j] <= share}
        width |= settled or dict.fromkeys(free, share)
        free = [j for j in free if j not in width]
    specs = [
        rf"p{{{math.floor(1000 * width[j] / LATEX_PAGE_PT) / 1000:g}\linewidth}}"
        if j in wide
        else "r"
        if table.numeric(j)
        else "l"
        for j in shown
    ]
    return LatexLayout(size, gap, specs, [width.get(j, 0.0) for j in shown], fits)


def latex_parts(table: Table, shown: list[int], texts: list[list[str]]) -> list[tuple[list[int], LatexLayout]]:
    """The shown columns as the fewest parts that fit the page (latex_columns), in the largest type that needs no
    more parts; every part the table's key columns and the next columns in order. One part when the whole table
    fits; a part that does not fit even in the smallest type is one key and one column too wide: it says so."""
    keys = [j for j in shown if j < table.keys]
    rest = [j for j in shown if j >= table.keys]

    def packed(sizes) -> list[list[int]]:
        parts = [[]]
        for j in rest:
            if parts[-1] and not latex_columns(table, keys + parts[-1] + [j], texts, sizes).fits:
                parts.append([])
            parts[-1].append(j)
        return parts

    fewest = len(packed(LATEX_SIZES[-1:]))
    for i in range(len(LATEX_SIZES)):
        sizes = LATEX_SIZES[i : i + 1]
        laid = [(keys + part, latex_columns(table, keys + part, texts, sizes)) for part in packed(sizes)]
        if (len(laid) == fewest and all(layout.fits for _, layout in laid)) or i == len(LATEX_SIZES) - 1:
            return laid


def latex_lines(text: str, width: float) -> int:
    """The lines a cell or caption of `text` wraps to in `width` em: greedy, a word at a time (\\raggedright's fil
    stretch makes every line's badness 0, so TeX takes the fewest lines, hyphenating nothing; text_em is a little
    over, so this is at least TeX's count)."""
    lines, line = 1, None
    for word in text.split():
        if line is not None and line + text_em(" " + word) > width:
            lines, line = lines + 1, None
        line = text_em(word) if line is None else line + text_em(" " + word)
    return lines


def latex_heights(table: Table, columns: list[int], layout: LatexLayout, texts: list[list[str]]) -> list[float]:
    """The height (pt) of a column part's caption, then of its header and of each row: its most lines (latex_lines
    in a p column's width at the part's size, one in an r or l column) times the size's baselineskip (a wrapped
    cell's lines are that far apart, a row no shorter than its strut). The caption's lines are the title's with a
    part's longest label, in \\normalsize (LATEX_CAPTION), as wide as the narrowest page (LATEX_PAGE_PT)."""
    em, skip = dict((s, e) for s, e, _ in LATEX_SIZES)[layout.size], LATEX_BASELINE[layout.size]
    widths = [w / em for w in layout.widths]  # em of the part's type; 0: an r or l column, one line
    caption = LATEX_CAPTION[1] * latex_lines(
        f"Table 99: {table.title} (part 99 of 99)", LATEX_PAGE_PT / LATEX_CAPTION[0]
    )
    rows = [[table.columns[j] for j in columns], *([row[j] for j in columns] for row in texts)]
    return [caption] + [
        skip * max((latex_lines(c, w) if w else 1 for c, w in zip(row, widths)), default=1) for row in rows
    ]


def latex_rows(table: Table, parts: list[tuple[list[int], LatexLayout]], texts: list[list[str]]) -> list[list[int]]:
    """The rows (indices into texts) as the fewest blocks whose floats fit the page's height (LATEX_TEXT_HEIGHT_PT;
    pdflatex only warns 'Float too large' of a taller one and drops the rows past the page's foot), the same blocks
    in every column part: packed in order, each row as tall as its tallest in any part (latex_heights), and each
    block ending where the first column changes (a batch's rows together) when that takes no more blocks. One
    block when the whole table fits; a row is never split (one taller than a page goes alone)."""
    heights = [latex_heights(table, columns, layout, texts) for columns, layout in parts]
    head = max(caption + header for caption, header, *_ in heights)
    tall = [max(row) for row in zip(*(h[2:] for h in heights))]
    room = LATEX_TEXT_HEIGHT_PT - LATEX_FLOAT_PT - head
    batch = [[row[j] for j in parts[0][0][:1]] for row in texts]  # the first shown column's text

    def packed(together: bool) -> list[list[int]]:
        blocks = [[]]
        for i, h in enumerate(tall):
            if blocks[-1] and sum(tall[k] for k in blocks[-1]) + h > room:
                block, start = blocks[-1], len(blocks[-1])
                while together and start and batch[block[start - 1]] == batch[i]:
                    start -= 1
                if not start or sum(tall[k] for k in block[start:]) + h > room:
                    start = len(block)  # a batch too tall for one float is split after all
                blocks[-1:] = [block[:start], block[start:]]
            blocks[-1].append(i)
        return blocks

    plain, together = packed(False), packed(True)
    return together if len(together) <= len(plain) else plain


def latex(table: Table) -> str:
    """The table's floats (the title as the caption, no column that blank_columns finds; spanning both columns of
    a two-column paper, its long text columns wrapped to fit: latex_columns; a table too wide for the page even so
    split into parts that repeat its key columns: latex_parts; one too tall for the page split into blocks of rows,
    each float repeating the header: latex_rows), ASCII, for plain pdflatex; its notes and claims are
    latex_notes'. Split floats are captioned "(part k of n)", n the column parts times the row blocks: each column
    part's blocks in turn, every column part holding the same blocks."""
    blank, texts = blank_columns(table), table.text_rows()
    shown = [j for j in range(len(table.columns)) if j not in blank]
    parts = latex_parts(table, shown, texts)
    blocks = latex_rows(table, parts, texts)
    floats = [(part, block) for part in parts for block in blocks]
    lines = []
    for i, ((columns, (size, gap, specs, _, fits)), block) in enumerate(floats, 1):
        wrapped = {j for j, spec in zip(columns, specs) if spec.startswith("p")}
        # a wrapped cell ragged right; \tabularnewline, as \raggedright redefines \\
        rows = [
            " & ".join(("\\raggedright " if j in wrapped else "") + latex_escape(row[j]) for j in columns)
            + r" \tabularnewline"
            for row in [table.columns, *(texts[k] for k in block)]
        ]
        part = f" (part {i} of {len(floats)})" if len(floats) > 1 else ""
        lines += [
            *([] if fits else [f"% {len(columns)} columns: wider than a page even in {size} type (--format csv)"]),
            r"\begin{table*}[t]",
            rf"\centering\{size}",
            *([] if gap == 12 else [rf"\setlength{{\tabcolsep}}{{{gap / 2:g}pt}}"]),
            rf"\caption{{{latex_escape(table.title + part)}}}",
            rf"\begin{{tabular}}{{{''.join(specs)}}}",
            r"\hline",
            rows[0],
            r"\hline",
            *rows[1:],
            r"\hline",
            r"\end{tabular}",
            r"\end{table*}",
        ]
    return "\n".join(lines) + "\n"


def latex_notes(table: Table) -> str:
    """What the LaTeX float leaves out, as LaTeX lists for the text or an appendix: the columns left out, the notes
    that define the numbers, and the claims in words."""
    texts = table.text_rows()
    left_out = {}
    for j in blank_columns(table):
        left_out.setdefault(texts[0][j], []).append(table.columns[j])
    notes = [f"Columns left out, '{text}' in every row: {', '.join(names)}." for text, names in left_out.items()]
    lines = []
    for head, items in (("Notes", notes + table.notes), ("Claims", table.claims)):
        if items:
            # \sloppy: a long identifier (a run's name, a path) moves to the next line rather than out of the margin
            lines += [rf"\noindent\textbf{{{head}}}", r"\begin{itemize}\sloppy"]
            lines += [rf"\item {latex_escape(item)}" for item in items] + [r"\end{itemize}", ""]
    return "\n".join(lines)


def side_notes(tables: list[Table], fmt: str) -> str:
    """What goes to stderr beside `tables` rendered in `fmt` (`2> notes` keeps it apart from the table): a csv's
    titles and notes, LaTeX's notes and claims as lists (latex_notes); markdown holds its own."""
    if fmt == "csv":
        return "\n".join(notes_text(t) for t in tables)
    return "\n".join(latex_notes(t) for t in tables) if fmt == "latex" else ""


def render(table: Table, fmt: str = "markdown") -> str:
    renderers = {"markdown": markdown, "csv": csv_text, "latex": latex}
    if fmt not in renderers:
        raise UserError(f"unknown format '{fmt}'; choose from {', '.join(FORMATS)}")
    return renderers[fmt](table)
