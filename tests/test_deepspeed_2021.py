"""Issue 27 (the 2021 ZeRO-3 runs): the ``deepspeed-2021`` preset (DeepSpeed v0.5.0, ``planner.specs.stack_eras``) and
ZeRO-3 as that release issues it (``planner.compose.zero3_sequence``): the parameters a block fetches and reduces, the
collectives per micro-batch against hand counts from the code's rules (closed forms of the reuse distance, not the
trace walk), a small timeline against a hand-written one, and the preset's plans exported to DeepSpeed's config."""

from __future__ import annotations

import json

import pytest

import planner
from api.exporters import ExportOptions, export
from planner.answer.request import context, parse_request
from planner.compose.terms import shared_terms
from planner.compose.zero3_sequence import (
    MAX_REUSE,
    PERSISTENCE_THRESHOLD,
    BlockParams,
    block_params,
    simulate,
)
from planner.pricing.launches import Kernels, chain, launch_seconds, zero3_kernels
from planner.specs.catalog import get_model
from planner.specs.errors import MeshplanError
from planner.specs.stacks import STACKS

BASE = {
    "model": "gpt3-1.3b",
    "cluster": {"gpu": "a100-sxm4-80gb", "num_nodes": 2, "gpus_per_node": 8},
    "training": {"global_batch_size": 64, "seq_len": 2048, "stack": "deepspeed-2021", "precision": "fp16"},
}


def test_what_v050_runs() -> None:
    s = STACKS["deepspeed-2021"]
    assert (s.zero_stages, s.pipeline_zero_stages, s.schedules, s.recompute) == (
        (0, 1, 2, 3),
        (0, 1),
        ("1f1b",),
        ("none", "full"),
    )
    assert (s.precisions, s.nccl, s.cp_comms, s.sequence_parallel, s.moe) == (
        ("fp16", "fp32"),
        "2.10",
        (),
        False,
        False,
    )
    assert (s.zero3_fetch, s.zero1_sync, s.zero3_reduce_bucket, s.grad_accumulation) == (
        "param",
        "all_reduce",
        500_000_000,
        "deepspeed",
    )
    # today's preset keeps its own issuing (its reference plans: tests/test_plan_reproducible.py)
    d = STACKS["deepspeed"]
    assert (d.zero3_fetch, d.zero1_sync, d.nccl) == ("module", "reduce_scatter", "2.23")


# ---- what a block fetches: one gather per weight; biases and LayerNorms persist --------------------------------


def _gpt_block(h: int, t: int) -> BlockParams:
    """Hand: Megatron GPT block on a TP rank — query_key_value 3h²/t (bias 3h/t), dense h²/t (bias h, replicated),
    h→4h 4h²/t (bias 4h/t), 4h→h 4h²/t (bias h); LayerNorm weight + bias (h, h) before attention and before the MLP."""
    return BlockParams(
        (3 * h * h // t, h * h // t, 4 * h * h // t, 4 * h * h // t),
        ((3 * h // t, h, h), (h,), (4 * h // t, h, h), (h,)),
    )


@pytest.mark.parametrize(
    ("model", "tp", "h"), [("gpt3-175b", 1, 12288), ("gpt3-175b", 8, 12288), ("gpt3-1.3b", 1, 2048)]
)
def test_a_block_fetches_its_weights_and_keeps_its_small_parameters(model: str, tp: int, h: int) -> None:
    got = block_params(get_model(model), tp)
    assert got == _gpt_block(h, tp)
    assert all(n >= PERSISTENCE_THRESHOLD for n in got.fetched)
    assert all(n < PERSISTENCE_THRESHOLD for r in got.riders for n in r)


# ---- collectives per micro-batch: hand counts from the rules -----------------------------------------------------


def hand_counts(sizes: tuple[int, ...], layers: int, recompute: bool, per_block_grads: int) -> tuple[int, int, int]:
    """Gathers forward, backward and reduce-scatters of one micro-batch, from ``_keep_for_later``'s rule written as
    closed forms: a parameter stays gathered when the elements fetched between two uses are under 1e9. Block l of L,
    parameter j (forward order), P the block's total: forward → backward 2(L-1-l)·P + 2·Σ_{i>j} s_i (no recompute);
    forward → recompute 3(L-1-l)·P + P - s_j (the later blocks' forward, recompute and backward, then this block's
    other weights); recompute → backward 2·Σ_{i>j} s_i."""
    p = sum(sizes)
    after = [sum(sizes[j + 1 :]) for j in range(len(sizes))]
    bwd = 0
    for layer in range(layers):
        later = (layers - 1 - layer) * p
        for j, s in enumerate(sizes):
            if recompute:
                bwd += 3 * later + p - s >= MAX_REUSE  # the recompute's gather
                bwd += 2 * after[j] >= MAX_REUSE  # the backward's
            else:
                bwd += 2 * later + 2 * after[j] >= MAX_REUSE
    return layers * len(sizes), bwd, layers * per_block_grads


@pytest.mark.parametrize(
    ("model", "recompute", "expect"),
    [
        ("gpt3-175b", True, (384, 672, 1152)),  # 96 blocks: 4 + (4 recompute + 3: the 4h→h weight kept) / 12
        ("gpt3-175b", False, (384, 383, 1152)),  # only the last block's 4h→h weight is kept for its backward
        ("gpt3-1.3b", True, None),
        ("gpt3-1.3b", False, None),
        ("gpt3-13b", True, None),
    ],
)
def test_collective_counts_per_micro_batch_match_the_hand_count(model, recompute, expect) -> None:
    m = get_model(model)
    bp = block_params(m, 1)
    grads = len(bp.fetched) + sum(len(r) for r in bp.riders)
    hand = hand_counts(bp.fetched, m.num_layers, recompute, grads)
    if expect is not None:
        assert hand == expect
    z = simulate(bp, m.num_layers, (1.0,) * 4, (2.0,) * 4, recompute, lambda n: 0.01, lambda n: 0.01, 0.0)
    assert (z.gathers_fwd, z.gathers_bwd, z.reduce_scatters) == hand


# ---- the timeline ------------------------------------------------------------------------------------------------


def test_a_small_timeline_matches_the_hand_one() -> None:
    """Two blocks of two 6e8-element weights (each over the 5e7 prefetch bucket: one prefetch at a time; two gathered
    reach the 1e9 live limit), forward 1 s and backward 2 s per weight, 2 s per gather, 0.5 s per reduce-scatter.
    By hand (host t, compute end, NCCL end): F00 gathered blocking 0→2, prefetch F01 2→4, compute 2→3; F01 waits →4,
    prefetch F10 4→6, compute 4→5; F10 waits →6, prefetch F11 6→8, compute 6→7; F11 waits →8, prefetch B10 8→10
    (B11 is kept: reused at distance 0), compute 8→9 — forward 9 s. B11 compute 9→11; B10 waits →11, prefetch B01
    11→13, compute 11→13, its gradient overflows the 5e8 bucket: B11's reduced 13→13.5; B01 waits →13.5, prefetch B00
    13.5→15.5, compute →15.5, B10's reduced 15.5→16; B00 waits →16, compute 16→18, B01's reduced 16→16.5; the
    epilogue waits 16.5 and reduces B00's 16.5→17: the backward ends at 18 — 9 s."""
    z = simulate(
        BlockParams((600_000_000, 600_000_000), ((), ())),
        2,
        (1.0, 1.0),
        (2.0, 2.0),
        False,
        lambda n: 2.0,
        lambda n: 0.5,
        0.0,
    )
    assert (z.fwd, z.bwd) == (9.0, 9.0)
    assert (z.gathers_fwd, z.gathers_bwd, z.reduce_scatters) == (4, 3, 4)


@pytest.mark.parametrize("recompute", [False, True])
def test_free_collectives_leave_the_compute(recompute: bool) -> None:
    bp = block_params(get_model("gpt3-1.3b"), 1)
    cf, cb = (0.1, 0.2, 0.3, 0.4), (1.0, 2.0, 3.0, 4.0)
    z = simulate(bp, 24, cf, cb, recompute, lambda n: 0.0, lambda n: 0.0, 0.0)
    assert z.fwd == pytest.approx(24 * sum(cf))
    assert z.bwd == pytest.approx(24 * (sum(cb) + (sum(cf) if recompute else 0.0)))


def test_without_compute_the_collectives_run_one_after_another() -> None:
    """No compute: every gather waits for the one before (one NCCL stream, a device sync before each) — the forward
    is its gathers' sum; the backward its gathers' and reduce-scatters' sum."""
    bp = block_params(get_model("gpt3-175b"), 1)
    z = simulate(bp, 96, (0.0,) * 4, (0.0,) * 4, True, lambda n: n * 1e-9, lambda n: 1e-3, 0.0)
    assert z.fwd == pytest.approx(96 * sum(bp.fetched) * 1e-9)
    regathered = sum(bp.fetched) + sum(bp.fetched[:3])  # the recompute's four, the backward's three
    assert z.bwd == pytest.approx(96 * regathered * 1e-9 + z.reduce_scatters * 1e-3)


# ---- the priced plan -----------------------------------------------------------------------------------------------


def _ctx(**parallel):
    return context(parse_request({**BASE, "parallel": {"tp": 1, "pp": 1, "micro_batch_size": 1, **parallel}}))


def test_the_block_term_is_the_simulated_micro_batch_per_block() -> None:
    """The priced ZeRO-3 block term is the simulation of the rank's 24 blocks (its compute from the layer group, each
    collective at dp_collective's price) over 24, and beyond the layer's compute."""
    from planner.compose.layer_group import OVERLAP_SLOWDOWN, layer_group
    from planner.pricing.collectives import Groups, dp_collective

    ctx = _ctx(dp=16, zero_stage=3, recompute="full")
    s = shared_terms(ctx, 1, 1, False, "full", 3, 16)
    lg = layer_group(ctx, 1, 1, False, "full", False, 1, 1, "transformer_block")
    g = Groups.of(ctx, 1, 16)
    bp = block_params(ctx.model, 1)
    share = [n / sum(bp.fetched) for n in bp.fetched]
    z = simulate(
        bp,
        24,
        tuple(lg.work_f[0] * x for x in share),
        tuple((lg.work_b[0] - lg.work_f[0]) * x for x in share),
        True,
        lambda n: dp_collective(ctx, "all_gather", 2 * n, 16, g.dp_link, g.per_node),
        lambda n: dp_collective(ctx, "reduce_scatter", 2 * n, 16, g.dp_link, g.per_node),
        OVERLAP_SLOWDOWN,
        zero3_kernels(ctx, 16, 2, 2),
    )
    # + the gradient-accumulation pass after the simulated backward (cost model 37): ZeRO-3 adds the reduced 16-bit
    # partition (1/16 of the block's parameters) in place, read 2 + 2 and write 2 bytes each (zero/stage2.py:648)
    from planner.pricing.gpu import hbm_time
    from planner.workload.ops import param_tensors

    n = param_tensors(ctx.model, "transformer_block")[0]
    acc = n * hbm_time(ctx, lg.params[0] / n * 3 * 2 / 16)
    assert (s.fwd.layer, s.bwd.layer) == (round(z.fwd / 24 * 1e9), round(z.bwd / 24 * 1e9) + round(acc * 1e9))
    assert s.fwd_z3.layer > 0 and s.bwd_z3.layer > 0


def test_zero1_all_reduces_its_gradients_in_buckets() -> None:
    """ZeRO-1 at v0.5.0 (stage 1: contiguous gradients off → ``buffered_reduce_fallback`` → ``dist.all_reduce`` per
    5e8-element bucket): the step's sync is the rank's fp16 gradients at one all-reduce bucket's rate."""
    ctx = _ctx(dp=16, zero_stage=1)
    s = shared_terms(ctx, 1, 1, False, "none", 1, 16)
    from planner.compose.layer_group import layer_group
    from planner.pricing.collectives import Groups

    lg = layer_group(ctx, 1, 1, False, "none", False, 1, 1, "transformer_block")
    g = Groups.of(ctx, 1, 16)
    total = lg.params[1] + lg.params[2] + lg.params[0] * ctx.model.num_layers
    bucket = min(500_000_000, total) * 2
    per_byte = ctx.comm.time("all_reduce", bucket, 16, g.dp_link, g.per_node) / bucket
    assert s.sync.layer == round(per_byte * lg.params[0] * 2 * 1e9)


def test_bf16_is_refused_naming_what_v050_trains_in() -> None:
    with pytest.raises(MeshplanError) as err:
        planner.plan({**BASE, "training": {**BASE["training"], "precision": "bf16"}})
    assert err.value.field == "training.precision" and "fp16" in err.value.message


def test_free_plans_stay_inside_v050_and_export_to_deepspeed() -> None:
    plans = planner.plan({**BASE, "top_k": 5}).plans
    assert plans
    for p in plans:
        c = p.parallel
        assert c.zero_stage in (0, 1, 2, 3) and (c.pp == 1 or c.zero_stage <= 1) and not c.sequence_parallel
        cfg = json.loads(export(p, "deepspeed", ExportOptions()).content)
        assert cfg["zero_optimization"] == {"stage": c.zero_stage} and cfg["fp16"]["enabled"] is True
        assert "tensor_parallel" not in cfg and "bf16" not in cfg  # v0.5.0 has neither key


def test_a_tp_plan_exports_without_autotp() -> None:
    plan = planner.estimate_plan({**BASE, "parallel": {"tp": 2, "pp": 1, "dp": 8, "zero_stage": 3}})
    cfg = json.loads(export(plan, "deepspeed", ExportOptions()).content)
    assert "tensor_parallel" not in cfg
    assert any("model code under DeepSpeed v0.5.0" in w for w in cfg["meshplan"]["warnings"])


def test_a_model_whose_every_tensor_persists_gathers_nothing() -> None:
    """tiny-gpt (h = 64): every weight is under the 1e5-element persistence threshold — nothing to fetch; it prices
    as the module fetch does (the per-kind gradients' reduce-scatters) instead of failing."""
    assert block_params(get_model("tiny-gpt"), 1).fetched == ()
    tied = get_model("tiny-gpt").model_copy(update={"tie_embeddings": True}).model_dump()  # as Megatron's GPT
    req = {**BASE, "model": tied, "training": {**BASE["training"], "seq_len": 64, "global_batch_size": 16}}
    est = planner.estimate_plan({**req, "parallel": {"tp": 1, "pp": 1, "dp": 16, "zero_stage": 3}}).estimate
    assert est.step_time_s > 0


# ---- the kernels around each collective (planner.pricing.launches) ---------------------------------------------------


def _chain_by_steps(free: float, host: float, count: int, launch: float, each: float) -> float:
    """The recurrence itself: kernel k launched by host + k·launch, run after the one before."""
    end = free
    for k in range(1, count + 1):
        end = max(end, host + k * launch) + each
    return end


@pytest.mark.parametrize(
    ("free", "host", "count", "launch", "each"),
    [
        (0.0, 0.0, 1, 4e-6, 1e-6),  # one kernel on an idle stream: its launch, then it
        (0.0, 0.0, 384, 4e-6, 1e-6),  # launch-bound: 384 launches + the last kernel
        (0.0, 0.0, 384, 4e-6, 1e-5),  # device-bound: the first launch + 384 kernels
        (1.0, 0.0, 1536, 4e-6, 1e-6),  # a busy stream: the kernels queue behind it
        (5e-3, 0.0, 1536, 4e-6, 1e-6),  # the stream frees midway through the launches
        (0.0, 2.0, 7, 1.0, 1.0),
        (3.0, 2.0, 0, 1.0, 1.0),  # nothing launched: the stream as it was
    ],
)
def test_a_chain_of_launches_matches_its_recurrence(free, host, count, launch, each) -> None:
    assert chain(free, host, count, launch, each) == pytest.approx(_chain_by_steps(free, host, count, launch, each))


@pytest.mark.parametrize(
    ("n", "ranks", "elt", "grad_elt", "expect"),
    [
        # (fill, shard, one gather copy, one scatter copy, div, norm) in bytes, by hand from pp:838/861, ProcessGroupNCCL's
        # per-rank copy_ of n / ranks elements (read + write), stage3:1985 (read + write) and the norm (read)
        (150_994_944, 384, 2, 2, (2 * 150_994_944, *(4 * 393_216,) * 3, 4 * 150_994_944, 2 * 150_994_944)),
        (12_288, 1536, 2, 2, (2 * 12_288, 4 * 8, 4 * 8, 4 * 8, 4 * 12_288, 2 * 12_288)),
        # padded to 16 × 2305
        (36_865, 16, 2, 4, (2 * 16 * 2305, 4 * 2305, 4 * 2305, 8 * 2305, 8 * 36_865, 2 * 36_865)),
    ],
)
def test_the_kernels_move_the_bytes_the_code_copies(n, ranks, elt, grad_elt, expect) -> None:
    k = Kernels(1.0, ranks, elt, grad_elt, lambda b: b)  # seconds = bytes: the bytes themselves
    assert (k.fill(n), k.shard(n), k.gather_copy(n), k.scatter_copy(n), k.div(n), k.norm(n)) == expect


def test_a_timeline_with_its_kernels_matches_the_hand_one() -> None:
    """One block of one 6e8-element weight on 2 ranks, launch 1 s, 1.2e9 B/s of HBM (fill, shard, each copy, norm 1 s;
    div 2 s), gather 5 s, reduce-scatter 3 s, forward 10 s, backward 20 s. By hand (host t, comm stream, compute, NCCL):
    fill launched 0→1, runs 1→2; sync t = 2; shard launched 2→3, runs 3→4; NCCL launched 3→4, runs 4→9; its 2 copies
    out launched 4→5, 5→6, run 9→10, 10→11; the fetch's sync t = 11; the norm launched 11→12 runs 12→13, its copy to the
    host 13; compute launched 13→14, runs 14→24 — forward 24 s (without the kernels 5 + 10 = 15). The backward (kept:
    no gather): norm 25, compute 26→46; the epilogue's div launched 26→27 runs 27→29, 2 copies in launched 27→29 run
    29→31, NCCL launched 29→30 runs 31→34 — the backward ends at 46: 22 s (without: 20)."""
    args = (BlockParams((600_000_000,), ((),)), 1, (10.0,), (20.0,), False, lambda n: 5.0, lambda n: 3.0, 0.0)
    z = simulate(*args, Kernels(1.0, 2, 2, 2, lambda b: b / 1.2e9))
    assert (z.fwd, z.bwd) == (24.0, 22.0)
    z0 = simulate(*args)
    assert (z0.fwd, z0.bwd) == (15.0, 20.0)
    assert (z.gathers_fwd, z.gathers_bwd, z.reduce_scatters) == (z0.gathers_fwd, z0.gathers_bwd, z0.reduce_scatters)


@pytest.mark.parametrize("dp", [2, 64, 384, 1536])
def test_the_list_collectives_launches_grow_with_the_ranks(dp: int) -> None:
    """No compute, free kernels and collectives: each all-gather costs its host (ranks + 3) launches (fill, shard,
    NCCL, ranks copies), each fetch's tensors two launches apiece (norm, copy to the host) and the compute one; each
    reduce-scatter (ranks + 2) (div, ranks copies, NCCL) — GPT-3 175B's 96 blocks, full recompute, by hand. The
    forward's last fetch prefetches the recompute's first weight: a backward gather issued in the forward."""
    m = get_model("gpt3-175b")
    bp = block_params(m, 1)
    launch = 4e-6
    k = Kernels(launch, dp, 2, 2, lambda b: 0.0)
    z = simulate(bp, 96, (0.0,) * 4, (0.0,) * 4, True, lambda n: 0.0, lambda n: 0.0, 0.0, k)
    tensors = len(bp.fetched) + sum(len(r) for r in bp.riders)  # 12 a block
    assert (z.gathers_fwd, z.gathers_bwd) == (96 * 4, 96 * 7)  # test_collective_counts_per_micro_batch_...
    fwd = 96 * (len(bp.fetched) * ((dp + 3) + 1) + 2 * tensors) + (dp + 3)
    assert z.fwd == pytest.approx(fwd * launch)
    fetches = 96 * 2 * len(bp.fetched)  # recompute's and backward's fetches: each its compute's launch
    hand_b = (96 * 7 - 1) * (dp + 3) + fetches + 96 * 2 * 2 * tensors + z.reduce_scatters * (dp + 2)
    assert z.bwd == pytest.approx(hand_b * launch)
    assert launch_seconds(_ctx(dp=16, zero_stage=3)) == pytest.approx(4e-6)  # GPU_LAUNCH_US, no residual on this row
