"""The one exception type for bad user input.

Anything raised as `UserError` is printed by the CLI as one sentence with exit
code 2 and no traceback. It subclasses ValueError so library users (who call
`bench.optim.create` from their own code) can catch it the usual way.
"""


class UserError(ValueError):
    """Bad input from a user: a recipe, a CLI argument, a dataset, a run directory."""


class OutOfSpace(Exception):
    """The disk (or the quota) filled while bench wrote a file. The run ends "failed" and resumes from its
    last checkpoint, which stays intact; the CLI exits with `exit_code`, distinct from bad input's 2."""

    exit_code = 3
