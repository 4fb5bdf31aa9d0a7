"""The context-parallel degrees the search enumerates (``cp_options``) and its two CP policies, which apply only from
``CP_FULL_GPUS`` GPUs up (``cp_policies``): context parallelism below ``CP_MIN_SEQ`` tokens only when no class without
it fits (``space.enumerate_candidates``), and not below ``CP_MIN_LOCAL_SEQ`` tokens per CP rank. ``scope.unsearched``
names what they leave out. On a request of at most ``CP_FULL_GPUS`` GPUs every CP degree is searched, so an OPTIMAL
answer there is the best of everything a pin reaches (``tests/test_cp_free_vs_pinned.py``)."""

from __future__ import annotations

import math

from planner.compose.cost import Context
from planner.specs import ParallelPins, rules

#: Shortest sequence at which context parallelism is searched while some class without it fits (a policy, not a
#: bound: ``cp_options``; from ``CP_FULL_GPUS`` GPUs up). Megatron-Bridge / NeMo long-context recipes turn CP on from
#: 16K–32K tokens, Llama 3 only in its long-context phase (131,072); below this a split sequence's blocks are small
#: and their exchange latency-bound.
CP_MIN_SEQ = 16_384

#: Fewest tokens per CP rank searched (unpinned, from ``CP_FULL_GPUS`` GPUs up): below it a rank's attention blocks run
#: flash attention at less than ~60 % of its long-sequence rate (``pricing.gpu.FLASH_CAUSAL_TFLOPS``: 221 of 328
#: TFLOP/s at 1K on H100) and each ring step is latency-bound; Llama 3 kept 8K tokens per CP rank. A policy, not a bound.
CP_MIN_LOCAL_SEQ = 1024

#: Most GPUs at which the two policies above do not apply: every CP degree is searched (a request's classes grow
#: with the divisors of its GPU count, the CP ones ×2–3; measured, ``bench/bench_plan.py``'s Llama 3 8B on 8 H100:
#: 0.19 → 0.3 s CPU, 28.23 → 27.68 s per step with CP; on 32 H100 Llama 3 70B 0.6 → 1.6 s at load 8, hence 16).
CP_FULL_GPUS = 16


def cp_policies(ctx: Context) -> bool:
    """Whether ``CP_MIN_SEQ`` and ``CP_MIN_LOCAL_SEQ`` apply to this request (more than ``CP_FULL_GPUS`` GPUs)."""
    return ctx.num_gpus > CP_FULL_GPUS


def cp_options(
    ctx: Context, pins: ParallelPins, tp: int, rest: int, with_cp: bool = True
) -> list[tuple[int, tuple[str, ...]]]:
    """The context-parallel degrees (with their exchanges) searched at ``tp`` with ``rest`` GPUs for cp × dp:
    the pinned one, else 1 and every divisor of ``rest`` where the stack runs CP (``Stack.cp_comms``) with flash
    attention, the sequence splits into 2·cp chunks and, for the exchanges that split heads, the heads divide
    (and, unpinned with ``cp_policies``, at least ``CP_MIN_LOCAL_SEQ`` tokens per CP rank).

    Only micro-batch sizes that cp does not divide are enumerated with cp > 1 (``space.enumerate_candidates``): a
    class (dp, cp, mbs = k·cp) does the same per-rank work as the cp = 1 class (dp·cp, mbs = k) — GEMMs of the same
    b·s/cp tokens, the same activation and state bytes, the same DP/ZeRO group and micro-batch count — with
    attention no faster (its kernel runs at the local length s/cp, ``pricing.gpu.flash_rate`` grows with the
    length) and the exchange on top: it never wins. So cp > 1 is searched where the batch cannot be split
    further: fewer sequences per micro-batch than cp (long context, where a micro-batch of one sequence does
    not fit or leaves too few micro-batches to fill the pipeline). Below ``CP_MIN_SEQ`` tokens (with
    ``cp_policies``) cp > 1 is kept only when classes without it exist and none fits (``space.cp1_fits``)."""
    one: list[tuple[int, tuple[str, ...]]] = [(1, (pins.cp_comm or "p2p",))]
    st, seq = ctx.stack, ctx.training.seq_len
    if pins.cp == 1 or (pins.cp is None and (not with_cp or not st.cp_comms or st.attention != "flash")):
        return one
    out = [] if pins.cp is not None else one
    short = pins.cp is None and cp_policies(ctx)  # the per-rank floor applies
    for cp in [pins.cp] if pins.cp is not None else divisors(rest)[1:]:
        if rest % cp or rules.cp_splits_seq(cp, seq) or (short and seq // cp < CP_MIN_LOCAL_SEQ):
            continue
        comms = [pins.cp_comm] if pins.cp_comm is not None else list(st.cp_comms)
        comms = [c for c in comms if rules.cp_splits_heads(ctx.model, tp, cp, c) is None]
        if comms:
            out.append((cp, tuple(comms)))
    return out


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))
