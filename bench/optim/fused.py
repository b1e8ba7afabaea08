"""VRGD's fused kernels: C++ for CPU (csrc/vrgd_cpu.cpp, compiled on first use by torch's C++
extension loader) and Triton for GPU (fused_triton.py), with the same three calls: observe,
vrgd_lars_step, vrgd_factors.

Why: the eager VRGD-LARS step walks the parameters about 14 times (each torch op is one pass over the
statistics); the fused step does 3 passes per tensor, observe() one pass for the sum and the sum of
squares, and the other variants' GSNR factors two. `bench perf optim` measures them side by side.

The CPU kernels take dense fp32 parameters. They are built once per machine and torch version into
torch's extension cache (~/.cache/torch_extensions, TORCH_EXTENSIONS_DIR moves it) with a C++ compiler and
ninja: half a minute on an idle machine, minutes on a busy one, then never again (COMPILING says so; setup.sh
builds them). Without them the optimizers keep their eager code (`fused=None` warns once;
`fused=True` is an error). The GPU kernels have been run only in Triton's interpreter so far, so on
GPU they run with `fused=True`, and with `fused=None` only on a GPU model whose measured defaults chose them
(bench/defaults.json, `optimizer.fused`; none so far); elsewhere `fused=None` keeps the eager code there.
"""

import functools
import hashlib
import logging
import sys
import warnings
from pathlib import Path

import torch

from bench.defaults import vrgd_fused
from bench.errors import BenchWarning, UserError

SOURCE = Path(__file__).with_name("csrc") / "vrgd_cpu.cpp"
# One build folder per checkout: torch's cache rebuilds a module whose source path changed, so two clones sharing
# one name would rebuild it in turn, each waiting on the other's lock.
NAME = "bench_vrgd_cpu_" + hashlib.sha1(str(SOURCE).encode()).hexdigest()[:8]
# The step kernels' per-tensor settings, one row per parameter in this column order (its param group's).
HYPER = ("lr", "weight_decay", "eta", "eps", "adapt", "clip", "momentum")
# -fno-trapping-math: comparisons may become vector selects (no code here reads floating-point traps).
FLAGS = ["-O3", "-fno-trapping-math", "-fopenmp"]
# No duration: the compile took 30 s idle and 105 s under load; what a user needs to know is that it happens once.
COMPILING = (
    "bench: compiling the fused VRGD kernel for this machine and torch version; this happens once, later runs load "
    "it from the cache ({folder})"
)


@functools.cache
def _build():
    """(the compiled module, None) or (None, why it could not be built)."""
    logger = logging.getLogger("torch.utils.cpp_extension")
    level = logger.level
    logger.setLevel(logging.ERROR)  # its "No CUDA runtime is found" warning: these kernels are CPU code
    try:
        from torch.utils.cpp_extension import _get_build_directory, load

        folder = Path(_get_build_directory(NAME, verbose=False))
        built = folder / f"{NAME}.so"
        if not built.is_file() or built.stat().st_mtime < SOURCE.stat().st_mtime:  # otherwise load() is quick
            print(COMPILING.format(folder=folder), file=sys.stderr)
        return load(NAME, [str(SOURCE)], extra_cflags=FLAGS, extra_ldflags=["-fopenmp"]), None
    except Exception as exc:  # no compiler, no ninja, a read-only cache: the eager code still works
        return None, f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
    finally:
        logger.setLevel(level)


def _dense(t: torch.Tensor) -> bool:
    """No gaps and no overlaps in memory, in any dimension order (contiguous, channels_last, ...)."""
    expected = 1
    for stride, size in sorted(zip(t.stride(), t.shape)):
        if size > 1 and stride != expected:
            return False
        expected *= size
    return True


def unsupported(params) -> str | None:
    """Why the fused kernels cannot run these parameters (None: they can)."""
    for p in params:
        if p.device.type not in ("cpu", "cuda") or p.dtype != torch.float32 or not _dense(p):
            return f"a {p.dtype} parameter on {p.device} (the fused kernels take dense fp32 CPU or CUDA tensors)"
        if p.device != params[0].device:
            return f"parameters on {params[0].device} and {p.device} (the fused kernels take one device)"
    return None


def kernels(fused, params):
    """The kernels for these parameters when `fused` (the optimizer's option: None = where possible, True,
    False) and the parameters allow, else None. fused=True where they cannot run is a UserError."""
    if fused is False:
        return None
    reason = unsupported(params)
    if reason is None and params[0].device.type == "cuda":
        # null: where this GPU model's measured defaults chose them (none has yet: only when asked for)
        return _triton() if fused or (fused is None and vrgd_fused(params[0].device)) else None
    module, failure = (None, None) if reason else _build()
    if module is not None:
        return module
    if fused:
        refuse(reason or failure)
    if failure:
        _warn_once(failure)
    return None


def _triton():
    try:
        from . import fused_triton
    except ImportError as exc:
        refuse(f"Triton cannot be imported ({exc})")
    return fused_triton


def refuse(reason: str):
    """The error for fused=true where a fused kernel cannot run, for `reason`."""
    raise UserError(
        f"optimizer hyperparameter fused=true cannot be honoured: {reason}; use fused: null (the "
        "fused kernels where they apply) or false."
    )


@functools.cache
def _warn_once(failure: str) -> None:
    warnings.warn(
        f"VRGD's fused CPU kernels could not be built ({failure}); using the eager code, "
        "which is slower and gives the same results",
        BenchWarning,
    )


def prebuild() -> None:
    """setup.sh: the CPU kernels built at setup, not in a user's first VRGD run or test; one line says how it went."""
    built, failure = _build()
    print(f"setup.sh: VRGD's fused CPU kernels {'ready' if built else f'not built ({failure}): the eager code runs'}")
