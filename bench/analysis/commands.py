"""`bench report`, `bench table`, `bench plot`: analysis from run directories."""

from __future__ import annotations

from pathlib import Path


def cmd_report(args) -> int:
    from bench.analysis import report, results

    print(report.render(results.load(args.paths)))
    return 0


def add_parsers(sub, default_results: Path) -> None:
    s = sub.add_parser("report", help="summarise run directories")
    s.add_argument("paths", nargs="*", default=[str(default_results)], metavar="PATH")
    s.set_defaults(func=cmd_report)
