"""Process-group setup from the torchrun environment (RANK, WORLD_SIZE, LOCAL_RANK).

One process without those variables is world size 1 and needs no process
group. Under torchrun, on one node or many: nccl on GPUs, gloo on CPUs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Dist:
    rank: int
    world: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init() -> Dist:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if world > 1 and not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT")
        if attempt is None or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
            dist.init_process_group(backend)  # rank 0 hosts a new store each attempt
        else:
            # torchrun's agent hosts the store and it outlives restarted workers: keep each attempt's
            # keys apart, or a restarted rank can read a dead worker's address and fail to connect.
            store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, is_master=False)
            dist.init_process_group(
                backend, store=dist.PrefixStore(f"bench/attempt-{attempt}", store), rank=rank, world_size=world
            )
    return Dist(rank, world, local_rank, device)


def shutdown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def max_over_ranks(value: float) -> float:
    """AlgoPerf's training time: the slowest rank's."""
    if not dist.is_initialized():
        return value
    t = torch.tensor([value], dtype=torch.float64)
    if dist.get_backend() == "nccl":
        t = t.cuda()
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def average_buffers(module: torch.nn.Module) -> None:
    """Each floating-point buffer (BatchNorm's running statistics) replaced by its mean over the ranks, one
    all-reduce a dtype. Each rank's micro-batches move its own statistics: unaveraged, the ranks would evaluate
    different models and rank 0 would checkpoint a third (timm's distribute_bn with reduce, here at every step)."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return
    by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
    for b in module.buffers():
        if b.is_floating_point():
            by_dtype.setdefault(b.dtype, []).append(b)
    with torch.no_grad():
        for tensors in by_dtype.values():
            flat = torch.cat([t.reshape(-1) for t in tensors])
            dist.all_reduce(flat)
            flat.div_(dist.get_world_size())
            for t, mean in zip(tensors, flat.split([t.numel() for t in tensors])):
                t.copy_(mean.view_as(t))
