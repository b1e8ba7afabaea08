"""tools/gpu_check.py, the one-call GPU check, rehearsed on the CPU so it does not rot before a GPU runs it:
the same script and steps with tiny sizes, CUDA-only steps skipped, the report's structure and figures checked."""

import base64
import hashlib
import importlib.util
import json
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tools" / "gpu_check.py"
spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
gpu_check = sys.modules["gpu_check"] = importlib.util.module_from_spec(spec)  # dataclasses look it up there
spec.loader.exec_module(gpu_check)
NAMES = [name for name, *_ in gpu_check.STEPS]
CUDA_ONLY = {name for name, _, _, cuda_only, _ in gpu_check.STEPS if cuda_only}


def probe_wheel(folder: Path, body: str = "VALUE = 1\n") -> Path:
    """A minimal pure-Python wheel (PEP 427) of a distribution no environment has: gpu-check-probe 1.0."""
    files = {
        "gpu_check_probe/__init__.py": body,
        "gpu_check_probe-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: gpu-check-probe\nVersion: 1.0\n",
        "gpu_check_probe-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    digest = {
        k: base64.urlsafe_b64encode(hashlib.sha256(v.encode()).digest()).rstrip(b"=").decode() for k, v in files.items()
    }
    record = "".join(f"{k},sha256={digest[k]},{len(v.encode())}\n" for k, v in files.items())
    folder.mkdir(exist_ok=True)
    wheel = folder / "gpu_check_probe-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for name, text in {
            **files,
            "gpu_check_probe-1.0.dist-info/RECORD": record + "gpu_check_probe-1.0.dist-info/RECORD,,\n",
        }.items():
            z.writestr(name, text)
    return wheel


def check(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, str]:
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out), "--device", "cpu", "--tiny", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    return done, (out / gpu_check.REPORT).read_text()


def rows(report: str) -> dict[str, str]:
    """step -> result, from the report's table."""
    return {m[1]: m[2] for m in re.finditer(r"^\| ([\w-]+) \| [^|]+ \| ([^|]+) \| \d+ \|$", report, re.M)}


def section(report: str, name: str) -> str:
    return re.search(rf"^## {name}: .*?(?=^## |\Z)", report, re.M | re.S)[0]


# The rehearsal in parts that run side by side (all of it in one call is minutes of one core's time), each under
# 30 s with the rest of the suite on 2 cores; every step is in one part (the next test)
PARTS = [
    ["install", "environment", "imports"],
    ["gpu-tests", "perf-train"],
    ["perf-train-compile", "perf-ghost-bn", "perf-optim"],
    ["train-resume"],
    ["torchrun", "dali"],
]


@pytest.mark.slow
@pytest.mark.parametrize("part", PARTS, ids=lambda names: "-to-".join(dict.fromkeys([names[0], names[-1]])))
def test_the_cpu_rehearsal_runs_every_step_and_reports_each_with_its_figures(tmp_path, part):
    wheels = str(probe_wheel(tmp_path / "wheels").parent)
    done, report = check(tmp_path, "--wheels", wheels, "--budget", "1500", "--only", ",".join(part))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = rows(report)
    assert list(results) == part
    for name in part:
        if name in CUDA_ONLY:
            assert results[name] == "skipped: no CUDA", name
        else:
            assert results[name].startswith("ok"), (name, section(report, name))
    assert (tmp_path / "out" / gpu_check.LOG).stat().st_size > len(report) / 2  # every step's whole output
    if "environment" in part:
        assert f"- torch: {torch.__version__}" in report and "- bench's torch floor: 2.4" in report
    if "install" in part:
        assert "installed: gpu-check-probe 1.0" in section(report, "install")  # the later steps' Python sees it
    if "gpu-tests" in part:
        skipped = re.fullmatch(r"ok: (\d+) skipped in [\d.]+s", results["gpu-tests"])  # test_gpu.py: all need CUDA
        assert skipped and int(skipped[1]) >= 6, results["gpu-tests"]
    if "perf-train" in part:
        train = section(report, "perf-train")
        assert "--model resnet8_cifar" in train and "--channels-last" in train and "--compile" not in train
        assert float(re.search(r"^bare loop \(torch SGD, random tensors\)\s+([\d,.]+)", train, re.M)[1]) > 0
        assert re.search(r"^bench runner, torchvision loader\s+[\d,.]+\s+[\d.]+", train, re.M)
    if "perf-ghost-bn" in part:  # issue 66's first row: ghost against torch's BatchNorm, in the bare loop
        ghost = section(report, "perf-ghost-bn")
        assert re.search(r"^ghost BatchNorm's cost, bare loop: ghost BN 2 in 8 takes [\d.]+ x the time", ghost, re.M)
    if "perf-optim" in part:
        assert re.search(r"^bench LARS step\s+[\d.]+\s+[\d.]+", section(report, "perf-optim"), re.M)
    if "train-resume" in part:
        resumed = section(report, "train-resume")
        assert "$ BENCH_CRASH_AT=step:4 python -m bench run recipes/demo-sgd.yaml" in resumed
        assert re.search(r'^run: status "completed", device "cpu", world_size 1, .*resumed_at \[3\]$', resumed, re.M)
    if "torchrun" in part:
        one_rank = re.search(
            r'^run: status "completed", device "cpu", world_size 1, .*$', section(report, "torchrun"), re.M
        )
        assert "val_size 8, evaluated_images 8," in one_rank[0]  # 4 classes x 2 images, each evaluated once


def test_the_parts_are_every_step_in_order():
    assert sum(PARTS, []) == NAMES


def test_a_failed_step_reports_its_first_error_line_and_the_next_step_still_runs(tmp_path):
    broken = tmp_path / "wheels"
    probe_wheel(broken).write_bytes(b"not a zip file")
    done, report = check(tmp_path, "--wheels", str(broken), "--only", "install,environment")
    assert done.returncode == 1
    results = rows(report)
    assert results == {"install": "FAILED", "environment": "ok"}
    assert re.search(r"^First error line: `exit code 1: .+`$", section(report, "install"), re.M)


def test_a_step_past_its_time_is_killed_with_its_children_and_reported(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_check, "MIN_STEP_S", 0)
    args = gpu_check.argparse.Namespace(out=str(tmp_path), device="cpu", tiny=True, budget=1, wheels=tmp_path)
    checker = gpu_check.Checker(args)
    step = gpu_check.Step("sleepy", "a step that outlives the budget", 60)
    marker = tmp_path / "child-survived"
    start = time.monotonic()
    checker.run(step, lambda s: checker.sh(s, ["bash", "-c", f"(sleep 5; touch {marker}) & sleep 30"]))
    assert step.status.startswith("TIMEOUT after")  # not the sleep's own end, 30 s on
    time.sleep(max(0.0, 6 - (time.monotonic() - start)))  # past the child's 5 s, however loaded the machine
    assert not marker.exists()  # the process group went with it: torchrun's workers would too


# ----- --matrix: the candidate matrix (bench/perf/matrix.py), rehearsed the same way -----

MATRIX_NAMES = [name for name, *_ in gpu_check.MATRIX_STEPS]


@pytest.mark.slow
def test_the_matrix_rehearsal_measures_every_candidate_and_writes_the_table_and_the_proposal(tmp_path):
    """`--matrix --device cpu --tiny`: every row's candidates measured side by side (none failed), each of issue 85's
    rows in matrix.md with a figure, a proposal beside the report, and bench/defaults.json untouched."""
    from bench import defaults
    from bench.perf import matrix

    committed = defaults.FILE.read_bytes()
    wheels = str(probe_wheel(tmp_path / "wheels").parent)
    done, report = check(tmp_path, "--matrix", "--wheels", wheels, "--budget", "1500")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = rows(report)
    assert list(results) == MATRIX_NAMES and all(r.startswith("ok") for r in results.values()), results
    assert "--matrix" in report and "matrix choice engine.compile = false" in section(report, "matrix-runner")
    out = tmp_path / "out"
    measured = json.loads((out / matrix.REPORT).read_text())
    assert [row["row"] for row in measured["rows"]] == list(matrix.ROWS) and measured["not measured"] == {}
    cases = {row["row"]: set(row["cases"]) for row in measured["rows"]}
    assert set(matrix.COMPILE_CANDIDATES) | {"bare", "bare, compiled"} == cases["runner"]
    assert {f"ghost {i}, {layout}" for i in defaults.GHOST for layout in defaults.LAYOUTS} < cases["ghost_bn"]
    assert {"sgd", "lars", "lars_compiled", "vrgd", "vrgd_eager", "vrgd_compiled", "observe_eager"} < cases["optimizer"]
    assert all(row["failed"] == {} for row in measured["rows"])
    table = (out / matrix.TABLE).read_text()
    for _, what, target in matrix.GOALS:  # every row of issue 85, with its figure or why there is none
        assert re.search(rf"^\| {re.escape(what)} \| {re.escape(target)} \| [^|]+ \| [^|]+ \|$", table, re.M), what
    proposal = json.loads((out / matrix.PROPOSAL).read_text())["gpus"]["cpu (a rehearsal)"]
    assert defaults.check_entry("the proposal", proposal) and set(proposal) == {*defaults.CANDIDATES, "measured"}
    assert defaults.FILE.read_bytes() == committed  # --write-defaults alone edits it


def test_the_matrix_steps_fit_eight_minutes_and_name_the_rows_bench_measures():
    from bench.perf import matrix

    assert gpu_check.MATRIX_ROWS == matrix.ROWS
    assert sum(cap for _, _, cap, _, _ in gpu_check.MATRIX_STEPS) <= 480 - 10  # the default --budget, a margin
    with pytest.raises(SystemExit) as refused:
        gpu_check.main(["--out", "x", "--write-defaults"])
    assert refused.value.code == 2  # --write-defaults goes with --matrix


def _row(name: str, gpu: str | None, choices: dict) -> dict:
    from bench.perf import matrix

    figure = {"goal": next(what for row, what, _ in matrix.GOALS if row == name)}
    figure |= {"target": "-", "measured": "1.0 x", "result": "PASS"}
    return {"row": name, "device": "cuda" if gpu else "cpu", "gpu": gpu, "tiny": False, "torch": "2.x", "seconds": 1,
            "cases": {"a": {"unit": "s", "median": 1.0, "values": [1.0]}}, "failed": {}, "figures": [figure],
            "choices": {key: {"value": value, "why": "a test"} for key, value in choices.items()}}  # fmt: skip


def test_the_report_proposes_a_gpus_defaults_and_writes_them_only_when_told(tmp_path):
    from bench import defaults
    from bench.errors import UserError
    from bench.perf import matrix

    files = []
    for name, choices in (("runner", {"engine.compile": "reduce-overhead"}), ("optimizer", {"optimizer.fused": True})):
        files.append(tmp_path / f"{name}.json")
        files[-1].write_text(json.dumps(_row(name, "NVIDIA H200", choices)))
    target = tmp_path / "defaults.json"
    target.write_text(json.dumps({"gpus": {"NVIDIA H100": {"engine.compile": True}}}))
    matrix.report([*files, tmp_path / "eval_memory.json"], tmp_path / "out", write_defaults=False, defaults_file=target)
    proposal = json.loads((tmp_path / "out" / matrix.PROPOSAL).read_text())["gpus"]["NVIDIA H200"]
    assert proposal["engine.compile"] == "reduce-overhead" and proposal["optimizer.fused"] is True
    assert proposal["measured"].startswith("tools/gpu_check.py --matrix, ")
    assert "NVIDIA H200" not in target.read_text()  # a proposal only
    table = (tmp_path / "out" / matrix.TABLE).read_text()
    assert "| not measured: the row did not finish (gpu-check.md says why) | - |" in table  # ghost_bn, eval_memory
    matrix.report(files, tmp_path / "out", write_defaults=True, defaults_file=target)
    assert defaults.read(target) == {"NVIDIA H100": {"engine.compile": True}, "NVIDIA H200": proposal}
    target.write_text(json.dumps({"gpus": {}}))
    assert matrix.adopt(tmp_path / "out" / matrix.PROPOSAL, target) == ["NVIDIA H200"]  # reviewed, then adopted
    assert defaults.read(target) == {"NVIDIA H200": proposal}
    cpu = tmp_path / "cpu.json"
    cpu.write_text(json.dumps(_row("runner", None, {"engine.compile": False})))
    with pytest.raises(UserError, match="this matrix ran on a CPU; defaults.json lists GPU models only"):
        matrix.report([cpu], tmp_path / "cpu-out", write_defaults=True, defaults_file=target)
    with pytest.raises(UserError, match="a CPU rehearsal's proposal; defaults.json lists GPU models only"):
        matrix.adopt(tmp_path / "cpu-out" / matrix.PROPOSAL, target)


def test_a_candidate_replaces_todays_only_when_resolved_faster_and_a_failing_one_is_dropped():
    from bench.perf import matrix
    from bench.perf.train import alternate

    assert matrix.faster([0.9] * 6) is True and matrix.faster([1.1] * 6) is False
    assert matrix.faster([0.9, 1.1] * 3) is None and matrix.faster([0.5] * 5) is None  # a tie; too few rounds
    order, failed = [], {}

    def unit(name):
        def run():
            order.append(name)
            if name == "b" and len(order) > 3:
                raise RuntimeError("compile failed\nmore lines")
            return name

        return run

    results = alternate({name: unit(name) for name in "abc"}, 3, failed=failed)
    assert order[:6] == ["a", "b", "c", "b", "c", "a"]  # the order rotates each round
    assert results == {"a": ["a"] * 3, "c": ["c"] * 3} and failed == {"b": "RuntimeError: compile failed"}
    assert len(alternate({"a": unit("a")}, 100, deadline=time.monotonic() - 1)["a"]) == 1  # at least one round


def test_the_img_s_goal_is_judged_on_the_gpu_model_it_is_stated_for_only(monkeypatch):
    """7,000 img/s is MLPerf's per-H200 rate: an H100's rate is measured and not judged against it; the ratio goals
    (overhead, ghost BatchNorm, the steps) are judged on any GPU at the full sizes."""
    from bench import defaults
    from bench.perf import matrix

    row = matrix.Row("runner", torch.device("cuda"), matrix.FULL)  # a device object: no GPU is touched
    above = [matrix.IMG_S_GOAL / rate for rate in (7400, 7500, 7450, 7600, 7550, 7480)]
    monkeypatch.setattr(defaults, "gpu_model", lambda device: "NVIDIA H100 80GB HBM3")
    assert row.judge_rate(above) == "goal is for an H200"
    assert row.judge([0.01] * 6, 0.03) == "PASS"  # a ratio goal: judged on the H100
    for other in ("NVIDIA GH200 480GB", "NVIDIA H200 NVL"):  # Grace Hopper; the lower-power PCIe card
        monkeypatch.setattr(defaults, "gpu_model", lambda device, name=other: name)
        assert row.judge_rate(above) == "goal is for an H200", other
    monkeypatch.setattr(defaults, "gpu_model", lambda device: "NVIDIA H200")
    assert row.judge_rate(above) == "PASS"
    assert row.judge_rate([matrix.IMG_S_GOAL / rate for rate in (5400, 5500, 5450, 5600, 5550, 5480)]) == "MISS"
    tiny = matrix.Row("runner", torch.device("cuda"), matrix.TINY)
    assert tiny.judge_rate(above) == "goal is for a GPU at the full sizes"
