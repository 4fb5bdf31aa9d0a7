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


def body(stack: str = "megatron", gbs: int = 128, **parallel) -> dict:
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
    for stack in ("megatron", "torchtitan"):
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
    tt = estimate_plan(body("torchtitan", **PINS, tp_comm_overlap=True))
    rec = export(tt, "torchtitan", opts).content
    assert "config.compile.enable_async_tensor_parallel = True" in rec and "config.compile.enable = True" in rec
    toml = export(tt, "torchtitan-toml", opts).content
    assert "enable_async_tensor_parallel = true" in toml and "[compile]" in toml
    with pytest.raises(MeshplanError) as e:
        export(estimate_plan(body(**PINS, tp_comm_overlap=True)), "deepspeed", opts)
    assert e.value.field == "plan.parallel.tp_comm_overlap"
