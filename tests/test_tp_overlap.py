"""Overlapped tensor parallelism (issue 24): ``parallel.tp_comm_overlap`` where the stack runs it (Megatron/TE
userbuffers, torchtitan async TP), priced as the stack pipelines its SP collectives, searched with SP, exported with
the stack's own flags; refused where the stack or the configuration does not run it."""

from __future__ import annotations

import pytest

import planner
from api.exporters import export
from api.exporters.base import ExportOptions
from planner.answer.request import context, parse_request
from planner.api import estimate_plan
from planner.compose.terms import OVERLAP_SLOWDOWN
from planner.pricing.collectives import tp_collective
from planner.pricing.tp_overlap import overlap_delta, pair_seconds
from planner.specs.errors import MeshplanError
from planner.workload.tp_overlap import OverlapPair, overlap_pairs


def body(stack: object = "megatron", gbs: int = 128, **parallel) -> dict:
    return {
        "model": "llama3-70b",
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 4, "gpus_per_node": 8},
        "training": {"global_batch_size": gbs, "seq_len": 8192, "stack": stack},
        "parallel": parallel,
        "options": {"time_limit_s": 20, "num_workers": 1},
    }


PINS = {"tp": 8, "pp": 4, "dp": 1, "sequence_parallel": True}


def test_pairs_per_stack():
    ub, at = overlap_pairs("userbuffers", 8), overlap_pairs("async_tp", 8)
    assert len(ub) == 8 and {p.method for p in ub} == {"ring", "pipeline", "bulk"}
    # async TP: the 4 forward pairs and the 2 backward all-gathers; the summed input gradients' RS stay blocking
    assert len(at) == 6 and [p.op for p in at if p.bwd] == ["all_gather", "all_gather"]
    assert all(p.chunks == 8 for p in at) and {p.chunks for p in ub if p.method == "pipeline"} == {4}


def test_pair_formula():
    """ring: (n − 1)·max(g, c) + g; pipeline: g + (n − 1)·max(g, c) + c; bulk: max(G', C); G' = G + σ·min(G, C)."""
    ctx = context(parse_request(body()))
    act, tp, s = 8192 * 8192 * 2, 8, OVERLAP_SLOWDOWN
    blocking = tp_collective(ctx, "reduce_scatter", act, tp)
    big = 100 * blocking  # a GEMM far longer than the collective hides it, all but one chunk's comm
    bulk = OverlapPair("reduce_scatter", ("w1",), "wgrad", "bulk", True, 1)
    assert pair_seconds(ctx, bulk, big, big, act, tp, s) == pytest.approx(big + s * blocking)
    pipe = OverlapPair("reduce_scatter", ("w2",), "fwd", "pipeline", False, 4)
    c = tp_collective(ctx, "reduce_scatter", act / 4, tp)
    slowed = big + s * blocking
    assert pair_seconds(ctx, pipe, big, big / 4, act, tp, s) == pytest.approx(slowed + c)
    assert pair_seconds(ctx, bulk, 0.0, 0.0, act, tp, s) == pytest.approx(blocking)  # nothing to hide under


def test_overlap_is_off_unless_chosen_and_hides_tp_comm():
    off = planner.estimate(body(**PINS))
    assert off == planner.estimate(body(**PINS, tp_comm_overlap=False))
    for stack in ("megatron", {"base": "torchtitan", "kernels": "compiled"}):  # async TP: an Inductor pass
        a = planner.estimate(body(stack, **PINS))
        b = planner.estimate(body(stack, **PINS, tp_comm_overlap=True))
        # Megatron/TE overlaps all 8 SP collectives; torchtitan's async TP the 4 forward and 2 backward all-gathers
        # only (its reduce-scatters stay blocking): at least a fifth of the blocking TP time either way
        assert b.breakdown.tp_comm_s < 0.8 * a.breakdown.tp_comm_s
        assert b.step_time_s < a.step_time_s
    ctx = context(parse_request(body("torchtitan")))
    act = 8192 * 8192 * 2
    d = overlap_delta(ctx, "async_tp", 1, 8, "none", act, OVERLAP_SLOWDOWN)
    full = overlap_delta(ctx, "async_tp", 1, 8, "full", act, OVERLAP_SLOWDOWN)
    assert full.bwd == pytest.approx(d.bwd + d.fwd)  # the recomputed forward overlaps too


@pytest.mark.parametrize(
    "stack,pins,field",
    [
        ("meshplan", {**PINS, "tp_comm_overlap": True}, "parallel.tp_comm_overlap"),
        ("torchtitan", {**PINS, "tp_comm_overlap": True}, "parallel.tp_comm_overlap"),  # eager: no async TP
        ("deepspeed", {"tp": 8, "tp_comm_overlap": True}, "parallel.tp_comm_overlap"),
        (
            "megatron",
            {"tp": 8, "pp": 4, "dp": 1, "sequence_parallel": False, "tp_comm_overlap": True},
            "parallel.tp_comm_overlap",
        ),
    ],
)
def test_refusals_name_the_field(stack, pins, field):
    with pytest.raises(MeshplanError) as e:
        planner.estimate(body(stack, **pins))
    assert e.value.field == field
    if stack != "megatron":
        assert repr(stack) in str(e.value)
    with pytest.raises(MeshplanError) as e:
        planner.plan(body(stack, **pins))
    assert e.value.field == field


def test_search_chooses_it_jointly_with_sp():
    resp = planner.plan({**body(tp=8, pp=4), "top_k": 3})
    best = resp.plans[0].parallel
    assert best.tp_comm_overlap and best.sequence_parallel
    none = planner.plan({**body("meshplan", tp=8, pp=4), "top_k": 3})
    assert not any(p.parallel.tp_comm_overlap for p in none.plans)


def test_exports():
    opts = ExportOptions()
    mg = export(estimate_plan(body(**PINS, tp_comm_overlap=True)), "megatron", opts).content
    assert "--tp-comm-overlap" in mg and "--sequence-parallel" in mg
    assert "--tp-comm-overlap" not in export(estimate_plan(body(**PINS)), "megatron", opts).content
    tt = estimate_plan(body({"base": "torchtitan", "kernels": "compiled"}, **PINS, tp_comm_overlap=True))
    rec = export(tt, "torchtitan", opts).content
    assert "config.compile.enable_async_tensor_parallel = True" in rec and "config.compile.enable = True" in rec
    toml = export(tt, "torchtitan-toml", opts).content
    assert "enable_async_tensor_parallel = true" in toml and "[compile]" in toml
    with pytest.raises(MeshplanError) as e:
        export(estimate_plan(body(**PINS, tp_comm_overlap=True)), "deepspeed", opts)
    assert e.value.field == "plan.parallel.tp_comm_overlap"


def test_chunks_priced_at_their_shape():
    """Cost model 58: each chunk of a ring (tokens/tp rows) or TE pipeline pair (1/4 of the output columns) is its
    own GEMM, priced at its shape. Hand count on GPT-3 175B at TP 4, micro-batch 1, FP8 on an H100 (132 SMs,
    128×128 tiles): TE's fused QKV ring chunk is 512 × 9216 × 12288, ⌈512/128⌉·⌈9216/128⌉ = 288 tiles in 3 waves
    of 132 (288/396 busy) where the whole 2048-row GEMM's 1,152 tiles run in 9 waves (1152/1188): the 4 chunks take
    (1152/1188)/(288/396) = 4/3 of the whole GEMM, the FP8 ceiling binding at both shapes."""
    from planner.pricing.gpu import gemm_time
    from planner.pricing.tp_overlap import _gemm_seconds, chunk_seconds

    req = {
        "model": "gpt3-175b",
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 4, "gpus_per_node": 8},
        "training": {"global_batch_size": 64, "seq_len": 2048, "precision": "fp8", "stack": "megatron"},
        "parallel": {"tp": 4, "pp": 8, "sequence_parallel": True, "tp_comm_overlap": True},
    }
    ctx = context(parse_request(req))
    ub = {(p.gemms, p.phase): p for p in overlap_pairs("userbuffers", 4)}
    qkv = ub[(("wq", "wk", "wv"), "fwd")]
    whole, chunk = _gemm_seconds(ctx, qkv, 2048, 4), chunk_seconds(ctx, qkv, 2048, 4)
    waves_whole, waves_chunk = 1152 / (9 * 132), 288 / (3 * 132)
    assert 4 * chunk / whole == pytest.approx(waves_whole / waves_chunk, rel=1e-9)
    k = ctx.residuals.compute_scale  # the layer's own GEMMs carry the compute residual; so do the pair's
    assert chunk == pytest.approx(k * gemm_time(ctx, 512, 9216, 12288, fp8=True), rel=1e-12)  # one fused GEMM
    # the TE pipeline pair (proj → reduce-scatter) splits the output columns: 2048 × 3072 × 3072 a chunk (16·24 = 384
    # tiles in 3 waves, as the whole GEMM's 1,536 in 12: no wave loss; the measured table's narrower-N rate binds)
    proj = ub[(("wo",), "fwd")]
    assert proj.split == "cols" and proj.chunks == 4
    assert chunk_seconds(ctx, proj, 2048, 4) == pytest.approx(k * gemm_time(ctx, 2048, 3072, 3072, fp8=True), rel=1e-12)
    assert 4 * chunk_seconds(ctx, proj, 2048, 4) >= _gemm_seconds(ctx, proj, 2048, 4)
    # and the pair's overlapped time runs its n chunks: ring (n − 1)·max(g, c) + g ≥ n·g
    act = 2048 * 12288 * 2
    assert pair_seconds(ctx, qkv, whole, chunk, act, 4, OVERLAP_SLOWDOWN) >= 4 * chunk
