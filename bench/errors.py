"""The exception types for bad user input and a full disk, and the argument parser that raises them.

Anything raised as `UserError` is printed by the CLI as one sentence with exit
code 2 and no traceback. It subclasses ValueError so library users (who call
`bench.optim.create` from their own code) can catch it the usual way.
"""

import argparse
import difflib
import importlib.util
import re
import warnings
from pathlib import Path


class UserError(ValueError):
    """Bad input from a user: a recipe, a CLI argument, a dataset, a run directory."""


class BenchWarning(UserWarning):
    """A warning of bench's own: the CLI prints it as one line, `bench: warning: ...` (bench.cli)."""


class BenchDeprecation(BenchWarning, FutureWarning):
    """A recipe key or value that still works but will go: one line too."""


def one_line_warnings() -> None:
    """Print bench's own warnings as `bench: warning: <message>`, with no source line; others as Python does."""
    default = warnings.formatwarning
    if getattr(default, "one_line", False):  # in place already: main() called again in one process (tests)
        return

    def format(message, category, filename, lineno, line=None):
        if issubclass(category, BenchWarning):
            return f"bench: warning: {message}\n"
        return default(message, category, filename, lineno, line)

    format.one_line = True
    warnings.formatwarning = format


class OutOfSpace(Exception):
    """The disk (or the quota) filled while bench wrote a file. The run ends "failed" and resumes from its
    last checkpoint, which stays intact; the CLI exits with `exit_code`, distinct from bad input's 2."""

    exit_code = 3


def require_extra(package: str, key: str) -> None:
    """One sentence when recipe key `key` needs the optional `package` (an extra of the same name)."""
    if importlib.util.find_spec(package) is None:
        raise UserError(
            f"key '{key}' asks for the {package} package, which is not installed; "
            f"pip install -e '.[{package}]' (./setup.sh installs it)"
        )


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose errors are UserErrors: one sentence and exit 2, with no usage block, from every
    subcommand (bench's own and each `bench perf` benchmark's)."""

    def error(self, message: str):
        where = "" if self.prog == "bench" else f"{self.prog}: "  # the CLI says "bench: error:" already
        choice = re.match(r"argument (\S+): invalid choice: '(.*?)' \(choose from (.*)\)$", message)
        if choice:
            what, given = choice.group(1), choice.group(2)
            options = re.findall(r"'([^']*)'", choice.group(3))
            close = difflib.get_close_matches(given, options, n=1)
            named = {"COMMAND": "command", "WHAT": "command", "BENCHMARK": "command", "TABLE": "table"}.get(what)
            said = f"unknown {named} '{given}'" if named else f"unknown value '{given}' for {what}"
            message = said + (f" (did you mean '{close[0]}'?)" if close else f"; one of {', '.join(options)}")
        raise UserError(f"{where}{message} (see {self.prog} --help)")


def did_you_mean(word: str, choices) -> str:
    """ " (did you mean 'x'?)" for the closest of choices, or ""."""
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def count(minimum: int):
    """An argparse type: an integer of at least `minimum`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {text!r}")
        return value

    return parse


def out_folder(text: str) -> str:
    """An argparse type: a folder to write into (made if missing), not a file."""
    for path in (Path(text), *Path(text).parents):
        if path.exists() and not path.is_dir():
            what = "a file" if path == Path(text) else f"{path} is a file"
            raise argparse.ArgumentTypeError(f"{text}: {what} (a folder to write into is expected)")
    return text


def out_file(text: str) -> str:
    """An argparse type: a file to write, in a folder that exists."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: a folder (a file to write is expected)")
    if not path.resolve().parent.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: the folder {path.resolve().parent} does not exist")
    return text


def one_line(text: str) -> str:
    """An argparse type: a value written into a line of a script (#SBATCH), so no line breaks or control characters."""
    if re.search(r"[\x00-\x1f\x7f]", text):
        raise argparse.ArgumentTypeError(f"{text!r}: a line break or control character (one line is expected)")
    return text


def split_set(text: str) -> tuple[str, str]:
    """A --set: 'schedule.decay=poly' -> ('schedule.decay', 'poly'), or one sentence where there is no KEY=."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise UserError(f"--set '{text}': expected KEY.PATH=VALUE, e.g. --set optimizer.lr=0.5")
    return key, value


def assignment(text: str) -> str:
    """--set's argparse type: `--set optimizer.lr 0.1` (no '=') refused for the option, before argparse would call
    the value that follows an unrecognized argument; the value's YAML is the recipe's to check (naming its file)."""
    try:
        split_set(text)
    except UserError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("--set ")) from None
    return text


def doc_summary(doc: str) -> str:
    """A module docstring's first paragraph on one line: its command's --help description."""
    return " ".join(doc.split("\n\n")[0].split())
