"""`meshplan profile model`: a tiny model measured on CPU through the real CLI, Llama 3 405B on meta
(its speed is a figure of bench/bench_profile.py), recomputation measured the way the runtime applies it,
and bad input → exit 2."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from planner.specs import Profile
from planner.specs.catalog import MODELS
from planner.workload.analytic import layer_profile
from profiler.activations import SavedTensorBytes
from profiler.model_profile import profile_model

ROOT = Path(__file__).resolve().parents[1]


def _cli(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path)}
    return subprocess.run(
        [sys.executable, "-m", "api.cli", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


def test_cli_measures_tiny_model_on_cpu(tmp_path):
    out = tmp_path / "profile.json"
    res = _cli(
        [
            "profile",
            "model",
            "--model",
            "tiny-gpt",
            "--device",
            "cpu",
            "--micro-batch-sizes",
            "1,2",
            "--tp",
            "1,2",
            "--seq-len",
            "32",
            "--dtype",
            "fp32",
            "--sequence-parallel",
            "--warmup",
            "1",
            "--repeats",
            "3",
            "--no-progress",
            "--out",
            str(out),
        ],
        tmp_path,
    )
    assert res.returncode == 0, res.stderr
    assert "wrote 18 layer records" in res.stdout
    prof = Profile.model_validate_json(out.read_text())
    assert (prof.device, prof.source, prof.dtype, prof.torch_version) == ("cpu", "measured", "fp32", torch.__version__)
    assert prof.notes and "MemTracker" in prof.notes[0]
    for p in prof.layers:
        assert p.fwd_time_s > 0 and p.bwd_time_s > 0
        # At the end of the forward, parameters, saved tensors and the output are all live.
        live_at_forward_end = p.param_bytes + p.saved_activation_bytes.none + p.output_activation_bytes
        assert live_at_forward_end <= p.peak_memory_bytes <= 3 * (live_at_forward_end + p.param_bytes)
        # Real CPU tensors give the same counts as the analytic model (fused CPU attention on both).
        a = layer_profile(
            MODELS["tiny-gpt"],
            p.kind,
            micro_batch_size=p.micro_batch_size,
            seq_len=32,
            tp=p.tp,
            sequence_parallel=p.sequence_parallel,
            precision="fp32",
        )
        assert (p.fwd_flops, p.bwd_flops, p.param_count) == (a.fwd_flops, a.bwd_flops, a.param_count)
        assert p.saved_activation_bytes == a.saved_activation_bytes


def test_llama3_405b_on_meta():
    # Its speed (target: within a minute) is a figure of bench/bench_profile.py, not asserted here.
    prof = profile_model(
        MODELS["llama3-405b"], device="meta", micro_batch_sizes=[1, 2, 4], tps=[1, 2, 4, 8], seq_len=8192, dtype="bf16"
    )
    assert len(prof.layers) == 3 * 4 * 3
    block = prof.find("transformer_block", 1, 8192, 1)
    assert block.param_count == 3_187_703_808  # 16384² · (2 + 2/16) + 3 · 16384 · 53248 + 2 · 16384
    for p in prof.layers:
        a = layer_profile(MODELS["llama3-405b"], p.kind, micro_batch_size=p.micro_batch_size, seq_len=8192, tp=p.tp)
        assert p.fwd_flops == pytest.approx(a.fwd_flops, rel=0.01)
        assert p.saved_activation_bytes.none == pytest.approx(a.saved_activation_bytes.none, rel=0.05)


@pytest.mark.parametrize("mode", ["selective", "full"])
def test_recompute_bytes_match_the_runtimes_composable_checkpoint(mode):
    """The profiler patches ``torch.utils.checkpoint`` around the module; the runtime applies
    ``torch.distributed._composable.checkpoint`` (runtime/parallelize.py). Both must keep the same bytes."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._composable import checkpoint

    from runtime.models import build_layer

    spec = MODELS["llama3-8b"]
    measured = profile_model(spec, device="meta", micro_batch_sizes=[2], tps=[2], seq_len=256, dtype="bf16")
    expected = measured.find("transformer_block", 2, 256, 2).saved_activation_bytes.for_mode(mode)
    layer = build_layer(spec, "transformer_block", tp=2, device="meta", dtype=torch.bfloat16)
    with FakeTensorMode(allow_non_fake_inputs=True):
        layer = layer.to_empty(device="cpu")
        checkpoint(layer if mode == "full" else layer.attn.core)
        x = torch.randn(2, 256, spec.hidden_size, dtype=torch.bfloat16, requires_grad=True)
        with SavedTensorBytes(layer) as saved:
            layer(x)
    assert saved.nbytes == expected
    assert saved.nbytes < measured.find("transformer_block", 2, 256, 2).saved_activation_bytes.none


@pytest.mark.parametrize(
    "args, option",
    [
        (["--model", "gpt-9"], "--model"),
        (["--model", "tiny-gpt", "--tp", "3"], "--tp"),
        (["--model", "tiny-gpt", "--tp", "1,two"], "--tp"),
        (["--model", "tiny-gpt", "--micro-batch-sizes", "0"], "--micro-batch-sizes"),
        (["--model", "tiny-gpt", "--device", "tpu"], "--device"),
        (["--model", "tiny-gpt", "--dtype", "int8"], "--dtype"),
        (["--model", "tiny-gpt", "--seq-len", "100000"], "--seq-len"),
        (["--model", "tiny-gpt", "--tp", "4", "--seq-len", "30", "--sequence-parallel"], "--seq-len"),
        (["--model", "llama3-405b", "--device", "cpu", "--seq-len", "131072", "--micro-batch-sizes", "64"], "--device"),
        (["--model", "missing.json"], "--model"),
        (["--model", "BADSPEC"], "num_kv_heads"),
        (["--model", "tiny-gpt", "--out", "/nonexistent-dir/p.json"], "--out"),
    ],
)
def test_bad_input_exits_2_naming_the_option(args, option, tmp_path, monkeypatch, capsys):
    from api.cli import main

    monkeypatch.chdir(tmp_path)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**MODELS["tiny-gpt"].model_dump(), "num_kv_heads": 3}))
    args = [str(bad) if a == "BADSPEC" else a for a in args]
    if "--out" not in args:
        args += ["--out", str(tmp_path / "p.json")]
    with pytest.raises(SystemExit) as exc:
        main(["profile", "model", "--no-progress", *args])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert option in err and "Traceback" not in err
    assert not (tmp_path / "p.json").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown when CUDA is missing")
def test_cuda_without_a_gpu_is_a_clear_error(tmp_path, capsys):
    from api.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["profile", "model", "--model", "tiny-gpt", "--device", "cuda", "--out", str(tmp_path / "p.json")])
    assert exc.value.code == 2
    assert "--device: no CUDA device" in capsys.readouterr().err


@pytest.mark.parametrize("q_heads, kv_heads", [(8, 8), (8, 2), (32, 8), (4, 1)])
def test_grouped_query_sdpa_counts_the_flops_of_repeated_kv(q_heads: int, kv_heads: int):
    """The formulas given to every fused SDPA kernel count GQA as K/V repeated to the query's heads
    (PyTorch 2.11's own assert equal heads; the H200 check failed on it)."""
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

    from profiler.flops import SDPA_CPU_MAPPING

    b, s, d = 2, 64, 16
    q, kv = (b, q_heads, s, d), (b, kv_heads, s, d)
    fwd = {fn for op, fn in SDPA_CPU_MAPPING.items() if not str(op).endswith("_backward")}
    bwd = {fn for op, fn in SDPA_CPU_MAPPING.items() if str(op).endswith("_backward")}
    assert len(fwd) == len(bwd) == 1
    assert next(iter(fwd))(q, kv, kv) == sdpa_flop_count(q, q, q) == 4 * b * q_heads * s * s * d
    assert next(iter(bwd))(q, q, kv, kv) == sdpa_backward_flop_count(q, q, q, q)
