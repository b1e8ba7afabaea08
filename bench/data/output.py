"""What every backend's batches look like, and the options that shape them.

A batch is ``(images, labels)``: images (N, 3, size, size) normalised with the
ImageNet mean and std, in `dtype` (float32 or bfloat16), NCHW-contiguous or
channels_last; labels int64 (N,). N is the micro-batch (or eval batch) less any
unreadable files dropped from it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class Options:
    size: int
    crop_scale_min: float = 0.08
    random_flip: bool = True
    workers: int = 2
    dtype: str = "float32"
    channels_last: bool = False
    augment: str = "resized_crop"  # or "pad_crop" (augment.py)
    pad: int = 4

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def memory_format(self) -> torch.memory_format:
        return torch.channels_last if self.channels_last else torch.contiguous_format

    def finish(self, images: torch.Tensor, copy: bool = False) -> torch.Tensor:
        """The batch in this dtype and memory format (copied only when needed, or when `copy`)."""
        return images.to(dtype=self.torch_dtype, memory_format=self.memory_format, copy=copy)
