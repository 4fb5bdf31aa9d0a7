"""In-process pieces of the runtime: data determinism and errors, report arithmetic, TP-rule
resolution, gradient clipping on plain tensors (the distributed paths are in test_runtime_equivalence)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from planner.specs.errors import MeshplanError
from runtime.data import SyntheticTokens, TokenFile
from runtime.report import build_report, job_step_times, measured_step_time
from runtime.testing import make_plan


def test_synthetic_batches_depend_only_on_seed_and_step():
    a, b = SyntheticTokens(256, seed=1), SyntheticTokens(256, seed=1)
    x1, y1 = a.batch(5, 4, 16)
    x2, y2 = b.batch(5, 4, 16)
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    assert torch.equal(x1[:, 1:], y1[:, :-1])  # targets are the inputs shifted by one
    assert not torch.equal(a.batch(6, 4, 16)[0], x1)
    assert int(x1.max()) < 256 and x1.dtype == torch.long


def test_token_file_windows_and_errors(tmp_path):
    path = tmp_path / "t.bin"
    np.arange(1000, dtype=np.uint16).tofile(path)
    x, y = TokenFile(path, 1000, seed=0).batch(0, 3, 10)
    assert x.shape == (3, 10) and torch.equal(y, x + 1)  # consecutive ids: windows are contiguous
    with pytest.raises(MeshplanError) as exc:
        TokenFile(path, 500).batch(0, 64, 10)
    assert exc.value.field == "data" and "vocab_size" in exc.value.message
    with pytest.raises(MeshplanError):
        TokenFile(tmp_path / "missing.bin", 1000)
    with pytest.raises(MeshplanError):
        TokenFile(path, 1000).batch(0, 1, 5000)


@pytest.mark.parametrize(
    "times, expected",
    [([], 0.0), ([3.0], 3.0), ([9.0, 1.0, 3.0], 2.0), ([9.0, 1.0, 2.0, 4.0], 2.0)],
)
def test_measured_step_time_is_the_median_after_warmup(times, expected):
    assert measured_step_time(times) == expected


def _skewed_ranks(period: float, skews: list[list[float]]) -> list[list[float]]:
    """Each rank's own durations of its steps when the job finishes step i at (i + 1) × period and rank r
    ``skews[r][i]`` seconds later (the ranks start together at 0)."""
    ends = [[(i + 1) * period + s for i, s in enumerate(rank)] for rank in skews]
    return [[e - prev for e, prev in zip(rank, [0.0, *rank[:-1]], strict=True)] for rank in ends]


@pytest.mark.parametrize(
    "skews",
    [
        [[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]],  # in lockstep
        [[0.0, 0.04, 0.0, 0.04], [0.04, 0.0, 0.04, 0.0]],  # the late rank alternates (dp2 × tp2 on 2 cores)
        [[0.0, 0.03, 0.01, 0.0], [0.02, 0.0, 0.0, 0.05], [0.0, 0.0, 0.04, 0.01]],  # three ranks, uneven
    ],
)
def test_a_jobs_step_times_add_up_to_its_time_however_its_ranks_drift(skews):
    """The job's step times sum to the time its ranks took (their mean), step after step, for any skew
    between ranks; the slowest rank's duration of each step, which the report took before, counts the
    skew again every step a late rank catches up in."""
    period = 0.4
    per_rank = _skewed_ranks(period, skews)
    got = job_step_times(per_rank)
    assert len(got) == len(skews[0])
    for i in range(len(got)):  # every prefix: the mean over ranks of each rank's time to the end of step i
        assert sum(got[: i + 1]) == pytest.approx(sum(sum(d[: i + 1]) for d in per_rank) / len(per_rank))
    assert sum(got) / len(got) == pytest.approx(period + sum(s[-1] for s in skews) / len(skews) / len(got))
    slowest = [max(ds) for ds in zip(*per_rank, strict=True)]
    drift = any(any(s) for s in skews)
    assert (sum(slowest) > sum(got) + 0.01) == drift  # the old statistic: above the job's time when ranks drift


def test_a_jobs_step_times_of_one_rank_are_its_own():
    assert job_step_times([[0.5, 0.25]]) == [0.5, 0.25] and job_step_times([]) == []


@pytest.mark.parametrize(
    "device, comparable",
    [
        ("NVIDIA H100 80GB HBM3", True),  # the plan's GPU (h100-sxm5-80gb): its prediction is compared
        ("cpu", False),  # a CPU run: the GPU prediction is shown, labelled, never divided
        ("NVIDIA A100-SXM4-80GB", False),  # another GPU: likewise
    ],
)
def test_report_ratios_compare_only_predictions_for_the_hardware_that_ran(device, comparable):
    from planner.specs import Prediction
    from runtime.report import summary

    plan = make_plan("tiny-gpt", dp=2)
    assert plan.gpu.id == "h100-sxm5-80gb"
    plan = plan.model_copy(
        update={"estimate": plan.estimate.model_copy(update={"step_time_s": 0.3, "peak_memory_gib": 2.0})}
    )
    local = Prediction(predicted_on=device, basis="a profile", step_time_s=0.6, peak_memory_gib=1.0)
    r = build_report(
        plan,
        device=device,
        torch_version="x",
        losses=[5.0, 4.0, 3.0],
        step_times=[1.0, 0.2, 0.4],
        peak_memory_bytes_per_rank=[2**30, 2 * 2**30],
        local=local,
    )
    assert r.measured_step_time_s == pytest.approx(0.3)
    assert r.predicted_on == "h100-sxm5-80gb" and r.predicted_step_time_s == 0.3
    assert r.step_time_ratio == (pytest.approx(1.0) if comparable else None)
    assert r.memory_ratio == (pytest.approx(1.0) if comparable else None)
    assert r.local_prediction.step_time_ratio == pytest.approx(0.6 / 0.3)
    assert r.local_prediction.memory_ratio == pytest.approx(1.0 / 2.0)
    assert r.tokens_per_s == pytest.approx(8 * 32 / 0.3)
    assert r.peak_memory_gib_per_rank == [1.0, 2.0] and r.world_size == 2
    text = summary(r)
    for line in text.splitlines():  # no line sets the plan's GPU prediction against another device's measurement
        if "h100-sxm5-80gb" in line and not comparable:
            assert "not comparable" in line and "÷" not in line and "ratio" not in line
    assert f"predicted for {device} (this run's hardware): step time 0.6 s (predicted ÷ measured 2)" in text
    placeholder = build_report(
        make_plan("tiny-gpt"),
        device="cpu",
        torch_version="x",
        losses=[1.0],
        step_times=[0.1],
        peak_memory_bytes_per_rank=[1],
    )
    assert placeholder.predicted_step_time_s is None and placeholder.step_time_ratio is None


@pytest.mark.parametrize("sp", [False, True])
def test_tp_rules_resolve_to_the_chunk_modules(sp):
    """A pruned chunk gets exactly the rules for the modules it holds, with the plan's styles."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, SequenceParallel

    from runtime.job import build_chunk
    from runtime.parallelize import resolve_tp_plan

    plan = make_plan("tiny-llama", tp=2, pp=2, sequence_parallel=sp)
    last = build_chunk(plan, 1, seed=0, device=torch.device("cpu"))
    resolved = resolve_tp_plan(last, plan.tp_plan)
    assert "embed.tok" not in resolved and "layers.0.attn.wq" not in resolved
    assert isinstance(resolved["layers.4.attn.wq"], ColwiseParallel)
    assert isinstance(resolved["layers.7.mlp.w2"], RowwiseParallel)
    assert isinstance(resolved["head"], ColwiseParallel)
    assert isinstance(resolved.get("norm"), SequenceParallel) == sp
    assert ("layers.5.attn" in resolved) == sp  # prepare_input only with SP


def test_clip_matches_torch_on_plain_tensors():
    from runtime.job import clip_grad_norm

    gen = torch.Generator().manual_seed(0)
    a = [torch.nn.Parameter(torch.randn(5, 3, generator=gen)) for _ in range(4)]
    b = [torch.nn.Parameter(p.detach().clone()) for p in a]
    for p, q in zip(a, b):
        p.grad = torch.randn(p.shape, generator=gen)
        q.grad = p.grad.clone()
    ours = clip_grad_norm(a, 0.5)
    theirs = float(torch.nn.utils.clip_grad_norm_(b, 0.5))
    assert ours == pytest.approx(theirs, rel=1e-6)
    for p, q in zip(a, b):
        torch.testing.assert_close(p.grad, q.grad)


def test_a_hung_launch_is_killed_with_its_workers(tmp_path):
    """The launcher helper kills the whole process group on timeout (no orphaned ranks)."""
    import os
    import subprocess
    import sys
    import time

    from runtime.testing import run_process_group

    pid_file = tmp_path / "worker.pid"
    code = (
        "import subprocess, sys, time; w = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        f"open({str(pid_file)!r}, 'w').write(str(w.pid)); time.sleep(60)"
    )
    with pytest.raises(subprocess.TimeoutExpired):
        run_process_group([sys.executable, "-c", code], env=dict(os.environ), cwd=tmp_path, timeout=3)
    worker = int(pid_file.read_text())

    def alive() -> bool:
        try:
            os.kill(worker, 0)
            return open(f"/proc/{worker}/stat").read().split()[2] != "Z"
        except (ProcessLookupError, FileNotFoundError):
            return False

    # Killed with its group: gone as soon as the kernel runs its exit, however loaded the machine (the
    # 30 s only bound the wait; the worker itself would sleep for 60 s).
    deadline = time.monotonic() + 30
    while alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive()


# ---- the lean model path: fused RMSNorm, GQA without repeated K/V, per-block torch.compile ----------


def _saved_for_backward(fn):
    """(shape, dtype) of every tensor autograd keeps while ``fn()`` runs, and ``fn()``'s result."""
    kept = []

    def pack(t):
        kept.append((tuple(t.shape), t.dtype))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return kept, out


@pytest.mark.parametrize(
    "dtype, tol",
    [(torch.float64, 1e-12), (torch.float32, 1e-5), (torch.bfloat16, 2e-2)],
)
def test_rms_norm_matches_torch_and_keeps_only_input_and_rstd(dtype, tol):
    """runtime.models.RMSNorm computes torch.nn.RMSNorm's output and gradients, but keeps for backward
    only its input (activation dtype) and the fp32 1/rms per token, as PyTorch's fused CUDA kernel does
    (the composite CPU path keeps the fp32 input, the fp32 normalised input and 1/rms)."""
    from runtime.models.transformer import RMSNorm

    gen = torch.Generator().manual_seed(0)
    ours, ref = RMSNorm(16).to(dtype), torch.nn.RMSNorm(16, eps=1e-5).to(dtype)
    with torch.no_grad():
        ours.weight.copy_(torch.randn(16, generator=gen))
        ref.weight.copy_(ours.weight)
    x = torch.randn(2, 8, 16, generator=gen).to(dtype).requires_grad_()
    kept, y = _saved_for_backward(lambda: ours(x))
    assert kept == [
        ((2, 8, 16), dtype),
        ((2, 8, 1), torch.float32 if dtype != torch.float64 else dtype),
        ((16,), dtype),
    ]
    y_ref = ref(x)
    g = torch.randn(y.shape, generator=gen).to(dtype)
    torch.testing.assert_close(y, y_ref, atol=tol, rtol=tol)
    for a, b in zip(torch.autograd.grad(y, (x, ours.weight), g), torch.autograd.grad(y_ref, (x, ref.weight), g)):
        torch.testing.assert_close(a, b, atol=tol, rtol=tol)


@pytest.mark.parametrize("model, tp", [("tiny-llama", 1), ("tiny-llama", 2), ("tiny-gpt", 1)])
def test_gqa_attention_matches_repeated_kv_and_keeps_kv_unrepeated(model, tp):
    """The attention block's output and gradients equal those of the same weights with K/V repeated to
    the query heads (the textbook GQA), while the kernel keeps K and V at the KV-head count."""
    import torch.nn.functional as F

    from planner.specs.catalog import MODELS
    from runtime.models.transformer import apply_rope, build_layer

    spec = MODELS[model]
    block = build_layer(spec, "transformer_block", tp=tp, seed=0, dtype=torch.float64)
    attn = block.attn
    x = torch.randn(2, 16, spec.hidden_size, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    x.requires_grad_()

    def repeated(x):
        b, t = x.shape[:2]
        q, k, v = (w(x).view(b, t, -1, spec.head_dim) for w in (attn.wq, attn.wk, attn.wv))
        if attn.rope:
            q, k = apply_rope(q), apply_rope(k)
        rep = q.shape[2] // k.shape[2]
        k, v = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return attn.wo(o.transpose(1, 2).reshape(b, t, -1))

    kept, y = _saved_for_backward(lambda: attn(x))
    y_ref = repeated(x)
    torch.testing.assert_close(y, y_ref, atol=1e-12, rtol=1e-10)
    params = [x, *attn.parameters()]
    for a, b in zip(torch.autograd.grad(y.sum(), params), torch.autograd.grad(y_ref.sum(), params)):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-10)
    kv_heads, heads = spec.num_kv_heads // tp, spec.num_attention_heads // tp
    # The attention kernel's Q, K, V and output, [b, heads, s, d] (RoPE's tables are [1, s, 1, d/2]).
    four_d = [s for s, _ in kept if len(s) == 4 and s[0] == 2 and s[2:] == (16, spec.head_dim)]
    assert sorted(s[1] for s in four_d) == sorted([heads, kv_heads, kv_heads, heads])


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_compiled_blocks_train_like_eager(recompute):
    """--compile (runtime.parallelize.apply_compile): the tiniest Llama compiled per block gives the eager
    loss and gradients, keeps every parameter name, and compiles one graph for all its blocks. On CPU
    the first run compiles with Inductor (slow on a loaded machine; later runs hit its cache)."""
    torch._dynamo.reset()
    from torch._dynamo.utils import counters

    from planner.specs.catalog import MODELS
    from runtime.data import SyntheticTokens
    from runtime.job import loss_fn
    from runtime.models import build_model
    from runtime.parallelize import apply_compile, apply_recompute

    spec = MODELS["tiny-llama"]
    eager, compiled = build_model(spec, seed=0), build_model(spec, seed=0)
    for m in (eager, compiled):
        apply_recompute(m, recompute)
    apply_compile(compiled)
    counters.clear()
    x, y = SyntheticTokens(spec.vocab_size, seed=0).batch(0, 4, 32)
    losses = []
    for m in (eager, compiled):
        loss = loss_fn(m(x), y)
        loss.backward()
        losses.append(float(loss.detach()))
    assert losses[1] == pytest.approx(losses[0], abs=1e-5)
    assert [n for n, _ in compiled.named_parameters()] == [n for n, _ in eager.named_parameters()]
    for (name, a), b in zip(eager.named_parameters(), compiled.parameters()):
        torch.testing.assert_close(b.grad, a.grad, atol=1e-5, rtol=1e-4, msg=name)
    assert counters["stats"]["unique_graphs"] == 1  # one graph serves all 8 blocks (no recompiles)


def test_compile_refuses_selective_recompute():
    from runtime.args import check_with_plan

    check_with_plan({"compile": True}, make_plan("tiny-llama", recompute="full"))
    check_with_plan({"compile": False}, make_plan("tiny-llama", recompute="selective"))
    with pytest.raises(MeshplanError) as exc:
        check_with_plan({"compile": True}, make_plan("tiny-llama", recompute="selective"))
    assert exc.value.field == "--compile" and "selective" in exc.value.message
