"""The parallel configuration, spelled once: its fields (type, bounds, default, docs), its schedules
(what the planner can price, what the runtime can run) and how a configuration is described.

``ParallelConfig`` and ``ParallelPins`` (``planner.specs``) take every field's bounds, default and
description from ``FIELDS``; the ``Candidate`` class (``planner.compose.cost``) holds the same fields minus
``stage_layers``; ``planner.answer.request.ESTIMATE_DEFAULTS`` is ``estimate_defaults()``. The classes keep
their annotations (static typing) and ``check_fields`` checks them against ``FIELDS`` at import,
so none of them can drift from this table.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, fields, is_dataclass
from typing import Any, Literal

MAX_LAYERS = 1024
MAX_GPUS = 131_072

# --------------------------------------------------------------------------------------------
# Schedules


@dataclass(frozen=True)
class ScheduleInfo:
    """One pipeline schedule: whether the planner's cost model prices it, whether the runtime
    (``torch.distributed.pipelining``) runs it, and how its model chunks sit on the ranks."""

    id: str
    #: The planner's cost model prices it: it is searched, estimated and may be pinned.
    priced: bool
    #: The runtime runs it (with ``torch_class``).
    runnable: bool
    #: Several model chunks (virtual stages) per pipeline rank.
    needs_virtual_stages: bool
    #: The one virtual-stage count the schedule allows, or None (any ≥ 2 when it needs them, else 1).
    fixed_virtual_stages: int | None
    #: Chunk c sits on rank c mod pp ("looped") or in a V (rank c, then 2·pp − 1 − c: "v").
    placement: Literal["looped", "v"]
    #: Backward split into input- and weight-gradient passes (zero bubble): FSDP keeps the
    #: parameters gathered between them.
    splits_backward: bool
    #: The ``torch.distributed.pipelining`` class the runtime runs it with (None: not runnable).
    torch_class: str | None
    description: str


SCHEDULES: tuple[ScheduleInfo, ...] = (
    ScheduleInfo(
        "gpipe",
        priced=True,
        runnable=True,
        needs_virtual_stages=False,
        fixed_virtual_stages=1,
        placement="looped",
        splits_backward=False,
        torch_class="ScheduleGPipe",
        description="All forwards, then all backwards (GPipe).",
    ),
    ScheduleInfo(
        "1f1b",
        priced=True,
        runnable=True,
        needs_virtual_stages=False,
        fixed_virtual_stages=1,
        placement="looped",
        splits_backward=False,
        torch_class="Schedule1F1B",
        description="One forward, one backward (PipeDream-Flush); needs micro-batches ≥ pp.",
    ),
    ScheduleInfo(
        "interleaved-1f1b",
        priced=True,
        runnable=True,
        needs_virtual_stages=True,
        fixed_virtual_stages=None,
        placement="looped",
        splits_backward=False,
        torch_class="ScheduleInterleaved1F1B",
        description="1F1B over several looped model chunks per rank (Megatron-LM virtual pipeline).",
    ),
    ScheduleInfo(
        "interleaved-zero-bubble",
        priced=False,
        runnable=True,
        needs_virtual_stages=True,
        fixed_virtual_stages=None,
        placement="looped",
        splits_backward=True,
        torch_class="ScheduleInterleavedZeroBubble",
        description="Interleaved schedule that splits backward into input and weight gradients; runtime only.",
    ),
    ScheduleInfo(
        "zbv-zero-bubble",
        priced=False,
        runnable=True,
        needs_virtual_stages=True,
        fixed_virtual_stages=2,
        placement="v",
        splits_backward=True,
        torch_class="ScheduleZBVZeroBubble",
        description="Zero-bubble schedule with two chunks per rank placed in a V; runtime only.",
    ),
)
SCHEDULE_INFO: dict[str, ScheduleInfo] = {s.id: s for s in SCHEDULES}
Schedule = Literal["gpipe", "1f1b", "interleaved-1f1b", "interleaved-zero-bubble", "zbv-zero-bubble"]
if typing.get_args(Schedule) != tuple(
    SCHEDULE_INFO
):  # the Literal is spelled for type checkers; it must match the table
    raise TypeError(f"Schedule {typing.get_args(Schedule)} differs from SCHEDULES {tuple(SCHEDULE_INFO)}")
#: Schedules the planner's cost model prices (and searches); the others are runtime-only.
PRICED_SCHEDULES: tuple[str, ...] = tuple(s.id for s in SCHEDULES if s.priced)
#: Schedules the runtime runs.
RUNNABLE_SCHEDULES: tuple[str, ...] = tuple(s.id for s in SCHEDULES if s.runnable)
if any(s.runnable != (s.torch_class is not None) for s in SCHEDULES):
    raise TypeError("a runnable schedule names its torch.distributed.pipelining class, and only a runnable one")
#: Schedules that place several model chunks (virtual stages) on each pipeline rank.
MULTI_STAGE_SCHEDULES: frozenset[str] = frozenset(s.id for s in SCHEDULES if s.needs_virtual_stages)

#: ``layernorm+moe_act``: Megatron-core's ``--recompute-granularity selective --recompute-modules layernorm moe_act``
#: (output-discarding checkpoints of the separate norms and the MoE experts' activation: ``compose.recompute_modules``);
#: ``selective`` is Megatron's default module list, the core attention.
Recompute = Literal["none", "selective", "full", "layernorm+moe_act"]

# --------------------------------------------------------------------------------------------
# Context parallelism (issue 24)


@dataclass(frozen=True)
class CpCommInfo:
    """One context-parallel exchange (``parallel.cp_comm``; Megatron's ``--cp-comm-type`` names)."""

    id: str
    #: The bundled runtime runs it (``runtime/context_parallel.py``); else export-only.
    runnable: bool
    #: Heads (and KV heads) per TP rank must divide by cp (the exchange splits heads).
    splits_heads: bool
    description: str


CP_COMMS: tuple[CpCommInfo, ...] = (
    CpCommInfo(
        "p2p",
        True,
        False,
        "Ring: K/V rotate over the cp ranks (cp − 1 hops), blockwise attention merged by "
        "log-sum-exp (Ring Attention; Megatron p2p; torch's 'alltoall' rotation).",
    ),
    CpCommInfo(
        "all_gather",
        True,
        False,
        "All-gather K/V before attention, reduce-scatter dK/dV after "
        "(Llama 3; Megatron all_gather; torch's 'allgather' rotation).",
    ),
    CpCommInfo(
        "a2a",
        True,
        True,
        "Ulysses: all-to-all Q/K/V from sequence- to head-sharded, attention over the whole "
        "sequence, all-to-all back (DeepSpeed-Ulysses; Megatron a2a).",
    ),
    CpCommInfo(
        "a2a+p2p",
        True,
        True,
        "Hierarchical: a2a inside a node, ring across nodes (Megatron hierarchical_context_parallel_sizes).",
    ),
)
CP_COMM_INFO: dict[str, CpCommInfo] = {c.id: c for c in CP_COMMS}
CpComm = Literal["p2p", "all_gather", "a2a", "a2a+p2p"]
if typing.get_args(CpComm) != tuple(CP_COMM_INFO):
    raise TypeError(f"CpComm {typing.get_args(CpComm)} differs from CP_COMMS {tuple(CP_COMM_INFO)}")
#: The exchanges the bundled runtime runs.
RUNNABLE_CP_COMMS: tuple[str, ...] = tuple(c.id for c in CP_COMMS if c.runnable)

# --------------------------------------------------------------------------------------------
# Fields

REQUIRED: Any = ...


@dataclass(frozen=True)
class ConfigField:
    """One field of a parallel configuration. ``default`` is ParallelConfig's default and what
    ``estimate`` uses when the field is not pinned; ``required`` fields have no ParallelConfig
    default; ``estimate`` says how ``estimate`` fills the field when it is not pinned."""

    name: str
    type: Any
    description: str
    default: Any = None
    required: bool = False
    estimate: str = "default"
    in_class: bool = True  # part of a configuration class (Candidate): all but the stage cut
    ge: int | None = None
    le: int | None = None
    min_length: int | None = None
    max_length: int | None = None

    def bounds(self) -> dict[str, Any]:
        return {k: v for k in ("ge", "le", "min_length", "max_length") if (v := getattr(self, k)) is not None}


FIELDS: tuple[ConfigField, ...] = (
    ConfigField("tp", int, "Tensor-parallel degree.", 1, required=True, ge=1, le=MAX_GPUS),
    ConfigField("pp", int, "Pipeline-parallel degree (pipeline ranks).", 1, required=True, ge=1, le=MAX_LAYERS),
    ConfigField(
        "dp",
        int,
        "Data-parallel degree.",
        None,
        required=True,
        estimate="the GPUs left: num_gpus / (tp × pp)",
        ge=1,
        le=MAX_GPUS,
    ),
    ConfigField(
        "cp",
        int,
        "Context-parallel degree: the sequence split over cp ranks (load-balanced causal chunks); searched where "
        "the training stack runs CP (its cp_comms).",
        1,
        ge=1,
        le=MAX_GPUS,
    ),
    ConfigField(
        "cp_comm",
        CpComm,
        "Context-parallel exchange (used when cp > 1; see planner.specs.config.CP_COMMS).",
        "p2p",
    ),
    ConfigField("micro_batch_size", int, "Sequences per micro-batch.", 1, required=True, ge=1, le=1_000_000),
    ConfigField("schedule", Schedule, "Pipeline schedule (see GET /v1/catalog/schedules).", "1f1b"),
    ConfigField(
        "virtual_stages",
        int,
        "Model chunks per pipeline rank (interleaved schedules).",
        1,
        estimate="2 for schedules with virtual stages, else 1",
        ge=1,
        le=64,
    ),
    ConfigField(
        "recompute",
        Recompute,
        "Activation recomputation: none; selective (the core attention); full (whole layers); layernorm+moe_act "
        "(Megatron-core's --recompute-modules layernorm moe_act: the separate norms' and the MoE experts' "
        "activation outputs discarded and rerun in backward).",
        "none",
    ),
    ConfigField("sequence_parallel", bool, "Sequence parallelism (needs tp > 1).", False),
    ConfigField("zero_stage", int, "ZeRO stage over the data-parallel group.", 0, ge=0, le=3),
    ConfigField(
        "stage_layers",
        list[int],
        "Transformer layers of each model chunk, in pipeline order (pp × virtual_stages entries).",
        None,
        required=True,
        estimate="an even split (remainder to the middle chunks)",
        in_class=False,
        min_length=1,
        max_length=4096,
    ),
    ConfigField(
        "tp_comm_overlap",
        bool,
        "Overlap the tensor-parallel all-gathers and reduce-scatters with the GEMMs next to them, as the training "
        "stack does (Megatron/Transformer Engine userbuffers --tp-comm-overlap, torchtitan async TP; "
        "planner.specs.tp_overlap); needs sequence parallelism and a stack that runs it.",
        False,
    ),
    ConfigField(
        "ep",
        int,
        "Expert-parallel degree (mixture-of-experts models): the routed experts split over ep ranks carved from "
        "the data-parallel ranks (Megatron-core's folding: expert layers see etp × ep × expert-dp over the "
        "tp × dp ranks of a stage). Divides the routed experts and dp; 1 on dense models.",
        1,
        ge=1,
        le=MAX_GPUS,
    ),
    ConfigField(
        "etp",
        int,
        "Expert tensor-parallel degree: 1 (each expert whole on a rank; needs sequence parallelism when tp > 1) or "
        "tp (experts split like the dense MLP, Megatron-core's default).",
        1,
        estimate="tp on a mixture-of-experts model (Megatron-core's default), else 1",
        ge=1,
        le=MAX_GPUS,
    ),
)
FIELD: dict[str, ConfigField] = {f.name: f for f in FIELDS}
CLASS_FIELDS: tuple[str, ...] = tuple(f.name for f in FIELDS if f.in_class)


def config_field(name: str) -> Any:
    """The pydantic ``Field`` of ``ParallelConfig.<name>``."""
    from pydantic import Field

    f = FIELD[name]
    return Field(default=REQUIRED if f.required else f.default, description=f.description, **f.bounds())


def pin_field(name: str) -> Any:
    """The pydantic ``Field`` of ``ParallelPins.<name>`` (optional: None means searched/defaulted)."""
    from pydantic import Field

    f = FIELD[name]
    return Field(
        default=None,
        description=f"{f.description} Unpinned: searched by plan; estimate uses {_estimate_doc(f)}.",
        **f.bounds(),
    )


def _estimate_doc(f: ConfigField) -> str:
    return repr(f.default) if f.estimate == "default" else f.estimate


def estimate_defaults() -> dict[str, Any]:
    """What ``estimate`` uses for an unpinned field that has a plain default."""
    return {f.name: f.default for f in FIELDS if f.estimate == "default"}


def _plain(t: Any) -> Any:
    """The runtime class of an annotation (a Literal's value type, a generic's origin)."""
    if typing.get_origin(t) is Literal:
        return type(typing.get_args(t)[0])
    return typing.get_origin(t) or t


def check_fields(cls: type, *, optional: bool = False, class_only: bool = False) -> None:
    """Raise TypeError unless ``cls`` (a pydantic model or a dataclass) declares exactly the fields
    of ``FIELDS`` (only the class fields with ``class_only``), in order, with matching types; a
    pydantic model must also carry the table's default, bounds and description (declare each field
    as ``config_field(name)``, or ``pin_field(name)`` for the all-optional ``optional`` model)."""
    want = [f for f in FIELDS if f.in_class or not class_only]
    if is_dataclass(cls):
        hints = typing.get_type_hints(cls)
        have = {f.name: hints[f.name] for f in fields(cls)}
    else:
        have = {name: info.annotation for name, info in cls.model_fields.items()}  # type: ignore[attr-defined]
    if list(have) != [f.name for f in want]:
        raise TypeError(
            f"{cls.__name__} fields {list(have)} differ from planner.specs.config.FIELDS {[f.name for f in want]}"
        )
    for f in want:
        t = f.type | None if optional else f.type
        ok = have[f.name] == t if not is_dataclass(cls) else _plain(have[f.name]) is _plain(f.type)
        if not ok:
            raise TypeError(f"{cls.__name__}.{f.name} is {have[f.name]}, planner.specs.config.FIELDS says {t}")
    if not is_dataclass(cls):
        for f in want:
            info = cls.model_fields[f.name]  # type: ignore[attr-defined]
            ref = (pin_field if optional else config_field)(f.name)
            if (info.is_required(), info.default, info.description, info.metadata) != (
                ref.is_required(),
                ref.default,
                ref.description,
                ref.metadata,
            ):
                raise TypeError(
                    f"{cls.__name__}.{f.name}: declare it as {'pin_field' if optional else 'config_field'}({f.name!r})"
                )


# --------------------------------------------------------------------------------------------
# Description


def describe(config: Any, num_microbatches: int | None = None) -> str:
    """One line naming a configuration: a ``ParallelConfig``, a ``Candidate`` or anything with the
    same fields (``stage_layers`` is shown when present), e.g.
    ``TP8+SP×PP2×DP4, mbs 1 (16 micro-batches), 1f1b, recompute none, ZeRO-1, stages [40, 40]``."""
    c = config
    sp = ("+SP" if c.sequence_parallel else "") + ("+TPO" if getattr(c, "tp_comm_overlap", False) else "")
    cp = getattr(c, "cp", 1)
    cps = f"×CP{cp}({c.cp_comm})" if cp > 1 else ""
    ep, etp = getattr(c, "ep", 1), getattr(c, "etp", 1)
    eps = (f", EP{ep}" if ep > 1 else "") + (f", ETP{etp}" if etp > 1 else "")
    m = f" ({num_microbatches} micro-batches)" if num_microbatches is not None else ""
    v = f" v={c.virtual_stages}" if c.virtual_stages > 1 else ""
    stages = getattr(c, "stage_layers", None)
    return (
        f"TP{c.tp}{sp}{cps}×PP{c.pp}×DP{c.dp}, mbs {c.micro_batch_size}{m}, {c.schedule}{v}, recompute {c.recompute}, "
        f"ZeRO-{c.zero_stage}{eps}" + (f", stages {list(stages)}" if stages is not None else "")
    )
