"""Data behind one interface, whatever the backend: `build()` and `Data` (pipeline.py), the loaders
(loaders.py), the layouts (folder.py), sampling and crops (sampling.py, augment.py), the datasets bench
generates or converts (synthetic, digits, cifar, idx) and the check of a recipe's data (check.py); `bench data`
is bench/commands/data.py.

The names of pipeline.py are re-exported lazily, so importing this package (for `bench data`, `bench
--version`, the analysis) does not import torch until a pipeline is asked for.
"""

PIPELINE = ("Data", "build", "dali_available", "default_device", "resolve_loader", "resolve_root", "scan")


def __getattr__(name: str):
    if name in PIPELINE:
        from bench.data import pipeline

        return getattr(pipeline, name)
    raise AttributeError(f"module 'bench.data' has no attribute {name!r}")
