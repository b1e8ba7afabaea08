"""How large a micro-batch fits: `micro_batch: auto` takes the largest divisor of a group that fits the device.

A probe runs the model's forward pass on 2 images at the recipe's image size and precision and counts the
bytes autograd saves for the backward pass (torch.autograd.graph.saved_tensors_hooks; each storage once):
the activation memory per image, the part of a step that grows with the micro-batch. The micro-batch may use
FRACTION of the memory free on the device (CUDA: torch.cuda.mem_get_info; CPU: MemAvailable, and a cgroup
limit where one is set): the rest is headroom for the backward pass's own buffers, the gradients, the
optimizer and the allocator. ResNet-50 at 224 px in fp32 saves about 130 MB an image: with 21 GB free on a
24 GB CPU machine at most 81 fit, so auto takes 64 of a 256 batch there, not the 256 the kernel killed.
"""

from __future__ import annotations

import math
from pathlib import Path

FRACTION = 0.5
PROBE = 2


def saved_bytes_per_image(model, image_size: int, device, dtype) -> float:
    """Bytes autograd keeps for backward per image (forward of PROBE images, each storage counted once). The model
    is left as it was found: its mode, and its buffers (BatchNorm's running statistics, which the training-mode
    forward moves), so the probed model is the one a run trains."""
    import torch

    seen: dict[int, int] = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
        return tensor

    images = torch.randn(PROBE, 3, image_size, image_size, device=device, dtype=dtype)
    was_training = model.training
    buffers = [(b, b.clone()) for b in model.buffers()]
    model.train()
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model(images)
    finally:
        model.train(was_training)
        with torch.no_grad():
            for buffer, before in buffers:
                buffer.copy_(before)
    return sum(seen.values()) / PROBE


def _cgroup_limit() -> float:
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
            if text.isdigit():
                return float(text)
        except OSError:
            continue
    return math.inf


def free_bytes(device) -> float:
    """Memory free on the device for a run to use."""
    import torch

    if device.type == "cuda":
        return float(torch.cuda.mem_get_info(device)[0])
    try:
        meminfo = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
        available = float(meminfo["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return math.inf
    return min(available, _cgroup_limit())


def micro_batch_cap(
    model, image_size: int, device, dtype, ranks_here: int = 1, group_images: int | None = None
) -> tuple[int, float, float]:
    """(the largest micro-batch whose activations fit, bytes an image, bytes free per rank on this machine).
    `group_images`: the batched groups pass (group_pass.py) holds each group's gradient as well, one copy of the
    parameters per group of that many images: their share is added to each image's bytes."""
    per_image = saved_bytes_per_image(model, image_size, device, dtype)
    if group_images:
        per_image += sum(p.numel() * p.element_size() for p in model.parameters()) / group_images
    free = free_bytes(device) / (ranks_here if device.type == "cpu" else 1)  # CPU ranks share the memory
    if not math.isfinite(free) or per_image <= 0:
        return 2**31, per_image, free
    return int(FRACTION * free // per_image), per_image, free
