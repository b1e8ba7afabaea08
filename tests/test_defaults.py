"""bench/defaults.py: the measured defaults per GPU model that the `auto` engine keys read. A GPU model's
entry picks its candidates; an unknown GPU and the CPU run today's; a recipe that names a candidate runs it
everywhere; a damaged or invalid file is one sentence (exit 2); the matrix's write keeps the other models."""

import json

import pytest
import torch

from bench import defaults
from bench import recipe as recipes
from bench.engine import ghost_bn
from bench.engine.distributed import Dist
from bench.engine.train import Trainer
from bench.errors import UserError
from bench.recipe import EngineSpec
from tests.conftest import cli, write_recipe

H200 = {
    "engine.compile": "reduce-overhead",
    "engine.ghost_bn": {"channels_last": "batch_norm"},  # a layout left out keeps today's
    "engine.optimizer_step": "compiled",
    "optimizer.fused": True,
    "measured": "tools/gpu_check.py --matrix, a test",
}
AUTO = EngineSpec(compile="auto")  # ghost_bn and optimizer_step are auto by default; compile is false
CUDA, CPU = torch.device("cuda"), torch.device("cpu")  # no CUDA needed: gpu_model is faked below


@pytest.fixture
def measured(tmp_path, monkeypatch):
    """defaults.json listing an H200, and this machine's CUDA device (none in CI) named `gpu` in the test."""
    path = tmp_path / "defaults.json"
    path.write_text(json.dumps({"gpus": {"NVIDIA H200": H200}}))
    monkeypatch.setattr(defaults, "FILE", path)

    def on(gpu: str) -> None:
        monkeypatch.setattr(defaults, "gpu_model", lambda device: gpu if torch.device(device).type == "cuda" else None)

    on.path = path
    return on


def test_the_committed_file_is_valid():
    assert isinstance(defaults.read(), dict)  # every entry checked (none yet: no GPU has run the matrix)
    assert defaults.resolve(AUTO, CPU).as_dict() == {
        "compile": False,
        "ghost_bn": {"channels_last": "custom", "contiguous": "batch_norm"},
        "optimizer_step": "eager",
        "fused_null_on_gpu": None,
        "measured_for": None,
    }


def test_an_entry_for_a_gpu_model_picks_its_candidates(measured):
    measured("NVIDIA H200")
    chosen = defaults.resolve(AUTO, CUDA)
    assert chosen.compile == "reduce-overhead" and chosen.optimizer_step == "compiled" and chosen.fused is True
    assert (
        chosen.ghost_bn == {"channels_last": "batch_norm", "contiguous": "batch_norm"} and chosen.gpu == "NVIDIA H200"
    )
    assert defaults.vrgd_fused(CUDA) is True
    assert defaults.resolve(EngineSpec(), CUDA).compile is False  # engine.compile's default is false, not auto


def test_an_unknown_gpu_and_the_cpu_fall_back_to_todays_behaviour(measured):
    measured("NVIDIA A100-SXM4-80GB")
    for device, fused in ((CUDA, False), (CPU, None)):
        chosen = defaults.resolve(AUTO, device)
        assert chosen.compile is defaults.TODAY["engine.compile"] and chosen.optimizer_step == "eager"
        assert chosen.ghost_bn == defaults.TODAY["engine.ghost_bn"] and chosen.gpu is None and chosen.fused is fused
        assert defaults.vrgd_fused(device) is False


def test_a_recipe_naming_a_candidate_runs_it_everywhere(measured):
    measured("NVIDIA H200")
    named = EngineSpec(compile=True, ghost_bn="custom", optimizer_step="eager")
    for device in (CUDA, CPU):
        chosen = defaults.resolve(named, device)
        assert (chosen.compile, chosen.optimizer_step) == (True, "eager")
        assert chosen.ghost_bn == {"channels_last": "custom", "contiguous": "custom"}


RECIPE = """
model: {name: resnet8_cifar, bn_batch: 4}
data: {dataset: folder, path: DATA, image_size: 8, workers: 0}
global_batch: 8
micro_batch: 8
optimizer: {name: lars, lr: 0.1}
epochs: 0.1
target_top1: 50
"""


def test_the_runner_runs_the_named_candidates_and_records_them_in_meta(tmp_path, tiny_dataset):
    """On the CPU: engine.ghost_bn custom in every ghost layer, LARS's compiled update chosen (not run here: its
    compilation is tests/test_candidates.py's), and meta.json's `candidates` as resolved."""
    path = write_recipe(tmp_path / "named.yaml", RECIPE.replace("DATA", str(tiny_dataset)))
    sets = ["engine.ghost_bn=custom", "engine.optimizer_step=compiled"]
    trainer = Trainer(recipes.load(path, sets), Dist(0, 1, 0, CPU))
    assert {str(layer.impl) for layer in ghost_bn.layers(trainer.model)} == {
        str(dict.fromkeys(defaults.LAYOUTS, "custom"))
    }
    assert trainer.opt.step_path == "compiled"
    done = cli("run", str(path), "--set", "engine.ghost_bn=custom", "--out", str(tmp_path / "runs"), "--no-progress")
    assert done.returncode == 0, done.stderr
    [meta] = (tmp_path / "runs").glob("*/*/meta.json")
    assert json.loads(meta.read_text())["candidates"] == {
        "compile": False,
        "ghost_bn": {"channels_last": "custom", "contiguous": "custom"},
        "optimizer_step": "eager",
        "fused_null_on_gpu": None,
        "measured_for": None,
    }


@pytest.mark.parametrize(
    "text,words",
    [
        ('{"gpus": {"NVIDIA H200": ', r"defaults.json: not valid JSON \(Expecting value: line 1"),
        ('{"gpus": []}', r'defaults.json: expected \{"gpus": \{GPU model: \{key: candidate\}\}\} at the top level'),
        ('{"gpus": {"X": {"engine.compile": "fastest"}}}', r"'X': engine.compile: 'fastest' is not one of \(False"),
        ('{"gpus": {"X": {"engine.compile": 1}}}', r"'X': engine.compile: 1 is not one of"),
        ('{"gpus": {"X": {"engine.ghost_bn": {"nhwc": "custom"}}}}', r"engine.ghost_bn: \{'nhwc': 'custom'\} is not"),
        ('{"gpus": {"X": {"engine.speed": true}}}', r"'X': unknown key 'engine.speed'; the keys are engine.compile"),
        ('{"gpus": {"X": {"measured": 3}}}', r"'X': measured: expected a sentence saying how, got 3"),
    ],
)
def test_a_damaged_or_invalid_file_is_one_sentence(measured, text, words):
    measured.path.write_text(text)
    with pytest.raises(UserError, match=words):
        defaults.resolve(AUTO, CPU)  # read on a CPU too: a damaged file fails the CPU suite, not a GPU job


def test_a_damaged_file_stops_a_run_with_exit_code_2(measured, tmp_path, tiny_dataset):
    measured.path.write_text("{")
    path = write_recipe(tmp_path / "r.yaml", RECIPE.replace("DATA", str(tiny_dataset)))
    done = cli("run", str(path), "--out", str(tmp_path / "runs"), "--no-progress")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    [line] = [line for line in done.stderr.splitlines() if line.strip()]
    assert line.startswith("bench: error: ") and "defaults.json: not valid JSON" in line


def test_the_recipe_keys_refuse_other_candidates_in_one_sentence(tmp_path, tiny_dataset):
    path = write_recipe(tmp_path / "r.yaml", RECIPE.replace("DATA", str(tiny_dataset)))
    for key, value in (("engine.ghost_bn", "fast"), ("engine.optimizer_step", "fused"), ("engine.compile", "fastest")):
        with pytest.raises(UserError, match=key.replace(".", r"\.")):
            recipes.load(path, [f"{key}={value}"])


def test_write_puts_a_gpu_models_entry_beside_the_others_and_refuses_a_bad_one(measured):
    entry = {"engine.compile": True, "engine.optimizer_step": "eager", "measured": "a test"}
    defaults.write("NVIDIA H100 80GB HBM3", entry)
    assert defaults.read() == {"NVIDIA H200": H200, "NVIDIA H100 80GB HBM3": entry}
    before = measured.path.read_text()
    with pytest.raises(UserError, match=r"the entry for 'X': engine.optimizer_step: 'fast' is not one of"):
        defaults.write("X", {"engine.optimizer_step": "fast"})
    assert measured.path.read_text() == before  # a refused entry writes nothing
    measured.path.write_text("[")
    with pytest.raises(UserError, match="not valid JSON"):
        defaults.write("X", entry)  # a damaged file is not overwritten unseen
    assert measured.path.read_text() == "["


def test_the_candidate_keys_do_not_split_seeds():
    """Which implementation ran changes float rounding only: runs that differ in these keys alone are seeds of one
    recipe (bench/identity.py's SEED_NEUTRAL); the meta's `candidates` record is not part of a seed's identity."""
    from bench.identity import seed_key

    base = {"name": "r", "seed": 0, "engine": {"precision": "fp32"}, "optimizer": {"name": "vrgd_lars"}}
    other = json.loads(json.dumps(base))
    other["engine"] |= {"compile": "reduce-overhead", "ghost_bn": "custom", "optimizer_step": "compiled"}
    other["optimizer"]["fused"] = True
    meta = {"candidates": defaults.resolve(AUTO, CPU).as_dict()}
    assert seed_key(base, {}) == seed_key(other, meta)
