#!/usr/bin/env bash
# Set up from nothing: a virtual environment in .venv with bench and its
# dependencies, at the tested torch/torchvision versions. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q torch==2.14.1 torchvision==0.29.1 -e '.[test,tensorboard,wandb,optimizers]'
