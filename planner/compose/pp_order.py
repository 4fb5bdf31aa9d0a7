"""Interleaved 1F1B's warm-up as each runtime runs it (``Stack.interleaved_all_warmup``, cost model 67): how many
forwards rank i of pp runs before its first backward, with v chunks per rank and m micro-batches (m a multiple of pp).

* all-warm-up (``interleaved_all_warmup``, the default) — Megatron-LM's ``forward_backward_pipelining_with_interleaving``
  (v2 to Megatron-core 338af514, 2024-07: ``all_warmup_microbatches``): 2(pp − i − 1) + (v − 1)·pp, and every forward
  first when m = pp. The planner's time simulation (``simulate.rank_orders``, ``sim_order``) and search run this order
  for every stack.
* capped (``CAPPED``) — ``torch.distributed.pipelining.ScheduleInterleaved1F1B`` (torch 2.6.0, 2236df1,
  ``distributed/pipelining/schedules.py:1943-1956`` ``get_rank_warmup_ops``: (v − 1)·microbatches_per_round +
  2(pp − 1 − i), capped at m·v, with ``microbatches_per_round = m // max(1, m // pp)`` = pp for m a multiple of pp,
  :1926-1928; the same in torch 2.13.0's ``_get_warmup_ops``, :2872-2888): no all-forwards case, so at m = pp the
  last rank runs (v − 1)·pp forwards, then forward/backward pairs (``_get_1f1b_rank_ops`` :1810-1826 appends each
  steady step's FORWARD before its FULL_BACKWARD). The chunk and micro-batch of each step are Megatron's
  (``forward_stage_index``/``backward_stage_index`` :1975-1987, per-stage counters): only the warm-up differs.
  torchtitan builds it for ``Interleaved1F1B`` (9dec370 ``parallelisms/pipelining_utils.py``: torch's schedule class,
  ``n_microbatches`` = pp when unset). Priced in the memory peaks (``peak_schedule``: ``peak_walk``,
  ``prescreen.warm_peaks``, ``screens.interleaved_peak_copies``); the time simulation keeps the all-warm-up order.

1F1B needs no such variant: torch's ``Schedule1F1B`` (:673-678) warms up pp − i forwards and then runs backward
first (``1B1F``), Megatron pp − i − 1 and then forward first — both hold at most pp − i micro-batches on rank i.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from planner.compose.cost import Candidate
    from planner.compose.terms import SharedTerms

#: the memory walks' name of interleaved 1F1B without the all-forwards rule at m = pp (``peak_schedule``)
CAPPED = "interleaved-1f1b-capped"
INTERLEAVED = ("interleaved-1f1b", CAPPED)


def interleaved_warmup(pp: int, v: int, m: int, i: int, all_warmup: bool = True) -> int:
    """Forwards rank i runs before its first backward (module docstring); ``all_warmup``: Megatron's m = pp rule."""
    total = m * v
    return total if all_warmup and m == pp else min(2 * (pp - i - 1) + (v - 1) * pp, total)


def peak_schedule(s: SharedTerms, c: Candidate) -> str:
    """The schedule name the memory walks read for a class: ``CAPPED`` for interleaved 1F1B (v > 1) on a stack without
    the all-forwards rule (``SharedTerms.all_warmup`` false), else the class's schedule."""
    if not s.all_warmup and c.virtual_stages > 1 and c.schedule == "interleaved-1f1b":
        return CAPPED
    return c.schedule
