#!/usr/bin/env bash
# Set up from nothing: a virtual environment in .venv with bench and its
# dependencies, at the tested torch/torchvision versions. Safe to run again.
#
# CUDA flavour (torch's build and DALI's extra), docs/cluster.md:
#   BENCH_CUDA=13    CUDA 13 builds (driver R580 or newer): torch's default wheels, bench[dali-cuda13]
#   BENCH_CUDA=12    CUDA 12 builds (driver R525 or newer): torch from $TORCH_CUDA12_INDEX, bench[dali-cuda12]
#   BENCH_CUDA=cpu   no GPU: torch's default wheels, bench[dali-cuda13] for DALI's CPU pipelines
# Unset: read from the driver (nvidia-smi's "CUDA Version", the newest CUDA it runs): 13 or newer -> 13,
# 12.x -> 12; no nvidia-smi -> cpu (what a machine without a GPU installed before this choice existed).
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3}
TORCH_CUDA12_INDEX=${TORCH_CUDA12_INDEX:-https://download.pytorch.org/whl/cu129}
PINS=(torch==2.14.1 torchvision==0.29.1)  # the tested versions

driver_cuda() {  # the major CUDA version the driver runs, or nothing
    command -v nvidia-smi >/dev/null || return 0
    nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9]*\)\..*/\1/p' | head -n 1
}
cuda=${BENCH_CUDA:-$(driver_cuda)}
cuda=${cuda:-cpu}
case "$cuda" in
    cpu) dali=dali-cuda13; torch_index=() ;;
    12) dali=dali-cuda12; torch_index=(--index-url "$TORCH_CUDA12_INDEX") ;;
    13 | 1[4-9]) cuda=13; dali=dali-cuda13; torch_index=() ;;
    *) echo "setup.sh: BENCH_CUDA (or the driver's CUDA) is '$cuda'; bench installs 12, 13 or cpu builds" \
        "(a driver older than CUDA 12 needs updating: docs/cluster.md)" >&2; exit 2 ;;
esac
echo "setup.sh: CUDA flavour $cuda (torch ${torch_index[*]:-default wheels}, bench[$dali])"
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
# pip compiles what it installs on one core; compileall below does it on every core (setup 168 s against 143 s on
# 2 cores). Compiled here, not on first import: where PYTHONDONTWRITEBYTECODE is set (CI images set it) nothing
# imported would ever be cached, and every process (every test's `bench`) would compile torch again.
# pip is quiet (-q): one line a step says what the minutes go to
echo "setup.sh: installing ${PINS[*]}, bench and its dependencies into .venv (pip: 1-3 min)"
.venv/bin/python -m pip install -q --no-compile --upgrade pip
# torch from its CUDA 12 index first where that is the flavour; the default wheels come with the rest, in one call
[ ${#torch_index[@]} -eq 0 ] || .venv/bin/python -m pip install -q --no-compile "${torch_index[@]}" "${PINS[@]}"
.venv/bin/python -m pip install -q --no-compile "${PINS[@]}" \
    -e ".[test,tensorboard,wandb,optimizers,$dali]"
# VRGD's fused CPU kernels (bench/optim/fused.py) built here, once, not in the first VRGD run or test (half a
# minute idle, two under load); beside compileall, as each leaves a core idle at times (50 s against 58 s on 2
# cores). Without a compiler bench keeps the eager code, and the line printed says why.
echo "setup.sh: compiling the Python files and VRGD's CPU kernels (about 1 min)"
.venv/bin/python -c "from bench.optim import fused; fused.prebuild()" &
kernels=$!
# A file no Python 3 compiles (a package's test data) fails only itself, as it does under pip. Packages' own tests
# are never imported: left out.
.venv/bin/python -m compileall -q -j 0 -x '/tests?/' .venv/lib/python*/site-packages >/dev/null || true
wait "$kernels"
echo "setup.sh: ready: .venv/bin/bench (source .venv/bin/activate puts it on the PATH)"
