"""Starting many processes: torchrun on this node, or a SLURM batch job.

Both hand the work to torch.distributed.run (torchrun), the launcher PyTorch
users already know; every rank then runs `python -m bench run RECIPE ...` and
reads RANK / WORLD_SIZE / LOCAL_RANK from the environment.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from bench.engine.threads import usable_cores
from bench.errors import OutOfSpace, UserError

GRACE_S = 100  # seconds the workers get, after a SIGTERM, to finish their step and checkpoint
# torchrun's SIGTERM-to-SIGKILL wait (default 30 s), as its environment variable: torch's --shutdown-timeout flag
# came in 2026 (pytorch#172596) and older torchruns refuse it; they ignore the variable and keep their 30 s
SHUTDOWN_TIMEOUT = ("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", str(GRACE_S))
EARLY_SIGNAL_S = 120  # SLURM's SIGUSR1 this long before the time limit: the grace and some margin
# SIGUSR1 (only SLURM's time-limit warning sends it) means "checkpoint and requeue"; SIGTERM (scancel, a
# preemption) means "checkpoint and end": a cancelled job must stay cancelled, and SLURM requeues a preempted
# job itself where its PreemptMode says so. The convention of Lightning's and submitit's SLURM support.
_REQUEUE = ["#SBATCH --open-mode=append", f"#SBATCH --signal=B:USR1@{EARLY_SIGNAL_S}", "#SBATCH --requeue"]


class Stopped(Exception):
    """The launcher was told to stop (SIGTERM, SIGINT); it passed the signal on and waited for the workers."""


def run_local(nproc: int, bench_args: list[str], max_restarts: int = 0) -> int:
    """`torchrun --standalone --nproc-per-node N -m bench ARGS` in this process."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    # torchrun would give each worker 1 thread; engine.threads: auto divides the cores between them itself
    os.environ.setdefault("OMP_NUM_THREADS", str(usable_cores()))
    os.environ.setdefault(*SHUTDOWN_TIMEOUT)

    args = parse_args(
        [
            "--standalone",
            f"--nproc-per-node={nproc}",
            f"--max-restarts={max_restarts}",
            "-m",
            "bench",
            *bench_args,
        ]
    )
    try:
        run(args)
    except ChildFailedError as e:
        return _report(e.failures)
    except SignalException as e:
        raise Stopped(signal.Signals(e.sigval).name) from None
    return 0


def _report(failures: dict) -> int:
    """Each distinct worker message once, with its ranks; the workers' exit code when they agree (a worker
    torchrun stopped with a signal after another failed has no say)."""
    by_message: dict[str, list[int]] = {}
    codes = set()
    for rank, failure in sorted(failures.items()):
        replied = Path(failure.error_file).is_file()  # bench.cli.fail wrote its sentence and exit code there
        message = failure.message if replied else f"exit code {failure.exitcode}; see its output above"
        by_message.setdefault(message, []).append(rank)
        if replied:
            codes.add(failure.error_file_data.get("exit_code", failure.exitcode))
        elif failure.exitcode > 0:  # not a worker torchrun stopped with a signal after another failed
            codes.add(failure.exitcode)
    for message, ranks in by_message.items():
        print(
            f"bench: error: {message} (rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))})",
            file=sys.stderr,
        )
    return codes.pop() if len(codes) == 1 and codes <= {2, OutOfSpace.exit_code} else 1


@dataclass(frozen=True)
class Slurm:
    """What a cluster asks of a batch job beside its shape: `bench submit`'s --partition, --time, --account,
    --qos, --mem, --constraint, --exclusive, and any other #SBATCH option as given (--sbatch)."""

    partition: str | None = None
    time: str | None = None
    account: str | None = None
    qos: str | None = None
    mem: str | None = None
    constraint: str | None = None
    exclusive: bool = False
    extra: tuple[str, ...] = ()

    def lines(self) -> list[str]:
        named = [
            f"#SBATCH --{key}={value}"
            for key, value in (
                ("partition", self.partition),
                ("time", self.time),
                ("account", self.account),
                ("qos", self.qos),
                ("mem", self.mem),
                ("constraint", self.constraint),
            )
            if value
        ]
        return (
            named
            + (["#SBATCH --exclusive"] if self.exclusive else [])
            + [f"#SBATCH {option if option.startswith('-') else '--' + option}" for option in self.extra]
        )


def _header(job_name: str, shape: list[str], output: str, slurm: Slurm) -> list[str]:
    """The #SBATCH lines of every bench job: name, shape, log file, SIGUSR1 and requeue, the cluster's options."""
    return [
        "#!/bin/bash",
        f"#SBATCH --job-name={job_name}",
        *shape,
        f"#SBATCH --output={output}",
        *_REQUEUE,
        *slurm.lines(),
    ]


# srun since Slurm 22.05 no longer takes the job's --cpus-per-task from SLURM_CPUS_PER_TASK: without it a node's
# torchrun, its workers and their loader threads may share one core (the 22.05 release notes: pass it to srun)
SRUN = 'srun --cpus-per-task="$SLURM_CPUS_PER_TASK"'

# The rendezvous port from the job id (as Lightning does): two jobs sharing a node do not collide on 29500.
PORT = "MASTER_PORT=$(( 10000 + SLURM_JOB_ID % 20000 ))"


def sbatch_script(
    bench_args: list[str],
    nodes: int,
    gpus_per_node: int,
    slurm: Slurm,
    job_name: str,
    workdir: Path,
    workers_per_node: int | None = None,
    cpus_per_worker: int = 8,
    notes: tuple[str, ...] = (),
) -> str:
    """A batch script: one srun task per node, each starting torchrun with a c10d rendezvous, for
    `workers_per_node` workers (default: one per GPU); gpus_per_node 0 asks for CPU nodes (gloo). `notes`: comment
    lines after the #SBATCH ones (bench submit: the batch plan).

    SLURM sends the script SIGUSR1 EARLY_SIGNAL_S before the time limit; the script has SLURM send SIGTERM to
    the step's processes (torchrun and the workers), which finish their step, checkpoint and end "preempted";
    then the script requeues the job, which resumes the run. scancel's SIGTERM takes the same path without the
    requeue."""
    workers = workers_per_node or gpus_per_node or 1
    shape = [
        f"#SBATCH --nodes={nodes}",
        "#SBATCH --ntasks-per-node=1",
        *([f"#SBATCH --gpus-per-node={gpus_per_node}"] if gpus_per_node else []),
        f"#SBATCH --cpus-per-task={cpus_per_worker * workers}",
    ]
    lines = _header(job_name, shape, f"{workdir}/slurm-%j.out", slurm) + [f"# {note}" for note in notes]
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nnodes={nodes}",
        f"--nproc-per-node={workers}",
        "--rdzv-backend=c10d",
        '--rdzv-endpoint="$MASTER_ADDR:$MASTER_PORT"',
        '--rdzv-id="$SLURM_JOB_ID"',
        "-m",
        "bench",
        *bench_args,
    ]
    srun = f"{SRUN} " + " ".join(c if c.startswith("--rdzv") else shlex.quote(c) for c in command)
    lines += _body(
        workdir,
        srun,
        'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        PORT,
        f"export OMP_NUM_THREADS={cpus_per_worker}  # torchrun's default would be 1 per worker",
        "export {}={}  # the workers' time to checkpoint after a SIGTERM".format(*SHUTDOWN_TIMEOUT),
    )
    return "\n".join(lines) + "\n"


def _body(workdir: Path, srun: str, *setup: str) -> list[str]:
    """Run the step in the background, so the script's traps can pass a signal on as SIGTERM and wait for
    the checkpoint; a job stopped by SIGUSR1 (the time limit is near) is requeued and resumes.

    The SIGTERM goes through scancel, not to srun: srun answers a SIGTERM by SIGKILLing its tasks ("forcing
    job termination"), which would lose every step since the last checkpoint. `scancel --signal` reaches every
    process of the job's steps on every node, not the batch script; a job already being cancelled has had its
    SIGTERM, and scancel's refusal then is harmless."""
    return [
        "set -uo pipefail",
        f"cd {shlex.quote(str(workdir))} || exit 1",
        *setup,
        "stopped=",
        srun + " &",
        "step=$!",
        """terminate_steps() { scancel --signal=TERM "$SLURM_JOB_ID" 2>/dev/null || true; }""",
        """trap 'stopped=requeue; echo "bench: SIGUSR1 (time limit near): the workers checkpoint, then the job is """
        """requeued"; terminate_steps' USR1""",
        """trap 'stopped=end; echo "bench: SIGTERM: the workers checkpoint; the job ends (not requeued)"; """
        """terminate_steps' TERM""",
        'wait "$step"; rc=$?',
        'if [ -n "$stopped" ]; then',
        '    wait "$step"; rc=$?  # the workers finish their step and checkpoint (torchrun then exits non-zero)',
        "fi",
        'if [ "$stopped" = requeue ]; then',
        '    scontrol requeue "$SLURM_JOB_ID" && rc=0  # the requeued job resumes from the newest checkpoint',
        "fi",
        'exit "$rc"',
    ]


def sbatch_array_script(
    bench_args: list[str],
    tasks: int,
    slurm: Slurm,
    job_name: str,
    workdir: Path,
    gpus: int = 1,
    cpus: int = 8,
    notes: tuple[str, ...] = (),
) -> str:
    """A job array of `tasks` workers of `gpus` GPUs (1, or 0 on CPU nodes), each `python -m bench ARGS`
    (bench sweep: every worker claims the next trial nobody holds, by claim files in the run directories, so the
    array shares one sweep; a worker with nothing left to claim ends)."""
    shape = [
        f"#SBATCH --array=0-{tasks - 1}",
        "#SBATCH --nodes=1",
        "#SBATCH --ntasks=1",
        *([f"#SBATCH --gpus-per-node={gpus}"] if gpus else []),
        f"#SBATCH --cpus-per-task={cpus}",
    ]
    lines = _header(job_name, shape, f"{workdir}/slurm-%A_%a.out", slurm) + [f"# {note}" for note in notes]
    lines += _body(workdir, f"{SRUN} " + " ".join(shlex.quote(c) for c in [sys.executable, "-m", "bench", *bench_args]))
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
