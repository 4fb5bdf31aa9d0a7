"""Interleaved 1F1B's warm-up as each runtime runs it (``Stack.interleaved_all_warmup``, cost models 67-68): how many
forwards rank i of pp runs before its first backward, with v chunks per rank and m micro-batches (m a multiple of pp).

* all-warm-up (``interleaved_all_warmup`` true) — Megatron-LM's ``forward_backward_pipelining_with_interleaving``
  from v2.5 to Megatron-core 0.9 (``all_warmup_microbatches``): 2(pp − i − 1) + (v − 1)·pp capped at m·v, and every
  forward first when m = pp. Read at each preset's code: v2.5 (e269e20064) ``megatron/schedules.py:169-171``,
  52e636888c :295-297 (``megatron-2021``, ``megatron-2022``; v2.0, ``megatron-2020``, has no interleaving); core
  338af514 ``megatron/core/pipeline_parallel/schedules.py:599-601`` (``nemo-2407``, NeMo r2.0.0rc1's pin, which the
  nemo-2407 and nemo-2412 rows ran); df7271285d :497-499 and core_v0.7.0.beta (3c0f3ef38c) :528-530 (MLPerf v3.1
  and v4.0, ``bench/fidelity_mlperf.stack``); core_r0.9.0 (1afee592e8) :664-666 is its last release. The planner's
  time simulation (``simulate.rank_orders``, ``sim_order``) and search run this order for every stack.
* capped (``CAPPED``, the field's default) — no all-forwards case. Megatron-core from core_r0.10.0 (7ee599a25c
  :692-698) to core_v0.16.1 (55ac708251, ``get_pp_rank_microbatches`` :738-795: 2(pp − i − 1) +
  (v − 1)·microbatch_group_size_per_vp_stage, all warm-up only when that reaches m·v, :785-787), with the group
  size pp unless ``--microbatch-group-size-per-virtual-pipeline-stage`` sets it (``model_parallel_config.py:447-448``;
  the schedule refuses a group outside [pp, m], :995-1003, and a last group of fewer than pp, :1007-1012: m a multiple of
  pp) — the ``megatron`` preset and the Megatron-Bridge rows; a group other than pp is not priced. And
  ``torch.distributed.pipelining.ScheduleInterleaved1F1B`` (torch 2.6.0, 2236df1,
  ``distributed/pipelining/schedules.py:1943-1956`` ``get_rank_warmup_ops``: (v − 1)·microbatches_per_round +
  2(pp − 1 − i), capped at m·v, with ``microbatches_per_round = m // max(1, m // pp)`` = pp for m a multiple of pp,
  :1926-1928; the same in torch 2.13.0's ``_get_warmup_ops``, :2872-2888), the ``torchtitan`` preset and the
  ``meshplan`` one (``runtime/job.py`` builds torch 2.13's class: ``config.SCHEDULES``' ``torch_class``): the same
  count. At m = pp the last rank runs (v − 1)·pp forwards, then forward/backward pairs (torch's
  ``_get_1f1b_rank_ops`` :1810-1826 appends each steady step's FORWARD before its FULL_BACKWARD; Megatron-core's
  steady loop, :1563-1566, runs the forward first too). The chunk and micro-batch of each step are Megatron's
  (``forward_stage_index``/``backward_stage_index`` :1975-1987, per-stage counters; core's ``get_schedule_table``
  with groups of pp): only the warm-up differs. torchtitan builds it for ``Interleaved1F1B`` (9dec370
  ``parallelisms/pipelining_utils.py``: torch's schedule class, ``n_microbatches`` = pp when unset). Priced in the
  memory peaks (``peak_schedule``: ``peak_walk``, ``prescreen.warm_peaks``, ``screens.interleaved_peak_copies``);
  the time simulation keeps the all-warm-up order.

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


def interleaved_warmup(pp: int, v: int, m: int, i: int, all_warmup: bool) -> int:
    """Forwards rank i runs before its first backward (module docstring); ``all_warmup``: Megatron's m = pp rule
    (v2.5 to core 0.9)."""
    total = m * v
    return total if all_warmup and m == pp else min(2 * (pp - i - 1) + (v - 1) * pp, total)


def peak_schedule(s: SharedTerms, c: Candidate) -> str:
    """The schedule name the memory walks read for a class: ``CAPPED`` for interleaved 1F1B (v > 1) on a stack without
    the all-forwards rule (``SharedTerms.all_warmup`` false), else the class's schedule."""
    if not s.all_warmup and c.virtual_stages > 1 and c.schedule == "interleaved-1f1b":
        return CAPPED
    return c.schedule
