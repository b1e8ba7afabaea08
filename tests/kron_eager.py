"""`python -m tests.kron_eager ARGS`: the bench command line with timm's Kron eager (tests/conftest.py's _kron_eager)
for the subprocess runs of the library-optimizer tests."""

import sys

import timm.optim.kron

from bench.cli import main

timm.optim.kron.has_dynamo = False
sys.exit(main(sys.argv[1:]))
