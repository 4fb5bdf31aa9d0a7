"""Whole gradients exist only from their chunk's first backward of the step on (cost model 51;
``compose.grad_peaks.live_and_done``, ``memory.pending_grads``).

FSDP2 under ``torch.distributed.pipelining`` creates a chunk's accumulated fp32 gradient in that chunk's first
``post_backward`` (``to_accumulated_grad_if_needed``, torch 2.13.0 ``_fsdp_param_group.py:606-611``,
``_fsdp_param.py:802-819``). The peaks below are written out by hand from each schedule's order
(``simulate.rank_orders``: GPipe all forwards then all backwards; 1F1B rank i ``min(pp − i − 1, m)`` warm-up forwards,
then F/B pairs; Megatron's interleaved order, every forward first when m = pp); the gradient bytes by hand from
Llama 3 8B's shapes."""

from __future__ import annotations

import pytest

from planner.answer.request import complete_pins, context, parse_request
from planner.compose.affine import NOTHING
from planner.compose.cost import class_costs, live_vectors_cached
from planner.compose.grad_peaks import live_and_done
from planner.compose.memory import rank_activations, rank_buffers, rank_memory, rank_states
from planner.search.screens import fits_at, layer_caps, may_fit

#: (schedule, pp, v, m, rank) -> its peaks by hand: ((chunk, copies alive), ...), chunks whose backward has run
PEAKS = [
    # GPipe, 3 micro-batches: all forwards (3 copies, no gradient), then after the first backward (2 copies + grads)
    ("gpipe", 2, 1, 3, 0, {(((0, 3),), ()), (((0, 2),), (0,))}),
    # 1F1B rank 0 of 2, m = 2: F0 F1 B0 B1 — the 2-copy peak precedes every backward
    ("1f1b", 2, 1, 2, 0, {(((0, 2),), ()), (((0, 1),), (0,))}),
    # 1F1B rank 1 of 2: F0 B0 F1 B1 — the second forward's peak holds the gradients and dominates
    ("1f1b", 2, 1, 2, 1, {(((1, 1),), (1,))}),
    # 1F1B rank 0 of 2, m = 4: F0 F1 B0 F2 B1 … — after the first backward, 2 copies again with the gradients
    ("1f1b", 2, 1, 4, 0, {(((0, 2),), (0,))}),
    # interleaved, pp 2, v 2, m = pp: rank 0 runs F(c0) F(c0) F(c2) F(c2), then B(c2) B(c2) B(c0) B(c0)
    (
        "interleaved-1f1b",
        2,
        2,
        2,
        0,
        {(((0, 2), (2, 2)), ()), (((0, 2), (2, 1)), (2,)), (((0, 1), (2, 0)), (0, 2))},
    ),
]


@pytest.mark.parametrize(("schedule", "pp", "v", "m", "rank", "expect"), PEAKS)
def test_peaks_and_the_chunks_done_there(schedule: str, pp: int, v: int, m: int, rank: int, expect: set) -> None:
    live, done = live_and_done(schedule, pp, v, m)
    assert set(zip(live[rank], done[rank])) == expect


@pytest.mark.parametrize(
    ("schedule", "pp", "v", "m"), [("1f1b", 4, 1, 8), ("gpipe", 3, 1, 5), ("interleaved-1f1b", 2, 3, 4)]
)
def test_every_activation_peak_is_kept_or_dominated(schedule: str, pp: int, v: int, m: int) -> None:
    """The peaks without gradients (``live_vectors_cached``) are each matched by a peak here with as many copies."""
    live, _ = live_and_done(schedule, pp, v, m)
    for r, peaks in enumerate(live_vectors_cached(schedule, pp, v, m)):
        for p in peaks:
            assert any(all(dict(q).get(c, 0) >= k for c, k in p) for q in live[r])


# Llama 3 8B (h 4096, FFN 14336, 8 KV heads of 128, vocabulary 128256): one block's parameters, by hand
H, F, KV, V = 4096, 14336, 8 * 128, 128256
BLOCK = 2 * H * H + 2 * H * KV + 3 * H * F + 2 * H
EMBED = V * H
HEAD = V * H + H  # the LM head and the final norm


def _ctx_and_class(schedule: str, zero: int, batch: int):  # type: ignore[no-untyped-def]
    """torchtitan, pp 2 (16 / 16 layers), 8 GPUs: dp 4, one sequence per micro-batch, ``batch`` / 4 micro-batches."""
    req = parse_request(
        {
            "model": "llama3-8b",
            "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "gpus_per_node": 8},
            "training": {"global_batch_size": batch, "seq_len": 4096, "stack": "torchtitan"},
            "parallel": {"tp": 1, "pp": 2, "micro_batch_size": 1, "zero_stage": zero, "schedule": schedule},
            "options": {"memory_headroom": 0.0},
        }
    )
    ctx = context(req)
    cand, _ = complete_pins(ctx, req)
    return ctx, class_costs(ctx, cand)


#: (schedule, ZeRO, global batch) -> per rank, its peaks as (copies alive, gradients there: all or none), by hand
MEMORY = [
    ("gpipe", 2, 8, [[(2, False), (1, True)], [(2, False), (1, True)]]),  # m = 2
    ("1f1b", 2, 8, [[(2, False), (1, True)], [(1, True)]]),
    ("1f1b", 3, 16, [[(2, True)], [(1, True)]]),  # m = 4: the steady state holds both
]


@pytest.mark.parametrize(("schedule", "zero", "batch", "expect"), MEMORY)
def test_rank_memory_against_hand_peaks(schedule: str, zero: int, batch: int, expect: list) -> None:
    """A rank's memory = its states less the fp32 gradients (4 bytes per parameter of its stage, by hand) where its
    backward has not run yet + its activations × the copies alive + its buffers, at the worst of its peaks."""
    ctx, cc = _ctx_and_class(schedule, zero, batch)
    s, c, n = cc.shared, cc.cand, [16, 16]
    assert s.grads != NOTHING and cc.done is not None
    grads = [4 * (16 * BLOCK + EMBED), 4 * (16 * BLOCK + HEAD)]  # torchtitan's LM head untied
    for r in range(2):
        one = rank_activations(s, c, n, ((r, 1),))
        fixed = rank_states(s, c, n, r) + rank_buffers(s, c, r)
        hand = max(fixed - (0 if held else grads[r]) + copies * one for copies, held in expect[r])
        assert rank_memory(cc, n, r) == hand


@pytest.mark.parametrize(("schedule", "zero", "batch"), [(s, z, b) for s, z, b, _ in MEMORY])
def test_screens_stay_lower_bounds(schedule: str, zero: int, batch: int) -> None:
    """Where the cut fits, the screens say it may (``layer_caps`` at least its layers, ``may_fit`` True)."""
    _, cc = _ctx_and_class(schedule, zero, batch)
    cc.usable_bytes = usable = max(rank_memory(cc, [16, 16], r) for r in range(2))  # just fits
    assert fits_at(cc, [16, 16])
    caps = list(layer_caps(cc.shared, cc.cand, cc.live, cc.num_layers, usable, cc.done))
    assert all(cap >= 16 for cap in caps) and may_fit(cc)
