"""torchtitan's rowwise FP8 runs as its 2025-06 code runs them (cost model 64), checked against hand counts:

* async TP fuses no all-gather whose gathered 16-bit tensor feeds an FP8 cast (torch
  ``_inductor/fx_passes/micro_pipeline_tp.py`` ``_find_consumer_matmuls``: only an mm / ``_scaled_mm`` that reads the
  gathered tensor itself; pytorch/pytorch issue 149990): under rowwise its 2 forward reduce-scatter pairs stay, its 2
  forward and 2 backward all-gathers run blocking with their layout copies (``workload.fp8.fp8_cast_after_gather``);
* op-level selective checkpointing reruns the FP8 casts of the linears whose mm it recomputes (wk, wo, w3), the amax
  pass too where torchao's amax is ``aten.amax`` (rowwise; tensorwise's ``aten.max`` is kept:
  ``workload.fp8.sac_rerun_cast_ops``)."""

from __future__ import annotations

import pytest

from planner.answer.request import context, parse_request
from planner.pricing.gpu import hbm_time
from planner.pricing.layer_times import selective_share
from planner.pricing.tp_overlap import overlap_delta, pair_seconds
from planner.specs.stacks import STACKS
from planner.workload.fp8 import fp8_cast_after_gather, sac_rerun_cast_ops
from planner.workload.sp_copies import sp_copy_bytes
from planner.workload.tp_overlap import overlap_pairs

H, F, KV = 4096, 14336, 1024  # Llama 3 8B: hidden, FFN, K/V width (8 heads of 128)


def request(recipe: str | None, tp: int = 8, sp: bool = True, stack: str = "torchtitan", mbs: int = 2):
    training = {"global_batch_size": 8 * mbs, "seq_len": 8192, "precision": "fp8" if recipe else "bf16"}
    training["stack"] = stack
    if recipe is not None:
        training["fp8_recipe"] = recipe
    parallel = {"tp": tp, "pp": 1, "dp": 8 // tp, "micro_batch_size": mbs, "zero_stage": 3, "recompute": "selective"}
    parallel["sequence_parallel"] = sp
    return {
        "model": "llama3-8b",
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "gpus_per_node": 8},
        "training": training,
        "parallel": parallel,
    }


def ctx_of(recipe: str | None, **kw):
    return context(parse_request(request(recipe, **kw)))


@pytest.mark.parametrize(
    ("recipe", "tp", "sp", "stack", "expected"),
    [
        ("rowwise", 8, True, "torchtitan", True),  # plain ColwiseParallel: bf16 gather, then torchao's cast
        ("rowwise", 2, True, "torchtitan", True),
        ("tensorwise", 8, True, "torchtitan", False),  # Float8ColwiseParallel: cast on the shard, FP8 gather
        (None, 8, True, "torchtitan", False),  # bf16: the gather feeds the mm
        ("rowwise", 1, False, "torchtitan", False),  # no TP
        ("rowwise", 8, False, "torchtitan", False),  # no sequence-parallel all-gather
        ("delayed", 8, True, "megatron", False),  # TE gathers its FP8 norm output (fp8_sp_gather)
    ],
)
def test_cast_after_gather_by_recipe(recipe, tp, sp, stack, expected):
    assert fp8_cast_after_gather(ctx_of(recipe, tp=tp, sp=sp, stack=stack), tp, sp) is expected


@pytest.mark.parametrize(
    ("kind", "flag", "expected"),
    [
        # (op, phase) of each pair, by hand from the module docstring
        (
            "async_tp",
            False,
            [("all_gather", "fwd")] * 2 + [("reduce_scatter", "fwd")] * 2 + [("all_gather", "dgrad")] * 2,
        ),
        ("async_tp", True, [("reduce_scatter", "fwd")] * 2),  # the two _scaled_mm -> reduce-scatter pairs alone
        ("userbuffers", False, None),  # TE casts inside its own overlap: the flag changes nothing
        ("userbuffers", True, None),
    ],
)
def test_pairs(kind, flag, expected):
    pairs = overlap_pairs(kind, 8, flag)
    if expected is None:
        assert pairs == overlap_pairs(kind, 8) and len(pairs) == 8
    else:
        assert sorted((p.op, p.phase) for p in pairs) == sorted(expected)


def test_overlap_delta_only_the_reduce_scatters():
    """Under rowwise the delta is the two forward reduce-scatter pairs' alone: each pipelined pair's time less its
    GEMM and its blocking reduce-scatter; nothing in backward without recomputation."""
    ctx = ctx_of("rowwise", mbs=2)
    act = 2 * 8192 * H * 2
    d = overlap_delta(ctx, "async_tp", 2, 8, "none", act, 0.1, act, True)
    assert d.bwd == 0.0 and d.bwd_tp == 0.0
    from planner.pricing.collectives import tp_collective
    from planner.pricing.gpu import gemm_time

    tokens, want = 2 * 8192, 0.0
    for n_in in (H, F):  # wo: K = H/8 -> N = H; w2: K = F/8 -> N = H
        gemm = ctx.residuals.compute_scale * gemm_time(ctx, tokens, H, n_in // 8, fp8=True)
        pair = next(p for p in overlap_pairs("async_tp", 8, True) if p.gemms == (("wo",) if n_in == H else ("w2",)))
        want += (
            pair_seconds(ctx, pair, gemm, gemm / 8, act, 8, 0.1) - gemm - tp_collective(ctx, "reduce_scatter", act, 8)
        )
    assert d.fwd == pytest.approx(want, rel=1e-12)
    full = overlap_delta(ctx, "async_tp", 2, 8, "none", act, 0.1, act, False)
    assert full.fwd != d.fwd and full.bwd != 0.0  # with the all-gather pairs: forward and backward move


def test_layout_copies_of_the_unfused_gathers():
    titan, act = STACKS["torchtitan"], 12 * 8192 * H * 2.0
    c, shard_copies, partial_sum = 2 * act, 2 * (2 * act / 8), act + act / 8
    f, b = sp_copy_bytes(titan, 12, 8, True, "none", act, act, True, True)
    # forward: the 2 all-gathers' layout copies + the 2 fused reduce-scatters' partial sums; backward: the 2
    # all-gathers' and the 2 reduce-scatters' layout copies (no pair there)
    assert sum(f) == pytest.approx(2 * c + 2 * partial_sum) and len(f) == 4
    assert sum(b) == pytest.approx(4 * c) and len(b) == 4
    f0, _ = sp_copy_bytes(titan, 12, 8, True, "none", act, act, True, False)
    assert sum(f0) == pytest.approx(2 * shard_copies + 2 * partial_sum)


@pytest.mark.parametrize(
    ("recipe", "mbs"),
    [("rowwise", 2), ("rowwise", 1), ("tensorwise", 2), ("tensorwise", 1)],
)
def test_sac_rerun_casts_by_hand(recipe, mbs):
    """The even mms wk (input: the attention norm's output, T x H; weight KV/8 x H), wo (input T x H/8; weight
    H x H/8) and w3 (input T x H; weight F/8 x H): rowwise reruns amax + cast, 5 bytes an element, of every input on
    all T rows and of every weight; tensorwise casts its gathered inputs (wk's, w3's) on T/8 rows before the FP8
    all-gather and wo's on T, and reruns the cast alone (its amax, aten.max, is kept): 3 bytes."""
    ctx = ctx_of(recipe, mbs=mbs)
    t = mbs * 8192
    ops = {op.name: op for op in sac_rerun_cast_ops(ctx, mbs, 8, True)}
    weights = KV // 8 * H + H * H // 8 + F // 8 * H
    if recipe == "rowwise":
        inputs, per = t * H + t * H // 8 + t * H, 5.0
    else:
        inputs, per = t // 8 * H + t * H // 8 + t // 8 * H, 3.0
    assert ops["fp8_cast_input"].nbytes == pytest.approx(per * inputs)
    assert ops["fp8_cast_weight"].nbytes == pytest.approx(per * weights)
    k = 3 * (2 if recipe == "rowwise" else 1)  # eager kernels: amax and cast a rowwise cast; the cast alone kept-amax
    assert ops["fp8_cast_input"].kernels == k and ops["fp8_cast_weight"].kernels == k
    assert sac_rerun_cast_ops(ctx_of(None, mbs=mbs), mbs, 8, True) == ()


def test_sac_share_adds_the_rerun_casts():
    """selective_share's rerun grows by exactly the rerun casts' HBM seconds (× the memory residual)."""
    ctx = ctx_of("rowwise", mbs=2)
    share = selective_share(ctx, 2, 8, True, 0.0)
    ops = sac_rerun_cast_ops(ctx, 2, 8, True)
    casts = ctx.residuals.memory_scale * sum(hbm_time(ctx, op.nbytes / op.kernels) * op.kernels for op in ops)
    from planner.pricing.layer_times import analytic_parts

    lp = ctx.layer("transformer_block", 2, 8, True)
    f = analytic_parts(ctx, lp, "transformer_block", 2, 8, True)[0]
    ctx.sac_cache.clear()
    import planner.pricing.layer_times as lt

    orig = lt.sac_rerun_cast_ops
    lt.sac_rerun_cast_ops = lambda *a, **k: ()
    try:
        without = selective_share(ctx, 2, 8, True, 0.0)
    finally:
        lt.sac_rerun_cast_ops = orig
        ctx.sac_cache.clear()
    assert share * f == pytest.approx(without * f + casts, rel=1e-9)
