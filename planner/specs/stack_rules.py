"""What a training stack runs (issue 27 §1), checked against a configuration: the data is each
``planner.specs.stacks.Stack``'s capability fields; ``planner.specs.rules`` re-exports these checks."""

from __future__ import annotations

from typing import Any

from planner.specs.config import MULTI_STAGE_SCHEDULES
from planner.specs.errors import MeshplanError
from planner.specs.stacks import STACKS, Stack


def _stack_name(stack: Stack) -> str:
    return f"the training stack {stack.id!r} ({stack.version})"


def _others(offers: Any, what: str) -> str:
    """``training.stack`` presets that run it (for the fix), or '' when none does."""
    ids = [s.id for s in STACKS.values() if offers(s)]
    return f", or plan for a stack that runs {what} (training.stack: {' / '.join(ids)})" if ids else ""


def stack_runs(
    stack: Stack,
    *,
    schedule: str | None = None,
    zero_stage: int | None = None,
    sequence_parallel: bool | None = None,
    recompute: str | None = None,
    pp: int | None = None,
    tie_embeddings: bool = False,
    cp: int | None = None,
    cp_comm: str | None = None,
    tp_comm_overlap: bool | None = None,
    attention_sinks: bool = False,
    mla: bool = False,
    sliding_window: bool = False,
    num_layers: int | None = None,
    chunks: int | None = None,
    stage_layers: tuple[int, ...] | None = None,
    tp: int | None = None,
    shard_group: int | None = None,
    micro_batches: int | None = None,
) -> MeshplanError | None:
    """The configuration (or the pinned part of one: None = not given) is one the request's training
    stack runs (``planner.specs.stacks.Stack``: ``schedules``, ``zero_stages``, ``pipeline_zero_stages``,
    ``sequence_parallel``, ``recompute``, ``pp_with_tied_embeddings``, ``cp_comms``, ``cp_with_attention_sinks``, ``cp_with_mla``, ``cp_window_comms``,
    ``even_stages``, ``interleaved_min_pp``, ``pipeline_parallel``, ``accumulation``, ``tp_with_fused_norm``, ``tp_without_sp``; ``chunks``:
    pp × virtual stages; ``shard_group``: dp·cp, over one rank nothing is sharded (ZeRO-0 on every stack);
    ``micro_batches``: a step's per data-parallel rank)."""
    if pp is not None and pp > 1 and not stack.pipeline_parallel:
        return MeshplanError(
            "parallel.pp",
            f"{_stack_name(stack)} does not run pipeline parallelism (pp={pp})",
            "pin parallel.pp to 1 or leave it unpinned" + _others(lambda s: s.pipeline_parallel, "pipelines"),
        )
    if micro_batches is not None and micro_batches > 1 and pp == 1 and not stack.accumulation:
        return MeshplanError(
            "parallel.micro_batch_size",
            f"{_stack_name(stack)} accumulates no gradients without pipeline parallelism: a step is one micro-batch "
            f"per data-parallel rank, not {micro_batches}",
            "pin parallel.micro_batch_size to global_batch_size / dp, or leave it unpinned"
            + _others(lambda s: s.accumulation, "gradient accumulation"),
        )
    if tp is not None and tp > 1 and stack.norm_kernel == "fused" and not stack.tp_with_fused_norm:
        return MeshplanError(
            "parallel.tp",
            f"{_stack_name(stack)} does not run tensor parallelism (tp={tp}) with its fused norm kernel",
            "pin parallel.tp to 1 or leave it unpinned, or set training.stack.norm_kernel to eager",
        )
    if sequence_parallel is False and tp is not None and tp > 1 and not stack.tp_without_sp:
        return MeshplanError(
            "parallel.sequence_parallel",
            f"{_stack_name(stack)} runs tensor parallelism (tp={tp}) with sequence parallelism only",
            "set parallel.sequence_parallel to true or leave it unpinned"
            + _others(lambda s: s.tp_without_sp, "tensor parallelism without sequence parallelism"),
        )
    if shard_group == 1 and zero_stage == 0:
        zero_stage = None  # one data-parallel rank shards nothing: ZeRO-0 on every stack
    if stack.even_stages and num_layers is not None and chunks is not None and num_layers % chunks:
        return MeshplanError(
            "parallel.pp",
            f"{_stack_name(stack)} splits the layers evenly over the pipeline stages only: {num_layers} layers do "
            f"not divide into pp × virtual stages = {chunks}",
            f"pin parallel.pp to a divisor of {num_layers} or leave it unpinned"
            + _others(lambda s: not s.even_stages, "uneven stages"),
        )
    if stack.even_stages and stage_layers is not None and len(set(stage_layers)) > 1:
        return MeshplanError(
            "parallel.stage_layers",
            f"{_stack_name(stack)} splits the layers evenly over the pipeline stages only, not {list(stage_layers)}",
            "leave parallel.stage_layers unpinned or pin an even split"
            + _others(lambda s: not s.even_stages, "uneven stages"),
        )
    if schedule is not None and schedule not in stack.schedules:
        return MeshplanError(
            "parallel.schedule",
            f"{_stack_name(stack)} does not run the pipeline schedule {schedule!r}: it runs {', '.join(stack.schedules)}",
            f"pin parallel.schedule to one of {', '.join(stack.schedules)} or leave it unpinned"
            + _others(lambda s: schedule in s.schedules, f"schedule {schedule!r}"),
        )
    if schedule in MULTI_STAGE_SCHEDULES and pp is not None and 1 < pp < stack.interleaved_min_pp:
        low = stack.interleaved_min_pp
        return MeshplanError(
            "parallel.pp",
            f"{_stack_name(stack)} runs the schedule {schedule!r} with pp ≥ {low} only, not pp={pp}",
            f"pin parallel.pp to {low} or more, or parallel.schedule to '1f1b'"
            + _others(lambda s: schedule in s.schedules and s.interleaved_min_pp <= pp, f"{schedule!r} with pp={pp}"),
        )
    piped = pp is not None and pp > 1
    runs_zero = zero_stages_at(stack, pp)
    if zero_stage is not None and zero_stage not in runs_zero:  # (pp > 1 on a stack without pipelines: refused above)
        offer = ", ".join(map(str, runs_zero))
        where = f" with pipeline parallelism (pp={pp}): with pp > 1 it runs" if piped else ": it runs"
        also = " or leave it unpinned"
        if piped:  # without the pipeline it may run: pp = 1
            also = ", or pp to 1" if zero_stage in stack.zero_stages else ""
        return MeshplanError(
            "parallel.zero_stage",
            f"{_stack_name(stack)} does not run ZeRO-{zero_stage}{where} ZeRO {offer} (`meshplan stacks` says what each is)",
            f"pin parallel.zero_stage to one of {offer}{also}"
            + _others(
                lambda s: zero_stage in (s.pipeline_zero_stages if piped else s.zero_stages),
                f"ZeRO-{zero_stage}" + (" with pp > 1" if piped else ""),
            ),
        )
    if sequence_parallel and not stack.sequence_parallel:
        return MeshplanError(
            "parallel.sequence_parallel",
            f"{_stack_name(stack)} does not run sequence parallelism",
            "set parallel.sequence_parallel to false or leave it unpinned"
            + _others(lambda s: s.sequence_parallel, "sequence parallelism"),
        )
    if recompute is not None and recompute not in stack.recompute:
        return MeshplanError(
            "parallel.recompute",
            f"{_stack_name(stack)} does not run recompute {recompute!r}: it runs {', '.join(stack.recompute)}",
            f"pin parallel.recompute to one of {', '.join(stack.recompute)} or leave it unpinned"
            + _others(lambda s: recompute in s.recompute, f"recompute {recompute!r}"),
        )
    if tie_embeddings and pp is not None and pp > 1 and not stack.pp_with_tied_embeddings:
        return MeshplanError(
            "parallel.pp",
            f"{_stack_name(stack)} does not run pipeline parallelism (pp={pp}) on a model with tied input and output embeddings "
            "(model.tie_embeddings): the embedding and the LM head must share a stage",
            "pin parallel.pp to 1 or leave it unpinned, or set model.tie_embeddings to false"
            + _others(lambda s: s.pp_with_tied_embeddings, "pp > 1 with tied embeddings"),
        )
    if cp is not None and cp > 1 and not stack.cp_comms:
        return MeshplanError(
            "parallel.cp",
            f"{_stack_name(stack)} does not run context parallelism (cp={cp})",
            "set parallel.cp to 1 or leave it unpinned" + _others(lambda s: bool(s.cp_comms), "context parallelism"),
        )
    # model parts a stack's CP exchanges may not run: (the model has it, what it is, the field, which stacks run it)
    parts = (
        (
            attention_sinks,
            "attention sinks",
            "attention_sinks",
            lambda s: bool(s.cp_comms) and s.cp_with_attention_sinks,
        ),
        (mla, "latent attention", "mla", lambda s: bool(s.cp_comms) and s.cp_with_mla),
        (sliding_window, "sliding-window layers", "sliding_window", lambda s: bool(s.cp_window_comms)),
    )
    for on, what, field, runs in parts if cp is not None and cp > 1 else ():
        if on and not runs(stack):
            return MeshplanError(
                "parallel.cp",
                f"{_stack_name(stack)} does not run context parallelism (cp={cp}) on a model with {what} "
                f"(model.{field})",
                "set parallel.cp to 1 or leave it unpinned" + _others(runs, f"CP with {what}"),
            )
    if cp is not None and cp > 1 and sliding_window and cp_comm is not None and cp_comm not in stack.cp_window_comms:
        return MeshplanError(
            "parallel.cp_comm",
            f"{_stack_name(stack)} does not run the context-parallel exchange {cp_comm!r} on a model with "
            f"sliding-window layers (model.sliding_window): it runs {', '.join(stack.cp_window_comms)} there",
            f"set parallel.cp_comm to one of {', '.join(stack.cp_window_comms)} or leave it unpinned",
        )
    if cp is not None and cp > 1 and cp_comm is not None and cp_comm not in stack.cp_comms:
        return MeshplanError(
            "parallel.cp_comm",
            f"{_stack_name(stack)} does not run the context-parallel exchange {cp_comm!r}: it runs "
            f"{', '.join(stack.cp_comms)}",
            f"set parallel.cp_comm to one of {', '.join(stack.cp_comms)}"
            + _others(lambda s: cp_comm in s.cp_comms, f"cp_comm {cp_comm!r}"),
        )
    if tp_comm_overlap and stack.tp_overlap is None:
        return MeshplanError(
            "parallel.tp_comm_overlap",
            f"{_stack_name(stack)} does not overlap tensor-parallel communication with the GEMMs",
            "set parallel.tp_comm_overlap to false or leave it unpinned"
            + _others(lambda s: s.tp_overlap is not None, "overlapped tensor parallelism"),
        )
    if tp_comm_overlap and not overlaps_tp(stack):
        return MeshplanError(
            "parallel.tp_comm_overlap",
            f"{_stack_name(stack)} overlaps tensor-parallel communication in compiled blocks only (async TP is an "
            f"Inductor pass), and this stack's kernels are {stack.kernels}",
            "set parallel.tp_comm_overlap to false or leave it unpinned, or set training.stack.kernels to compiled",
        )
    return None


def zero_stages_at(stack: Stack, pp: int | None) -> tuple[int, ...]:
    """The ZeRO stages ``stack`` runs at ``pp``: ``pipeline_zero_stages`` with pp > 1, ``zero_stages`` at pp = 1, either
    with pp unpinned (None; ZeRO-2 runs with pp > 1 only on torchtitan ≤ 9dec370)."""
    if pp is None:
        return tuple(sorted({*stack.zero_stages, *stack.pipeline_zero_stages}))
    return stack.pipeline_zero_stages if pp > 1 else stack.zero_stages


def overlaps_tp(stack: Stack) -> bool:
    """Whether the stack runs ``parallel.tp_comm_overlap``: TE's userbuffers, or torchtitan's async TP under
    torch.compile only (Inductor's ``micro_pipeline_tp`` pass: torchtitan 9515a140 ``parallelize_llama.py:50-54`` and
    9dec370 :54-58 "Async TP requires --training.compile", v0.2.2 ``distributed/tensor_parallel.py:22``, 0.3.0 on
    ``distributed/compile.py`` ``_maybe_enable_async_tp`` from the compile path only)."""
    return stack.tp_overlap == "userbuffers" or (stack.tp_overlap == "async_tp" and stack.kernels == "compiled")


def precision_error(stack: Stack, precision: str) -> MeshplanError | None:
    """``training.precision`` (other than FP8: ``planner.specs.fp8.check_fp8``) is one the stack trains in
    (``Stack.precisions``)."""
    if precision == "fp8" or precision in stack.precisions:
        return None
    return MeshplanError(
        "training.precision",
        f"{_stack_name(stack)} does not train in {precision}: it trains in {', '.join(stack.precisions)}",
        f"set training.precision to one of {', '.join(stack.precisions)}"
        + _others(lambda s: precision in s.precisions, precision),
    )


def whole_batch_pins(stack: Stack, pins: Any, global_batch: int, gpus: int) -> MeshplanError | None:
    """A pinned micro-batch size, dp unpinned, on a stack without accumulation at pp = 1 (``Stack.accumulation``):
    refused when even the most data-parallel ranks (``gpus`` (÷ cp) ÷ tp) leave more than one micro-batch a step."""
    one_stage = pins.pp == 1 or (pins.pp is None and not stack.pipeline_parallel)
    if not one_stage or pins.micro_batch_size is None or pins.dp is not None:
        return None
    fewest = -(-global_batch // (gpus // (pins.tp or 1) * pins.micro_batch_size))
    return stack_runs(stack, pp=1, micro_batches=fewest)


def stack_runs_config(stack: Stack, model: Any, config: Any, global_batch: int | None = None) -> MeshplanError | None:
    """``stack_runs`` of a configuration (a ``ParallelConfig`` or ``Candidate``) or of the pinned part of one
    (``ParallelPins``: an unpinned field is None and not checked); ``global_batch`` for its micro-batches a step."""
    return stack_runs(stack, **_fields(model, config, global_batch))


def _fields(model: Any, c: Any, global_batch: int | None = None) -> dict[str, Any]:
    dp, mbs, cp = c.dp, c.micro_batch_size, getattr(c, "cp", None) or 1
    return {
        "schedule": c.schedule,
        "zero_stage": c.zero_stage,
        "sequence_parallel": c.sequence_parallel,
        "recompute": c.recompute,
        "pp": c.pp,
        "tie_embeddings": model.tie_embeddings,
        "cp": getattr(c, "cp", None),  # a Candidate has none: the search keeps cp = 1
        "cp_comm": getattr(c, "cp_comm", None),
        "tp_comm_overlap": c.tp_comm_overlap,
        "attention_sinks": bool(getattr(model, "attention_sinks", False)),
        "mla": getattr(model, "mla", None) is not None,
        "sliding_window": getattr(model, "sliding_window", None) is not None,
        "num_layers": model.num_layers,
        "chunks": None if c.pp is None else c.pp * (getattr(c, "virtual_stages", None) or 1),
        "stage_layers": None if getattr(c, "stage_layers", None) is None else tuple(c.stage_layers),
        "tp": c.tp,
        "shard_group": None if dp is None else dp * cp,
        "micro_batches": None if None in (global_batch, dp, mbs) else global_batch // (dp * mbs),
    }


#: ``stack_runs_ok``'s answers, by (the stack's identity, the fields): the stack is kept to pin its identity.
_OK: dict[tuple, tuple[Stack, bool]] = {}


def stack_runs_ok(stack: Stack, model: Any, config: Any) -> bool:
    """``stack_runs_config(...) is None``, memoised (the search asks it of every class it enumerates)."""
    fields = _fields(model, config)
    key = (id(stack), *fields.values())
    hit = _OK.get(key)
    if hit is None or hit[0] is not stack:
        if len(_OK) > 65_536:
            _OK.clear()
        hit = _OK[key] = (stack, stack_runs(stack, **fields) is None)
    return hit[1]


def unbuilt_parts(stack: Stack, model: Any) -> list[str]:
    """The parts of ``model`` ``stack`` does not build (``Stack.unbuilt``): a field it sets (``"moe"``), a field at a
    value (``"norm=rmsnorm"``, ``"tie_embeddings=False"``) or off one (``"moe.moe_layer_freq!=1"``)."""
    found = []
    for part in stack.unbuilt:
        path, eq, value = part.partition("=")
        differs = path.endswith("!")
        owner, _, name = path.removesuffix("!").rpartition(".")
        got = getattr(getattr(model, owner, None) if owner else model, name, None)
        if not eq:
            hit = got not in (None, False)
        else:
            hit = got is not None and (str(got) != value if differs else str(got) == value)
        if hit:
            found.append(part)
    return found
