"""Optimizers other libraries maintain (torch, timm, schedulefree, pytorch-optimizer) behind bench's group interface.

One adapter serves any torch.optim.Optimizer subclass: `adapt(record)` builds, from its catalog record, a
`Library` subclass whose `library` is that class. Its options are the library class's keyword arguments (the
record's `options` list them, tests/test_catalog.py holds them to the signature), the exclusion groups are param
groups passed to the library as they are (weight_decay 0; `adapt` is bench's own key, which the libraries carry
along and never read), and state_dict() is the library's own. `VRGDLibrary` puts VRGD's GSNR scaling of the
averaged gradient before the library's step: `vrgd_nadamw` is NAdamW's own step on g_vr = r * g_bar.
"""

import functools

import torch

from bench import catalog

from .base import GroupOptimizer
from .vrgd import VRGD


class Library(GroupOptimizer):
    """A library's optimizer on the step's mean gradient: step() divides p.grad (the sum of the observed groups)
    by their count and calls the library's own step() (no observe(): p.grad as it is, an ordinary optimizer).

    The library optimizer is `self.inner`; its param groups and state are this optimizer's (the same objects), so
    the runner's group["lr"] reaches it, and state_dict()/load_state_dict() are the library's. Schedule-Free's
    evaluation weights: eval()/train() (`swaps_weights`; the runner's evaluation_weights, bench/engine/train.py).
    bench's own per-parameter state (VRGD's GSNR momentum) is kept apart, under "bench_state", so the library never
    finds keys it did not write in its state.
    """

    library: type = torch.optim.Optimizer  # the library's class (adapt() sets it)
    record: str = ""  # the catalog record's name
    presets: dict = {}  # bench's defaults where they differ from the library's (the record's)

    def __init__(self, params, lr, weight_decay=0.0, **options):
        self.inner = self.library(params, lr=lr, weight_decay=weight_decay, **options)
        super().__init__(self.inner.param_groups, {})
        self._own: dict[str, dict[int, torch.Tensor]] = {}  # key -> parameter index -> tensor (bench's state)
        self._link()
        if self.swaps_weights:
            self.inner.train()  # Schedule-Free starts in evaluation mode: its step refuses to run there

    def _link(self) -> None:
        """Share the library optimizer's param groups, state and defaults (again after it loads a state_dict)."""
        self.param_groups, self.state, self.defaults = self.inner.param_groups, self.inner.state, self.inner.defaults

    def _apply(self) -> None:
        for group, params, grads in self._gradients():
            for p, g in zip(params, grads):
                p.grad = g  # the mean gradient, or VRGD's g_vr: what the library's step reads
        self.inner.step()

    def _state(self, params, key, dtype=None):
        index = {p: i for i, p in enumerate(p for group in self.param_groups for p in group["params"])}
        store = self._own.setdefault(key, {})
        for p in params:
            if index[p] not in store:
                store[index[p]] = torch.zeros_like(p, dtype=dtype, memory_format=torch.preserve_format)
        return [store[index[p]] for p in params]

    def state_dict(self):
        saved = self.inner.state_dict()
        return {**saved, "bench_state": self._own} if self._own else saved

    def load_state_dict(self, state_dict):
        state_dict = dict(state_dict)
        own = state_dict.pop("bench_state", {})
        self.inner.load_state_dict(state_dict)
        self._link()
        params = [p for group in self.param_groups for p in group["params"]]
        self._own = {key: {i: t.to(params[i].device) for i, t in tensors.items()} for key, tensors in own.items()}

    def eval(self) -> None:
        """Schedule-Free: the parameters become the evaluation weights x (the library's eval())."""
        self.inner.eval()

    def train(self) -> None:
        """Schedule-Free: back to the training iterate y (the library's train())."""
        self.inner.train()


class VRGDLibrary(VRGD, Library):
    """VRGD over a library's update: the GSNR factors scale the averaged gradient, g_vr = r * g_bar (vrgd.py), and
    the library's own step() takes g_vr as p.grad. GSNR momentum off by default (beta3 = 0; OPEN: the paper
    names it for Adam and LAMB only, and a library's Adam moments already average over steps)."""


def adapt(record: catalog.Optimizer) -> type:
    """The bench optimizer class of a library record: the adapter its target names over the library's class, with
    the record's presets as defaults. One sentence (UserError) when the library's package is not installed."""
    return _adapt(record.name)


@functools.cache
def _adapt(name: str) -> type:
    record = catalog.OPTIMIZERS[name]
    library = record.load_library()
    adapter = catalog.resolve(record.target)
    presets = dict(record.presets)

    def __init__(self, params, lr, weight_decay=0.0, **options):
        adapter.__init__(self, params, lr=lr, weight_decay=weight_decay, **{**presets, **options})

    return type(
        record.display.replace(" ", "").replace("-", "").replace("(", "").replace(")", ""),
        (adapter,),
        {
            "__init__": __init__,
            "__module__": __name__,
            "__doc__": f"{record.display}: {record.library} behind bench's group interface ({adapter.__name__}).",
            "library": library,
            "record": record.name,
            "presets": presets,
            "swaps_weights": callable(getattr(library, "eval", None)),
        },
    )
