"""Feasibility rules of a parallel configuration, each written once.

Every rule is a function of plain values that returns ``None`` when the rule holds, else the
``MeshplanError(field, message, fix)`` to raise; ``check`` raises the first one. Fields are named as
in a ``PlanRequest``/``Plan`` (``parallel.tp``, ``training.global_batch_size``); a caller that speaks
another surface maps them (``prefixed``: the exporters' ``plan.…``; ``with_field``).

Callers: the ``ParallelConfig`` validator (``planner.specs``), pin validation and enumeration
(``planner.search``), estimate completion (``planner.answer.request.complete_pins``), the runtime's
``runtime.validate.validate_plan`` and the exporters' ``check_invariants``. What a training stack runs
(``stack_runs``, ``stack_runs_config``: issue 27) is checked in ``planner.specs.stack_rules`` against the stacks' data
and re-exported here, as are the rules of
the sequence's splits (``planner.specs.seq_rules``: SP and CP). The rules a complete configuration must satisfy to
run at all are ``runnable``; what only the planner's cost model needs (every chunk holds a layer, interleaved micro-batches in whole rounds of pp, a priced schedule, TP
inside a node) are separate rules that only the planner calls.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from planner.specs.config import MULTI_STAGE_SCHEDULES, PRICED_SCHEDULES, SCHEDULE_INFO
from planner.specs.ep_rules import (  # noqa: F401 (re-exported: expert parallelism)
    ep_divides_dp,
    ep_fits_model,
    etp_is_one_or_tp,
    expert_parallel_rules,
    expert_tokens_split,
    stack_runs_moe,
)
from planner.specs.errors import MeshplanError
from planner.specs.seq_rules import (  # noqa: F401 (re-exported: the sequence's splits, SP and CP)
    cp_runnable,
    cp_splits_heads,
    cp_splits_seq,
    seq_len_fits,
    sequence_parallel_needs_tp,
    sequence_parallel_splits_seq,
    tp_overlap_needs_sp,
)
from planner.specs.stack_rules import overlaps_tp as overlaps_tp
from planner.specs.stack_rules import stack_runs as stack_runs  # what the training stack runs
from planner.specs.stack_rules import stack_runs_config as stack_runs_config
from planner.specs.stack_rules import stack_runs_ok as stack_runs_ok
from planner.specs.stack_rules import whole_batch_pins as whole_batch_pins

if TYPE_CHECKING:
    from planner.specs import ModelSpec

Err = MeshplanError | None


def check(*errors: Err) -> None:
    """Raise the first error given (each argument is one rule's result)."""
    for err in errors:
        if err is not None:
            raise err


def first(*errors: Err) -> Err:
    return next((e for e in errors if e is not None), None)


def with_field(err: MeshplanError, field: str) -> MeshplanError:
    """The same error reported on another field (e.g. the one the caller's user can change)."""
    return MeshplanError(field, err.message, err.fix)


def prefixed(err: Err, prefix: str) -> Err:
    """The error with its field under ``prefix`` (the exporters report ``plan.parallel.tp``)."""
    return None if err is None else with_field(err, prefix + err.field)


# --------------------------------------------------------------------------------------------
# Degrees and batch


def degrees_product(
    tp: int,
    pp: int,
    dp: int,
    total: int,
    where: str = "the cluster has",
    unit: str = "GPUs",
    fix: str | None = None,
    cp: int = 1,
) -> Err:
    """tp × cp × pp × dp is the number of GPUs (processes) the configuration runs on."""
    prod = tp * cp * pp * dp
    if prod == total:
        return None
    named = f"tp × cp × pp × dp = {tp}×{cp}×{pp}×{dp}" if cp > 1 else f"tp × pp × dp = {tp}×{pp}×{dp}"
    return MeshplanError(
        "parallel.dp",
        f"{named} = {prod} but {where} {total} {unit}",
        fix or f"choose degrees whose product is {total}",
    )


def degrees_divide(tp: int | None, pp: int | None, dp: int | None, total: int) -> Err:
    """Pinned degrees (some may be unpinned) multiply to a divisor of the GPU count."""
    given = [x for x in (tp, pp, dp) if x is not None]
    prod = math.prod(given)
    if not given or total % prod == 0:
        return None
    field = "parallel.dp" if dp is not None else ("parallel.pp" if pp is not None else "parallel.tp")
    return MeshplanError(
        field,
        f"the pinned degrees multiply to {prod}, which does not divide the {total} GPUs",
        f"choose degrees whose product divides {total}",
    )


def batch_divides(gbs: int, dp: int | None, mbs: int | None) -> Err:
    """The global batch splits into whole micro-batches on every data-parallel rank:
    dp × micro_batch_size divides global_batch_size (with one of them unpinned: the other divides it)."""
    if dp is not None and mbs is not None:
        if gbs % (dp * mbs) == 0:
            return None
        return MeshplanError(
            "training.global_batch_size",
            f"global_batch_size={gbs} is not a multiple of dp × micro_batch_size = {dp}×{mbs} = {dp * mbs}",
            "use a global batch size divisible by dp × micro_batch_size, or dp and micro_batch_size "
            "whose product divides it",
        )
    if dp is not None and gbs % dp:
        return MeshplanError(
            "parallel.dp",
            f"dp={dp} does not divide the global batch size {gbs}",
            "choose a dp that divides training.global_batch_size",
        )
    if mbs is not None and gbs % mbs:
        return MeshplanError(
            "parallel.micro_batch_size",
            f"micro_batch_size={mbs} does not divide the global batch size {gbs}",
            "choose a divisor of training.global_batch_size",
        )
    return None


# --------------------------------------------------------------------------------------------
# Tensor parallelism


def _tp_shapes(model: ModelSpec) -> tuple[tuple[str, int], ...]:
    return (
        ("num_attention_heads", model.num_attention_heads),
        ("num_kv_heads", model.num_kv_heads),
        ("ffn_hidden_size", model.ffn_hidden_size),
    )


def tp_divides_model(model: ModelSpec, tp: int) -> Err:
    """TP shards attention heads, key/value heads and the FFN evenly."""
    for what, value in _tp_shapes(model):
        if value % tp:
            g = math.gcd(*(v for _, v in _tp_shapes(model)))
            ok = [t for t in range(1, min(g, 1024) + 1) if g % t == 0]
            return MeshplanError(
                "parallel.tp",
                f"tp={tp} does not divide the model's {what} ({value})",
                f"choose a tp that divides num_attention_heads, num_kv_heads and ffn_hidden_size: one of {ok}",
            )
    return None


def tp_divides_vocab(model: ModelSpec, tp: int, field: str) -> Err:
    """A vocabulary-parallel embedding or LM head needs tp to divide the vocabulary."""
    if model.vocab_size % tp == 0:
        return None
    return MeshplanError(
        field,
        f"vocabulary-parallel {field} needs tp={tp} to divide vocab_size={model.vocab_size}",
        "keep it replicated or choose a tp that divides the vocabulary",
    )


def tp_divides_gpus(tp: int, total: int) -> Err:
    if total % tp == 0:
        return None
    return MeshplanError(
        "parallel.tp", f"tp={tp} does not divide the {total} GPUs", "choose a divisor of the GPU count"
    )


def tp_within_node(tp: int, gpus_per_node: int, allow_across_nodes: bool) -> Err:
    """A TP group sits inside one node (NVLink) unless ``options.allow_tp_across_nodes``."""
    if allow_across_nodes:
        return None
    if tp > gpus_per_node:
        return MeshplanError(
            "parallel.tp",
            f"tp={tp} exceeds the {gpus_per_node} GPUs of a node",
            "use tp ≤ gpus_per_node, or set options.allow_tp_across_nodes",
        )
    if gpus_per_node % tp:
        return MeshplanError(
            "parallel.tp",
            f"tp={tp} does not divide gpus_per_node={gpus_per_node}, so TP groups would span nodes",
            "choose a divisor of gpus_per_node",
        )
    return None


# --------------------------------------------------------------------------------------------
# Pipeline: schedules, virtual stages, stage cut


def schedule_priced(schedule: str) -> Err:
    """The planner's cost model prices the schedule (the runtime runs more: GET /v1/catalog/schedules)."""
    if schedule in PRICED_SCHEDULES:
        return None
    return MeshplanError(
        "parallel.schedule",
        f"schedule {schedule!r} is not modeled by the planner",
        f"use one of {', '.join(PRICED_SCHEDULES)} (the runtime also runs it from a hand-written plan)",
    )


def virtual_stages_fit(schedule: str | None, virtual_stages: int | None) -> Err:
    """Schedules with virtual stages need ≥ 2 of them (ZBV exactly 2); the others exactly 1."""
    if schedule is None or virtual_stages is None:
        return None
    info = SCHEDULE_INFO[schedule]
    if info.fixed_virtual_stages is not None and virtual_stages != info.fixed_virtual_stages:
        if info.needs_virtual_stages:
            return MeshplanError(
                "parallel.virtual_stages",
                f"schedule {schedule!r} needs virtual_stages = {info.fixed_virtual_stages}",
                f"set virtual_stages to {info.fixed_virtual_stages}",
            )
        return MeshplanError(
            "parallel.virtual_stages",
            f"virtual_stages={virtual_stages} needs an interleaved schedule",
            "use schedule 'interleaved-1f1b' or set virtual_stages to 1",
        )
    if info.needs_virtual_stages and virtual_stages < 2:
        return MeshplanError(
            "parallel.virtual_stages",
            f"schedule {schedule!r} needs virtual_stages ≥ 2",
            "set virtual_stages to 2 or more",
        )
    return None


def interleaving_needs_pipeline(pp: int, virtual_stages: int) -> Err:
    if virtual_stages > 1 and pp == 1:
        return MeshplanError(
            "parallel.virtual_stages",
            f"virtual_stages={virtual_stages} with pp=1: interleaving needs a pipeline",
            "set pp ≥ 2, or virtual_stages to 1 with schedule '1f1b'",
        )
    return None


def one_f_one_b_microbatches(schedule: str, pp: int, m: int, gbs: int, dp: int) -> Err:
    """1F1B (torch's Schedule1F1B, and the planner's pricing of it) needs at least pp micro-batches."""
    if schedule != "1f1b" or pp == 1 or m >= pp:
        return None
    return MeshplanError(
        "parallel.micro_batch_size",
        f"schedule '1f1b' needs at least pp={pp} micro-batches per step, but "
        f"global_batch_size / (dp × micro_batch_size) = {m}",
        f"use micro_batch_size ≤ {max(1, gbs // (dp * pp))} (so that the micro-batches are ≥ pp), "
        "fewer pipeline stages, or schedule 'gpipe'",
    )


def interleaved_rounds(schedule: str, pp: int, m: int) -> Err:
    """torch's interleaved schedules run the micro-batches in rounds of max(1, m // pp)."""
    if pp == 1 or schedule not in ("interleaved-1f1b", "interleaved-zero-bubble"):
        return None
    rounds = max(1, m // pp)
    if m % rounds == 0:
        return None
    return MeshplanError(
        "parallel.micro_batch_size",
        f"schedule {schedule!r} needs the micro-batch count ({m}) to be a multiple of its rounds "
        f"(max(1, {m} // pp) = {rounds})",
        f"use a micro-batch count that is a multiple of pp={pp} (or at most pp)",
    )


def interleaved_microbatches_priced(schedule: str | None, pp: int | None, m: int | None) -> Err:
    """The planner prices schedules with virtual stages for micro-batch counts that are multiples of pp
    (Megatron-LM's default grouping). With pp or m unknown: the general statement."""
    if schedule not in MULTI_STAGE_SCHEDULES or (pp is not None and m is not None and m % pp == 0):
        return None
    count = f"the {m} micro-batches" if m is not None else "the number of micro-batches"
    return MeshplanError(
        "parallel.micro_batch_size",
        f"interleaved schedules need {count} divisible by pp" + (f"={pp}" if pp else ""),
        "choose micro_batch_size (or the global batch size) so that "
        "global_batch_size / (dp × micro_batch_size) is a multiple of pp",
    )


def pp_fits_layers(pp: int, virtual_stages: int, num_layers: int) -> Err:
    """The planner gives every model chunk at least one layer: pp × virtual_stages ≤ num_layers."""
    if pp * virtual_stages <= num_layers:
        return None
    if virtual_stages == 1:
        return MeshplanError(
            "parallel.pp", f"pp={pp} exceeds the model's {num_layers} layers", f"use pp ≤ {num_layers}"
        )
    return MeshplanError(
        "parallel.pp",
        f"pp × virtual_stages = {pp * virtual_stages} exceeds the model's {num_layers} layers",
        "lower pp or virtual_stages",
    )


def stage_layers_count(stage_layers: list[int], pp: int | None, virtual_stages: int | None) -> Err:
    """One layer count per model chunk: pp × virtual_stages entries (a multiple of pp when v is open)."""
    chunks = len(stage_layers)
    if pp is not None and virtual_stages is not None and chunks != pp * virtual_stages:
        return MeshplanError(
            "parallel.stage_layers",
            f"stage_layers has {chunks} entries but pp × virtual_stages = {pp * virtual_stages}",
            "give one layer count per model chunk (pp × virtual_stages)",
        )
    if pp is not None and chunks % pp:
        return MeshplanError(
            "parallel.stage_layers",
            f"stage_layers has {chunks} entries, not a multiple of pp={pp}",
            "give one layer count per model chunk (pp × virtual_stages)",
        )
    return None


def stage_layers_nonnegative(stage_layers: list[int]) -> Err:
    if min(stage_layers) >= 0:
        return None
    return MeshplanError(
        "parallel.stage_layers", "stage_layers entries must be ≥ 0", "give a layer count ≥ 0 per chunk"
    )


def stage_layers_sum(stage_layers: list[int], num_layers: int) -> Err:
    if sum(stage_layers) == num_layers:
        return None
    return MeshplanError(
        "parallel.stage_layers",
        f"stage_layers {list(stage_layers)} sum to {sum(stage_layers)} but the model has {num_layers} layers",
        f"give layer counts that add up to {num_layers}",
    )


def stage_layers_nonempty(stage_layers: list[int], *, ends_may_be_empty: bool) -> Err:
    """The planner prices chunks of ≥ 1 layer; the runtime also runs first/last chunks holding only
    the embedding or the LM head (``ends_may_be_empty``)."""
    last = len(stage_layers) - 1
    for c, n in enumerate(stage_layers):
        if n == 0 and not (ends_may_be_empty and c in (0, last)):
            what = (
                "every chunk needs at least one layer"
                if not ends_may_be_empty
                else f"chunk {c} has no layers and carries neither the embedding nor the LM head"
            )
            return MeshplanError(
                "parallel.stage_layers",
                what,
                "give every middle chunk at least one layer"
                if ends_may_be_empty
                else "remove empty chunks (lower pp or virtual_stages)",
            )
    return None


# --------------------------------------------------------------------------------------------
# A complete configuration


def runnable(model: ModelSpec, training: Any, parallel: Any) -> Err:
    """The first rule a complete configuration (``ParallelConfig``) breaks for this model and
    training setup, whatever runs it (the runtime, or a target of the exporters); None if none.
    The ``ParallelConfig`` validator has already checked the rules of the configuration alone."""
    p, m, t = parallel, model, training
    mbs, gbs = p.micro_batch_size, t.global_batch_size
    err = first(
        stage_layers_sum(p.stage_layers, m.num_layers),
        stage_layers_nonempty(p.stage_layers, ends_may_be_empty=True),
        interleaving_needs_pipeline(p.pp, p.virtual_stages),
        seq_len_fits(m, t.seq_len),
        tp_divides_model(m, p.tp),
        sequence_parallel_splits_seq(p.sequence_parallel, p.tp, t.seq_len),
        cp_splits_seq(p.cp, t.seq_len, p.tp, p.sequence_parallel),
        cp_splits_heads(m, p.tp, p.cp, p.cp_comm),
        batch_divides(gbs, p.dp, mbs),
        ep_fits_model(m, p.ep, p.etp),
    )
    if err is not None:
        return err
    n = gbs // (p.dp * mbs)
    return first(one_f_one_b_microbatches(p.schedule, p.pp, n, gbs, p.dp), interleaved_rounds(p.schedule, p.pp, n))
