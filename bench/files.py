"""Writing files and folders whole: a crash or a full disk never leaves one half-written (a temporary beside the
target, then a rename), and what is written gets the mode open() and mkdir() would give under the umask.

The lowest layer of writing: the run directory (bench/rundir.py), checkpoints, the analysis's tables and
figures and the datasets bench writes (bench/data/) all use it.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from bench.errors import OutOfSpace


@contextlib.contextmanager
def writing(path: Path):
    """Turn a full disk or quota while writing `path` into OutOfSpace, naming the file."""
    try:
        yield
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise OutOfSpace(f"{path}: {e.strerror.lower()} while writing it") from None
        raise


@functools.cache
def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: Path, data: bytes | str, before_rename=lambda: None) -> None:
    """Write `data` to a temporary file beside `path`, then rename it over `path`. The file gets the mode
    open() would give (0666 less the umask; mkstemp's 0600 would hide results from a lab group)."""
    path = Path(path)
    with writing(path):
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            os.fchmod(fd, 0o666 & ~current_umask())
            with os.fdopen(fd, "wb") as f:
                f.write(data.encode() if isinstance(data, str) else data)
                f.flush()
                os.fsync(f.fileno())
            before_rename()
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def write_atomically(out: Path, fill: Callable[[Path], None]) -> Path:
    """Run `fill(tmp)` on a fresh temporary folder, then rename it to `out`: a crash leaves nothing half-written."""
    out = Path(out)
    if out.exists():
        raise FileExistsError(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        os.chmod(tmp, 0o777 & ~current_umask())  # as mkdir would (mkdtemp's 0700 would hide the data from a lab group)
        fill(tmp)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
