"""`meshplan run` end to end (real torchrun, gloo): reports, DCP checkpoints resumed under another
plan (another world size) continuing the reference trajectory, and bad plans failing fast on every
rank with a clear message (no rank hangs: every launch has a timeout)."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from planner.specs import RunReport
from runtime.testing import make_plan, run_process_group

ROOT = Path(__file__).resolve().parents[1]


def _env(tmp: Path) -> dict:
    return {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "TMPDIR": str(tmp),
        "PYTHONPATH": str(ROOT),
        "PYTHONWARNINGS": "ignore",
    }


def meshplan(args: list[str], tmp: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return run_process_group([sys.executable, "-m", "api.cli", *args], cwd=ROOT, env=_env(tmp), timeout=timeout)


def _write(tmp: Path, name: str, plan) -> Path:
    path = tmp / name
    path.write_text(plan.model_dump_json())
    return path


RESUMES = [
    # (id, model, first plan's settings, second plan's settings, use a token file)
    (
        "tp2xdp2-zero3-sp-to-pp2",
        "tiny-llama",
        dict(tp=2, dp=2, zero_stage=3, sequence_parallel=True, micro_batch_size=2),
        dict(pp=2, schedule="1f1b", micro_batch_size=2),
        True,
    ),
    (
        "zbv-two-chunks-per-rank-to-dp2",
        "tiny-gpt",
        dict(pp=2, schedule="zbv-zero-bubble", virtual_stages=2, micro_batch_size=2),
        dict(dp=2, zero_stage=0),
        False,
    ),
]


@pytest.mark.parametrize("model, first, second, token_file", [pytest.param(*r[1:], id=r[0]) for r in RESUMES])
def test_resume_under_another_plan_continues_the_reference_trajectory(tmp_path, model, first, second, token_file):
    """Train 2 steps under one plan and save (DCP); resume under another plan (other tp/pp/dp, other
    world size) for 2 more. The 4 losses equal a single-process run's (same data, seed, AdamW with
    clipping), so model *and* optimizer state survived the change of layout. The first run's report
    puts its measurements beside the plan's prediction."""
    from runtime.data import SyntheticTokens, TokenFile
    from runtime.job import TrainConfig
    from runtime.testing import reference_run

    data_args, data = [], SyntheticTokens(256)
    if token_file:
        tokens = tmp_path / "tokens.bin"
        np.tile((np.arange(97) * 5) % 256, 200).astype(np.uint16).tofile(tokens)  # a learnable stream
        data_args, data = ["--data", str(tokens)], TokenFile(tokens, 256)
    plan_a, plan_b = make_plan(model, **first), make_plan(model, **second)
    prediction = {"step_time_s": 0.05, "peak_memory_gib": 0.5}
    plan_a = plan_a.model_copy(update={"estimate": plan_a.estimate.model_copy(update=prediction)})
    ckpt = tmp_path / "ckpt"
    a = meshplan(
        [
            "run",
            "--plan",
            str(_write(tmp_path, "a.json", plan_a)),
            "--steps",
            "2",
            *data_args,
            "--checkpoint-dir",
            str(ckpt),
            "--save-every",
            "1",
            "--report",
            str(tmp_path / "a-report.json"),
        ],
        tmp_path,
    )
    assert a.returncode == 0, a.stderr[-3000:]
    assert (ckpt / "latest").read_text() == "2" and (ckpt / "step-1" / ".metadata").is_file()
    b = meshplan(
        [
            "run",
            "--plan",
            str(_write(tmp_path, "b.json", plan_b)),
            "--steps",
            "2",
            *data_args,
            "--resume",
            str(ckpt),
            "--report",
            str(tmp_path / "b-report.json"),
        ],
        tmp_path,
    )
    assert b.returncode == 0, b.stderr[-3000:]
    ra = RunReport.model_validate_json((tmp_path / "a-report.json").read_text())
    rb = RunReport.model_validate_json((tmp_path / "b-report.json").read_text())
    assert (ra.world_size, rb.world_size, rb.resumed_from_step) == (
        plan_a.parallel.num_gpus,
        plan_b.parallel.num_gpus,
        2,
    )
    ref, _, _ = reference_run(plan_a, TrainConfig(), 4, data=data)
    np.testing.assert_allclose(ra.losses + rb.losses, ref, rtol=0, atol=1e-5)
    if token_file:
        assert ref[3] < ref[0]  # a learnable stream: training makes progress
    assert "loss" in a.stdout and "measured" in b.stdout
    # The report: predicted beside measured (the median step after the first), per-rank peak memory.
    assert len(ra.losses) == len(ra.step_times_s) == 2
    assert len(ra.peak_memory_gib_per_rank) == plan_a.parallel.num_gpus and min(ra.peak_memory_gib_per_rank) > 0
    median = statistics.median(ra.step_times_s[1:])
    assert ra.measured_step_time_s == pytest.approx(median)
    # The plan's prediction is for its GPU: kept, labelled, never divided by a CPU measurement; the run is
    # compared with the plan re-priced for this CPU (a layer profile and a gloo fit measured after the run).
    assert (ra.predicted_on, ra.predicted_step_time_s, ra.step_time_ratio, ra.memory_ratio) == (
        plan_a.gpu.id,
        0.05,
        None,
        None,
    )
    local = ra.local_prediction
    assert ra.tokens_per_s == pytest.approx(8 * 32 / median)
    if plan_a.parallel.schedule not in (
        "gpipe",
        "1f1b",
        "interleaved-1f1b",
    ):  # the runtime runs it, the cost model does not price it
        assert local is None and any(
            n.startswith("no prediction for cpu: the cost model cannot price") for n in ra.notes
        )
    else:
        assert local.predicted_on == "cpu" and local.step_time_s > 0 and "cpu layer profile" in local.basis
        assert ("gloo network fit" in local.basis) == (plan_a.parallel.num_gpus > 1)
        assert local.step_time_ratio == pytest.approx(local.step_time_s / median)
        assert local.memory_ratio == pytest.approx(local.peak_memory_gib / max(ra.peak_memory_gib_per_rank))
        assert "predicted for cpu (this run's hardware)" in a.stdout
    assert f"the plan's prediction is for {plan_a.gpu.id}, not cpu: step time 0.05 s" in a.stdout


def test_fp8_run_trains_in_fp8_and_says_so(tmp_path):
    """Issue 24: an FP8 plan (torchao tensorwise, FSDP2 ZeRO-3 over 2 processes) trains through `meshplan run`:
    step 1's loss equals the FP8 one-process reference of the same micro-batches (runtime/fp8.py; the fp32
    reference differs by more), step 2's within FP8 noise (tests/test_runtime_equivalence.py FP8_TRAJECTORY_TOL);
    the report says what ran in FP8 and that no local prediction prices CPU float8 GEMMs."""
    from runtime.job import TrainConfig
    from runtime.testing import reference_run

    plan = make_plan("tiny-llama", precision="fp8", dp=2, zero_stage=3, micro_batch_size=2)
    run = meshplan(
        [
            "run",
            "--plan",
            str(_write(tmp_path, "fp8.json", plan)),
            "--steps",
            "2",
            "--report",
            str(tmp_path / "r.json"),
        ],
        tmp_path,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report = RunReport.model_validate_json((tmp_path / "r.json").read_text())
    ref, _, _ = reference_run(plan, TrainConfig(), 2)
    fp32 = plan.model_copy(update={"training": plan.training.model_copy(update={"precision": "fp32"})})
    ref32, _, _ = reference_run(fp32, TrainConfig(), 2)
    assert abs(report.losses[0] - ref[0]) <= 1e-5 < abs(report.losses[0] - ref32[0]), (report.losses, ref, ref32)
    assert abs(report.losses[1] - ref[1]) <= 2e-3
    assert any(n.startswith("fp8: the blocks' linears in FP8 (torchao float8, recipe tensorwise") for n in report.notes)
    assert report.local_prediction is None and any(
        "no prediction for cpu: the run's FP8 linears" in n for n in report.notes
    )


BAD_LAUNCHES = [
    # (id, plan, world) — every rank must refuse it with the field named, before any collective.
    ("world-size", lambda: make_plan("tiny-gpt", tp=2, dp=2), 2, "parallel"),
    (
        "fp8-recipe",
        lambda: make_plan("tiny-gpt", precision="fp8", fp8_recipe="delayed", dp=2),
        2,
        "training.fp8_recipe",
    ),
    ("stage-layers", lambda: make_plan("tiny-gpt", pp=2, stage_layers=[3, 3]), 2, "parallel.stage_layers"),
    (
        "tp-kv-heads",
        lambda: make_plan(
            __import__("planner.specs.catalog")
            .specs.catalog.MODELS["tiny-llama"]
            .model_copy(update={"num_kv_heads": 1}),
            tp=2,
        ),
        2,
        "parallel.tp",
    ),
    (
        "1f1b-microbatches",
        lambda: make_plan("tiny-gpt", pp=2, global_batch_size=2, micro_batch_size=2),
        2,
        "parallel.micro_batch_size",
    ),
]


@pytest.mark.parametrize("factory, world, field", [pytest.param(f, w, fld, id=i) for i, f, w, fld in BAD_LAUNCHES])
def test_bad_plan_fails_fast_on_every_rank(tmp_path, factory, world, field):
    path = _write(tmp_path, "bad.json", factory())
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={world}",
        "-m",
        "runtime.train",
        "--plan",
        str(path),
        "--steps",
        "1",
    ]
    proc = run_process_group(cmd, cwd=ROOT, env=_env(tmp_path), timeout=120)
    assert proc.returncode != 0
    for rank in range(world):
        assert f"[rank{rank}] error: {field}:" in proc.stderr, proc.stderr[-3000:]
    # No traceback from meshplan's own code (torchrun's launcher prints its own summary, whose frames
    # live in site-packages, possibly inside a .venv under ROOT).
    for package in ("runtime", "planner", "api", "profiler"):
        assert f'File "{ROOT / package}/' not in proc.stderr, proc.stderr[-3000:]


@pytest.mark.parametrize(
    "args, field",
    [
        (["--nproc-per-node", "3"], "parallel"),
        (["--nnodes", "2", "--nproc-per-node", "1"], "rdzv_endpoint"),
        (["--save-every", "2"], "save_every"),
    ],
)
def test_cli_refuses_before_launching(tmp_path, args, field):
    path = _write(tmp_path, "p.json", make_plan("tiny-gpt", dp=2))
    r = meshplan(["run", "--plan", str(path), *args], tmp_path, timeout=60)
    err = " ".join(r.stderr.split())  # rich wraps long lines
    assert r.returncode == 2
    assert f"{field}:" in err and "Fix:" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "flag, content, words",
    [
        ("--profile", "{", "not valid JSON"),
        ("--profile", None, "does not exist"),
        ("--network", '{"backend": "gloo"}', "NetworkProfile"),
    ],
)
def test_cli_refuses_a_bad_hardware_input_before_launching(tmp_path, flag, content, words):
    path = _write(tmp_path, "p.json", make_plan("tiny-gpt", dp=2))
    given = tmp_path / "given.json"
    if content is not None:
        given.write_text(content)
    r = meshplan(["run", "--plan", str(path), flag, str(given)], tmp_path, timeout=60)
    err = " ".join(r.stderr.split())
    assert r.returncode == 2 and words in err and "Traceback" not in err


def test_cli_names_a_missing_plan_file(tmp_path):
    r = meshplan(["run", "--plan", str(tmp_path / "nope.json")], tmp_path, timeout=60)
    err = " ".join(r.stderr.split())  # rich wraps long lines
    assert r.returncode == 2 and "plan:" in err and "does not exist" in err


def test_resume_from_an_empty_folder_fails_on_every_rank(tmp_path):
    path = _write(tmp_path, "p.json", make_plan("tiny-gpt", dp=2))
    (tmp_path / "empty").mkdir()
    r = meshplan(["run", "--plan", str(path), "--resume", str(tmp_path / "empty")], tmp_path, timeout=60)
    assert r.returncode == 2 and "resume:" in r.stderr  # the CLI checks before launching
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        "-m",
        "runtime.train",
        "--plan",
        str(path),
        "--resume",
        str(tmp_path / "empty"),
    ]
    proc = run_process_group(cmd, cwd=ROOT, env=_env(tmp_path), timeout=120)
    assert proc.returncode != 0
    assert "[rank0] error: resume:" in proc.stderr and "[rank1] error: resume:" in proc.stderr


def test_checks_before_launch_do_not_import_torch(tmp_path):
    """`meshplan run` and every rank validate the plan and the checkpoint folder before anything is
    launched or joined; that path must not pay PyTorch's import (seconds of CPU per process)."""
    code = (
        "import sys, runtime.cli, runtime.train\nfrom runtime.checkpoint import resolve\n"
        "from runtime.validate import validate_plan\nfrom planner.answer.io import load_plan\n"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=_env(tmp_path), capture_output=True, text=True, timeout=60
    )
    assert out.stdout.strip() == "False", out.stderr
