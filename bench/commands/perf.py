"""`bench perf BENCHMARK [...]`: the micro-benchmarks, a module each in bench/perf/ (its docstring's first paragraph is
its help); each parses its own options in its main()."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

from bench.errors import doc_summary


def perf_benchmarks() -> dict[str, str]:
    """Each module of bench.perf is a benchmark; its docstring's first sentence (paragraph) is the help."""
    folder = Path(__file__).parents[1] / "perf"
    found = {}
    for path in sorted(folder.glob("[!_]*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        found[path.stem] = doc_summary(doc)
    return found


def cmd_perf(args) -> int:
    return importlib.import_module(f"bench.perf.{args.benchmark}").main(args.rest)


def add_parsers(sub) -> None:
    perf = sub.add_parser("perf", help="micro-benchmarks").add_subparsers(
        dest="benchmark", required=True, metavar="BENCHMARK"
    )
    for name, help in perf_benchmarks().items():
        s = perf.add_parser(name, help=help, add_help=False)  # its own options go to its main()
        s.set_defaults(func=cmd_perf, rest=[])  # rest: those options, which bench/cli.py hands on
