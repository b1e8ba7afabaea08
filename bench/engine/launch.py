"""Starting many processes: torchrun on this node, or a SLURM batch job.

Both hand the work to torch.distributed.run (torchrun), the launcher PyTorch
users already know; every rank then runs `python -m bench run RECIPE ...` and
reads RANK / WORLD_SIZE / LOCAL_RANK from the environment.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from bench.errors import UserError


def run_local(nproc: int, bench_args: list[str], max_restarts: int = 0) -> int:
    """`torchrun --standalone --nproc-per-node N -m bench ARGS` in this process."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    args = parse_args(["--standalone", f"--nproc-per-node={nproc}", f"--max-restarts={max_restarts}",
                       "-m", "bench", *bench_args])
    try:
        run(args)
    except ChildFailedError as e:
        failures = "; ".join(f"rank {rank}: exit code {f.exitcode}" for rank, f in e.failures.items())
        print(f"bench: {nproc} workers under torchrun failed ({failures}); see the output above", file=sys.stderr)
        return 1
    return 0


def sbatch_script(bench_args: list[str], nodes: int, gpus_per_node: int, partition: str | None,
                  time_limit: str | None, job_name: str, workdir: Path) -> str:
    """A batch script: one srun task per node, each starting torchrun with a c10d rendezvous."""
    lines = ["#!/bin/bash", f"#SBATCH --job-name={job_name}", f"#SBATCH --nodes={nodes}",
             "#SBATCH --ntasks-per-node=1", f"#SBATCH --gpus-per-node={gpus_per_node}",
             f"#SBATCH --cpus-per-task={max(8, 8 * gpus_per_node)}",
             f"#SBATCH --output={workdir}/slurm-%j.out"]
    if partition:
        lines.append(f"#SBATCH --partition={partition}")
    if time_limit:
        lines.append(f"#SBATCH --time={time_limit}")
    command = [sys.executable, "-m", "torch.distributed.run", f"--nnodes={nodes}",
               f"--nproc-per-node={gpus_per_node}", "--rdzv-backend=c10d",
               '--rdzv-endpoint="$MASTER_ADDR:29500"', '--rdzv-id="$SLURM_JOB_ID"', "-m", "bench", *bench_args]
    lines += [
        "set -euo pipefail",
        f"cd {shlex.quote(str(workdir))}",
        'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        "srun " + " ".join(c if c.startswith("--rdzv") else shlex.quote(c) for c in command),
    ]
    return "\n".join(lines) + "\n"


def sbatch_array_script(bench_args: list[str], tasks: int, partition: str | None, time_limit: str | None,
                        job_name: str, workdir: Path) -> str:
    """A job array of `tasks` single-GPU workers, each `python -m bench ARGS` (bench sweep: every worker
    claims the next trial nobody holds, by the run directories' locks, so the array shares one sweep)."""
    lines = ["#!/bin/bash", f"#SBATCH --job-name={job_name}", f"#SBATCH --array=0-{tasks - 1}", "#SBATCH --nodes=1",
             "#SBATCH --ntasks=1", "#SBATCH --gpus-per-node=1", "#SBATCH --cpus-per-task=8",
             f"#SBATCH --output={workdir}/slurm-%A_%a.out"]
    if partition:
        lines.append(f"#SBATCH --partition={partition}")
    if time_limit:
        lines.append(f"#SBATCH --time={time_limit}")
    lines += ["set -euo pipefail", f"cd {shlex.quote(str(workdir))}",
              "srun " + " ".join(shlex.quote(c) for c in [sys.executable, "-m", "bench", *bench_args])]
    return "\n".join(lines) + "\n"


def submit(script: str, path: Path) -> str:
    """Write the script and hand it to sbatch; returns sbatch's answer."""
    sbatch = shutil.which("sbatch")
    if sbatch is None:
        raise UserError("sbatch not found on PATH: run `bench submit` on a SLURM login node, or use --dry-run")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(script)
    done = subprocess.run([sbatch, str(path)], capture_output=True, text=True)
    if done.returncode:
        raise UserError(f"sbatch refused {path}: {done.stderr.strip()}")
    return done.stdout.strip()
