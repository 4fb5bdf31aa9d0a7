"""torchtitan's memory as its 2024-12 code held it (cost model 66). (1) Its cross-entropy under tensor parallelism:
DTensor's ``loss_parallel`` handlers (torch 2.6.0 / 2.13.0 ``distributed/tensor/parallel/loss.py``) hold four fp32
[T, V/t] tensors in the loss's backward, not the three of aten's fused log_softmax / nll_loss kernels: checked against
a hand walk of the handler's tensors and their lifetimes, and end to end on a TP plan. (2) What
``torch.distributed.pipelining`` before pytorch#153383 keeps of every micro-batch (``compose.pp_kept``): checked
against a hand count of the kept tensors per stage."""

from __future__ import annotations

import pytest

from planner.api import estimate_plan
from planner.compose.memory import loss_buffer_bytes
from planner.pricing.device import FRAGMENTATION, GIB
from planner.specs.stacks import STACKS, resolve


def walk_backward(n: int) -> int:
    """Peak bytes of ``_nll_loss_and_log_softmax_backward`` over n fp32 logits, tensor by tensor in Python's order:
    x (saved log-softmax output, alive throughout), ``grad_input = zeros_like(x)``, then ``t1 = exp(x)``,
    ``t2 = grad_input + t1`` (t1 dropped once the add returns), ``t3 = t2 * grad_output`` (t2 dropped after)."""
    alive: dict[str, int] = {"x": 4 * n}
    top = 0

    def new(name: str) -> None:
        nonlocal top
        alive[name] = 4 * n
        top = max(top, sum(alive.values()))

    new("grad_input")
    new("t1")
    new("t2")
    del alive["t1"]
    new("t3")
    del alive["t2"]
    return top


def walk_forward(n: int) -> int:
    """Peak bytes of the loss's forward (``pred.float()`` then ``_log_softmax``, :127-151): the bf16 logits (held by
    ``pred`` until train.py's ``del pred``), the fp32 copy x, ``shifted = x - x_max``, ``exp(shifted)`` (dropped after
    its sum), ``result = shifted - logsumexp``."""
    alive = {"pred": 2 * n, "x": 4 * n, "shifted": 4 * n, "exp": 4 * n}
    top = sum(alive.values())
    del alive["exp"]
    alive["result"] = 4 * n
    return max(top, sum(alive.values()))


def test_hand_walk():
    tokens, vocab_local = 16 * 8192, 128256 // 8
    n = tokens * vocab_local
    titan = STACKS["torchtitan"]
    assert titan.loss == "loss_parallel"
    assert loss_buffer_bytes(titan, tokens, vocab_local, 2, 8) == walk_backward(n) == 16 * n
    assert walk_forward(n) == 14 * n < walk_backward(n)  # the backward is the loss's peak
    # tp = 1: aten's kernels (the "upcast" three fp32 tensors); other stacks ignore tp
    assert loss_buffer_bytes(titan, tokens, 128256, 2, 1) == 12 * tokens * 128256
    assert loss_buffer_bytes(STACKS["meshplan"], tokens, vocab_local, 2, 8) == 12 * n
    assert loss_buffer_bytes(STACKS["megatron"], tokens, vocab_local, 2, 8) == 4 * n
    assert resolve({"base": "torchtitan", "loss": "upcast"}).loss == "upcast"


def body(loss: str | None) -> dict:
    stack: str | dict = "torchtitan" if loss is None else {"base": "torchtitan", "loss": loss}
    return {
        "model": "llama3-8b",
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "gpus_per_node": 8},
        "training": {"global_batch_size": 4, "seq_len": 8192, "stack": stack},
        "parallel": {"tp": 8, "dp": 1, "pp": 1, "sequence_parallel": True, "micro_batch_size": 4},
        "options": {"time_limit_s": 20, "num_workers": 1},
    }


def test_tp_plan_peak_moves_by_four_bytes_a_logit():
    """Llama 3 8B at TP 8, micro-batch 4 × 8192: the loss is the peak's buffer; loss_parallel adds 4 bytes per
    local logit (32768 tokens × 128256/8), plus the 5 % fragmentation reserve on it."""
    new = estimate_plan(body(None)).estimate.peak_memory_gib
    old = estimate_plan(body("upcast")).estimate.peak_memory_gib
    extra = 4 * 4 * 8192 * (128256 // 8)
    assert new - old == pytest.approx(extra * (1 + FRAGMENTATION) / GIB, rel=1e-6)


def pp_body(kept: bool, schedule: str = "1f1b") -> dict:
    stack = {"base": "torchtitan", "pp_kept_outputs": True} if kept else "torchtitan"
    return {
        "model": "llama3-8b",
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "gpus_per_node": 8},
        "training": {"global_batch_size": 8, "seq_len": 4096, "stack": stack},
        "parallel": {
            "tp": 2,
            "dp": 1,
            "pp": 4,
            "sequence_parallel": True,
            "micro_batch_size": 1,
            "schedule": schedule,
            "zero_stage": 2,
            "recompute": "full",
        },
        "options": {"time_limit_s": 20, "num_workers": 1},
    }


def test_pipeline_keeps_every_micro_batch_by_hand():
    """torch.distributed.pipelining before pytorch#153383 (``compose.pp_kept``): 8 micro-batches of 4096 tokens at
    TP 2 with SP. Every rank but the last keeps 8 stage outputs and 8 gradient receive buffers, each [1, 4096/2, 4096]
    bf16; the last keeps the 8 micro-batches' logits, [1, 4096, 128256/2] bf16. Counted in each stage's buffers."""
    kept = estimate_plan(pp_body(True)).estimate.memory_per_stage
    base = estimate_plan(pp_body(False)).estimate.memory_per_stage
    boundary = 1 * (4096 // 2) * 4096 * 2
    logits = 1 * 4096 * (128256 // 2) * 2
    want = [2 * 8 * boundary] * 3 + [8 * logits]
    got = [(a.buffers_gib - b.buffers_gib) * GIB for a, b in zip(kept, base)]
    assert got == pytest.approx(want, rel=1e-9)
    # the reported peak carries it, with its 5 % reserve (the same activation peak is reported)
    for a, b, w in zip(kept, base, want):
        if a.activations_gib == b.activations_gib and a.gradients_gib == b.gradients_gib:
            assert (a.total_gib - b.total_gib) * GIB == pytest.approx(w * (1 + FRAGMENTATION), rel=1e-9)


def test_pipeline_keeps_nothing_by_default():
    """The preset (torchtitan 0.3.0 passes ``return_outputs=False``) and pp = 1 keep nothing beyond the priced."""
    assert STACKS["torchtitan"].pp_kept_outputs is False
    one = {
        **body(None),
        "training": {**body(None)["training"], "stack": {"base": "torchtitan", "pp_kept_outputs": True}},
    }
    assert estimate_plan(one).estimate.peak_memory_gib == estimate_plan(body(None)).estimate.peak_memory_gib
