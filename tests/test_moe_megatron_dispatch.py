"""Megatron-core's alltoall token dispatcher and grouped experts as the megatron stack prices them (``Stack.moe_dispatch
= "megatron"``; cost model 36; Megatron-core core_v0.16.1 ``token_dispatcher.py`` / ``experts.py``): against hand
formulas written here from that code, the changes to ``workload.expert_parallel.expert_work`` beside the generic
dispatch — the sort by local expert and its inverse (two more read + write passes of the routed rows when a rank
holds more than one expert), the saved tensors per routed row (fc1's input, fc1's output, the activation's output: no
combine copy), the dense TE MLP it replaces (3·f per token with SwiGLU), the probabilities' all-to-all and the token
counts' all-gather, gpt-oss's per-expert fc2 bias loop (6 passes of the rows each way) and, under FP8, the experts'
GEMM inputs saved at 1 byte (TE v2.9 ``GroupedLinear``); and the expert floor still below the exact terms on the
megatron stack."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.answer.request import context
from planner.compose.experts import expert_floor, expert_terms
from planner.pricing.expert_parallel import all_to_all_seconds, expert_seconds
from planner.pricing.gpu import hbm_time
from planner.specs import PlanRequest
from planner.specs.catalog import get_model
from planner.specs.stacks import STACKS
from planner.workload.expert_parallel import expert_work


def _model(name: str, **update):
    m = get_model(name)
    assert m.moe is not None
    return m.model_copy(update={"moe": m.moe.model_copy(update=update)}) if update else m


# (model, mbs, seq, tp, sp, ep, etp, recompute, pad): catalog models of the published runs and edge cases
CASES = [
    ("qwen3-30b-a3b", 2, 4096, 1, False, 8, 1, "none", False),  # the 25.11 FP8 row's layout: 16 local experts
    ("gpt-oss-120b", 1, 4096, 1, False, 8, 1, "none", False),  # the 26.04.01 row's: expert biases
    ("gpt-oss-120b", 4, 4096, 1, False, 8, 1, "full", False),  # full recomputation reruns the small exchanges
    ("qwen3-30b-a3b", 1, 2048, 1, False, 128, 1, "none", False),  # one expert a rank: no sort by local expert
    ("qwen3-30b-a3b", 1, 2048, 1, False, 1, 1, "none", False),  # ep 1: the sort still runs, no exchange
    ("mixtral-8x22b", 1, 4096, 4, True, 2, 4, "selective", False),  # etp = tp: rows gathered over TP
    ("mixtral-8x22b", 1, 4096, 4, True, 2, 1, "none", True),  # padded to capacity: no counts' all-gather
]


@pytest.mark.parametrize(("name", "mbs", "seq", "tp", "sp", "ep", "etp", "recompute", "pad"), CASES)
def test_megatron_dispatch_against_hand_formulas(name, mbs, seq, tp, sp, ep, etp, recompute, pad) -> None:
    m = _model(name, capacity_factor=1.25, pad_to_capacity=True) if pad else _model(name)
    moe = m.moe
    assert moe is not None
    elt = 2
    gen = expert_work(m, mbs, seq, tp, sp, ep, etp, elt, recompute)
    meg = expert_work(m, mbs, seq, tp, sp, ep, etp, elt, recompute, 6.0, "megatron", "te")
    h, E, k, f = m.hidden_size, moe.num_experts, moe.top_k, moe.expert_ffn_hidden_size // etp
    full = mbs * seq
    T = full // tp if (sp and tp > 1) else full
    T_in = full if etp > 1 else T
    local = E // ep
    if pad:  # C = ⌈T·k/E × cf⌉ rows for each expert, C·E sent, C·E·T_in/T into the experts
        C = -(-(T * k * 5) // (E * 4))
        sent, routed = C * E, C * E * (T_in // T)
    else:
        sent, routed = T * k, T_in * k
    rows_all = gen.gemms[1][0] * local  # the grouped GEMMs' rows on this rank
    # sort_chunks_by_idxs after the dispatch and its inverse before the combine: two more read + write passes
    sort = 2 * 2.0 * routed * h * elt if local > 1 else 0.0
    bias = 6.0 * rows_all * h * elt if moe.expert_bias else 0.0
    assert meg.mem_bytes - gen.mem_bytes == pytest.approx(sort, rel=1e-12)
    assert gen.bias_bytes == (0.0, 0.0) and meg.bias_bytes == pytest.approx((bias, bias), rel=1e-12)
    # saved per routed row: generic β(2h + 3f), Megatron β(h + 3f); the dense TE MLP 3·f (SwiGLU), generic 4·f;
    # gpt-oss's clamps also keep fc1's output beside the cat's result (2f·β a row; cost model 49)
    clamp = 2 * f * elt if moe.swiglu_limit is not None else 0
    assert gen.saved - meg.saved == pytest.approx(routed * (elt * h - clamp), rel=1e-12)
    assert not moe.shared_experts  # these models have none: the router's fp32 scores are the rest
    assert meg.saved == pytest.approx(routed * (elt * (h + 3 * f) + clamp) + 4.0 * T * E, rel=1e-12)
    # under FP8 TE's GroupedLinear saves fc1's and fc2's inputs quantized, columnwise only: 1 byte an element
    q8 = expert_work(m, mbs, seq, tp, sp, ep, etp, elt, recompute, 6.0, "megatron", "te", True)
    assert q8.saved == pytest.approx(routed * ((h + f) * 1 + 2 * f * elt + clamp) + 4.0 * T * E, rel=1e-12)
    assert expert_work(m, mbs, seq, tp, sp, ep, etp, elt, recompute, 6.0, "generic", "zoo", True).saved == gen.saved
    fd = m.ffn_hidden_size // tp
    assert gen.dense_saved == 4.0 * full * fd * elt and meg.dense_saved == 3.0 * full * fd * elt
    # the exchanges: the tokens' as before; Megatron's probabilities (T·k·β, forward and its backward) and counts
    # (E int64 a rank, as an all-to-all of ep·E·8 bytes; not when padded), the forward's again under full recompute
    tokens_f = [(c.nbytes, c.count) for c in gen.a2a_fwd]
    tokens_b = [(c.nbytes, c.count) for c in gen.a2a_bwd]
    if ep == 1:
        assert meg.a2a_fwd == () and meg.a2a_bwd == ()
        return
    small = [(sent * elt, 1)] + ([] if pad else [(ep * E * 8.0, 1)])
    rerun = small if recompute == "full" else []
    assert [(c.nbytes, c.count) for c in meg.a2a_fwd] == tokens_f + small
    assert [(c.nbytes, c.count) for c in meg.a2a_bwd] == tokens_b + [(sent * elt, 1)] + rerun
    assert all(c.op == "all_to_all" and c.axis == "ep" for c in meg.a2a_fwd + meg.a2a_bwd)


def _megatron_request(model: str) -> dict:
    return {
        "model": model,
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 8, "gpus_per_node": 8},
        "training": {"global_batch_size": 512, "seq_len": 4096, "stack": "megatron"},
        "parallel": {"tp": 1, "pp": 4, "ep": 8, "micro_batch_size": 1, "zero_stage": 1, "recompute": "none"},
    }


@pytest.mark.parametrize(
    ("name", "recompute"), [("gpt-oss-120b", "none"), ("gpt-oss-120b", "full"), ("qwen3-30b-a3b", "none")]
)
def test_expert_seconds_add_the_bias_passes_each_way(name: str, recompute: str) -> None:
    """The pricing: forward and backward gain the bias loop's bytes at achieved HBM, each way its own count (not the
    memory-bound ops' backward-twice rule), × the memory residual; full recomputation reruns the forward's."""
    ctx = context(PlanRequest.model_validate(_megatron_request(name)))
    st = ctx.stack
    assert st.moe_dispatch == "megatron"
    w = expert_work(
        ctx.model, 1, 4096, 1, False, 8, 1, ctx.elt, recompute, 3.0 * ctx.elt, st.moe_dispatch, st.activations
    )
    moe = ctx.model.moe
    assert moe is not None
    b = 6.0 * w.gemms[1][0] * (moe.num_experts // 8) * ctx.model.hidden_size * ctx.elt if moe.expert_bias else 0.0
    assert w.bias_bytes == pytest.approx((b, b), rel=1e-12)
    with_bias = expert_seconds(ctx, w, 1, 8, recompute)
    without = expert_seconds(ctx, replace(w, bias_bytes=(0.0, 0.0)), 1, 8, recompute)
    t = ctx.residuals.memory_scale * (hbm_time(ctx, b) if b else 0.0)
    assert with_bias.fwd - without.fwd == pytest.approx(t, rel=1e-9, abs=1e-15)
    assert with_bias.bwd - without.bwd == pytest.approx(t * (2 if recompute == "full" else 1), rel=1e-9, abs=1e-15)
    assert (b > 0) == (name == "gpt-oss-120b")


def test_only_megatron_core_stacks_dispatch_megatron_style() -> None:
    """megatron, and nemo-2407 (NeMo 24.07 runs Megatron-core 338af514's token dispatcher: NeMo r2.0.0rc1
    Dockerfile.ci:35-38); every other stack permutes generically."""
    core = {"megatron", "nemo-2407"}
    assert all(STACKS[sid].moe_dispatch == "megatron" for sid in core)
    assert all(s.moe_dispatch == "generic" for sid, s in STACKS.items() if sid not in core)


def test_expert_floor_stays_below_on_megatron() -> None:
    """``experts.expert_floor`` (ep-free: the generic permutes, no bias loop, the tokens' all-to-alls) is at most
    the exact Megatron terms at every ep."""
    ctx = context(PlanRequest.model_validate(_megatron_request("gpt-oss-120b")))
    moe = ctx.model.moe
    assert moe is not None
    for recompute in ("none", "full"):
        fl = expert_floor(ctx, 1, 1, False, recompute, 1)
        for ep in (1, 2, 4, 8, 16, 32, 64, 128):
            x = expert_terms(ctx, 1, 1, False, recompute, ep, 1)
            a2a = all_to_all_seconds(ctx, fl.dispatched, ep, 1)
            g = fl.scale * fl.grouped(moe.num_experts, ep)
            assert fl.fwd + g + fl.a2a_counts[0] * a2a <= x.fwd + 1e-12
            assert fl.bwd + (3 if fl.rerun else 2) * g + fl.a2a_counts[1] * a2a <= x.bwd + 1e-12
