"""A researcher's own data, run by run: a second run of a finished recipe is announced, finished runs give
their disk back (keep_final, bench clean), and the analysis works without checkpoints."""

import json

import pytest

from bench.cli import main
from tests.conftest import write_recipe

RECIPE = """
name: tiny
model: {{name: resnet10t}}
data: {{dataset: folder, path: {data}, image_size: 32, workers: 1}}
global_batch: 32
micro_batch: 16
optimizer: {{name: sgd, lr: 0.1, momentum: 0.9}}
epochs: 2
eval: {{every_epochs: 1}}
checkpoint: {{keep_final: {keep}}}
target_top1: 30
"""


@pytest.mark.slow
def test_finished_runs_keep_their_final_checkpoint_or_none_and_clean_frees_the_rest(tiny_dataset, tmp_path, capsys):
    out = tmp_path / "results"
    path = write_recipe(tmp_path / "tiny.yaml", RECIPE.format(data=tiny_dataset, keep="true"))
    assert main(["run", str(path), "--out", str(out), "--no-progress"]) == 0
    [first] = (out / "tiny").iterdir()
    assert [p.name for p in first.glob("ckpt-*.pt")] == ["ckpt-000000010.pt"]  # 160 images / 32 = 5 steps an epoch
    capsys.readouterr()
    # the same recipe again: said, then a second run of the seed (timm's and torchrun's users expect a run)
    assert main(["run", str(path), "--out", str(out), "--no-progress"]) == 0
    said = capsys.readouterr().out
    assert f"tiny with seed 0 completed in {first}; this starts another run of the same seed" in said
    assert len(list((out / "tiny").iterdir())) == 2
    # keep_final: false leaves none
    none = write_recipe(
        tmp_path / "none.yaml", RECIPE.format(data=tiny_dataset, keep="false").replace("name: tiny", "name: bare")
    )
    assert main(["run", str(none), "--out", str(out), "--no-progress"]) == 0
    [bare] = (out / "bare").iterdir()
    assert not list(bare.glob("ckpt-*")) and json.loads((bare / "meta.json").read_text())["status"] == "completed"
    # an unfinished run keeps its checkpoints: clean leaves it alone
    meta = json.loads((first / "meta.json").read_text())
    (first / "meta.json").write_text(json.dumps({**meta, "status": "preempted"}))
    capsys.readouterr()
    assert main(["clean", str(out)]) == 0
    said = capsys.readouterr().out
    assert "removed the checkpoints of 1 finished run:" in said and "MiB freed" in said
    assert list(first.glob("ckpt-*.pt")) and not [
        p for run in (out / "tiny").iterdir() if run != first for p in run.glob("ckpt-*")
    ]
    (first / "meta.json").write_text(json.dumps(meta))
    assert main(["clean", str(out), "--keep-final"]) == 0 and list(first.glob("ckpt-*.pt"))
    assert "0 finished runs" in capsys.readouterr().out
    # the analysis needs no checkpoint
    assert main(["clean", str(out)]) == 0 and not list(out.rglob("ckpt-*"))
    for command in (
        ["report", str(out)],
        ["table", "compare", str(out)],
        ["plot", str(out), "--out", str(tmp_path / "plots")],
    ):
        assert main(command) == 0, command
    assert list((tmp_path / "plots").glob("*.png"))
    assert main(["clean", str(tmp_path / "nowhere")]) == 2
