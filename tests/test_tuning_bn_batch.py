"""The tuning table's 'BatchNorm batch, groups k' column under ghost BatchNorm (model.bn_batch): found by the gap
study's preflight (recipes/sweeps/gap.yaml: resnet8_cifar with bn_batch 8 in micro-batches of 64). The column
prints the recipe's micro_batch (bench/analysis/search.py, group_text), which is BatchNorm's batch only without
model.bn_batch; with it, each micro-batch of 64 is normalised in BatchNorms of 8 images: the column says 8."""

import json

import yaml

from bench.analysis import results, tuning
from tests.helpers import make_run


def test_the_batchnorm_column_reads_the_ghost_batchnorm_batch(tmp_path):
    tags = {"sweep": "s", "arm": "vrgd_lars", "trial": 0, "study": 0, "role": "trial"}
    run = make_run(tmp_path, "s-vrgd_lars-b128-t00", "vrgd_lars", 128, 0, [50, 70], holdout=[50, 70], tags=tags)
    recipe = yaml.safe_load((run / "recipe.yaml").read_text())
    recipe.update(model={"name": "resnet8_cifar", "bn_batch": 8}, micro_batch=64)
    (run / "recipe.yaml").write_text(yaml.safe_dump(recipe, sort_keys=False))
    meta = json.loads((run / "meta.json").read_text())
    meta["plan"] = {"batch": 128, "world_size": 1, "accum_steps": 2, "micro_batch": 64, "gsnr_groups": 16}
    (run / "meta.json").write_text(json.dumps(meta))
    table = tuning.tuning(results.load_study([tmp_path]))
    [row] = table.rows
    column = row[table.columns.index("BatchNorm batch, groups k")]
    assert column == "BatchNorm batch 8, k 16 (8 images a group)"
