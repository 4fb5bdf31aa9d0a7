"""What every exporter shares: the result type, the plan's invariants, the job geometry, and how a
warning is made prominent (in the output itself and in ``ExportResult.warnings``).

An exporter is a small object with an id, the target it writes for (and the version it was checked
against), a media type, and a ``render(plan, options, notes) -> str``. ``notes.warn`` records
something the target cannot express exactly; ``notes.info`` a remark that does not change the
plan's meaning. ``export()`` (``api/exporters/__init__.py``) runs the invariant check first and puts
the warnings at the top of the output.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import ClassVar

from pydantic import BaseModel, Field

from planner.compose.recompute_modules import MEGATRON_MODULES, MODULES
from planner.specs import Plan, rules
from planner.specs.errors import MeshplanError
from planner.specs.layout import mesh_layout, stage_ranks
from planner.specs.stacks import STACKS

from .options import ExportOptions


class ExportResult(BaseModel):
    """One exported file: its text, media type, a download filename, and the warnings also written
    into the text."""

    format: str
    content: str
    media_type: str
    filename: str
    warnings: list[str] = Field(default_factory=list)


@dataclass
class Notes:
    """Warnings (the target cannot express part of the plan) and informational remarks."""

    warnings: list[str] = field(default_factory=list)
    info: list[str] = field(default_factory=list)
    #: The name the output will be written under (``meshplan export --out FILE``), when known.
    out_name: str | None = None

    def warn(self, text: str) -> None:
        if text not in self.warnings:
            self.warnings.append(text)

    def note(self, text: str) -> None:
        if text not in self.info:
            self.info.append(text)


@dataclass(frozen=True)
class Geometry:
    """Derived job shape: world size, nodes × processes per node, micro-batches."""

    world_size: int
    nnodes: int
    nproc_per_node: int
    num_microbatches: int  # per optimizer step, per data-parallel rank (= gradient accumulation)

    @property
    def multi_node(self) -> bool:
        return self.nnodes > 1


class Exporter:
    """Base class: subclasses set the class attributes and implement ``render``."""

    id: ClassVar[str]
    target: ClassVar[str]
    target_version: ClassVar[str]
    media_type: ClassVar[str]
    extension: ClassVar[str]
    #: How a comment line starts in this format (None: no comments, e.g. JSON).
    comment: ClassVar[str | None] = "#"
    #: The training stack (``planner.specs.stacks`` preset id) whose software this target runs; a plan priced
    #: for another stack exports with a warning (``stack_warning``). Launchers run meshplan's runtime.
    stack: ClassVar[str] = "meshplan"
    #: Whether ``--command`` replaces the program (launchers): then the stack is the user's, unknown.
    runs_command: ClassVar[bool] = False

    def runs_stack(self, options: ExportOptions) -> str | None:
        """The stack this export runs: ``stack``, or None when it runs the user's ``--command``."""
        return None if self.runs_command and options.command is not None else self.stack

    def render(self, plan: Plan, options: ExportOptions, notes: Notes) -> str:  # pragma: no cover
        raise NotImplementedError

    def filename(self, plan: Plan, options: ExportOptions) -> str:
        return f"{options.job_name}-{self.id}.{self.extension}"

    def catalog_entry(self) -> dict[str, str]:
        return {
            "id": self.id,
            "media_type": self.media_type,
            "target": self.target,
            "target_version": self.target_version,
            "stack": self.stack,
        }


# ------------------------------------------------------------------------------------------------
# The training stack a plan was priced for, and the one an export runs


def plan_stack(plan: Plan) -> str:
    """The preset id of the training stack the plan was priced for (an inline stack's ``base``)."""
    stack = plan.training.stack
    return stack if isinstance(stack, str) else stack.base


def stack_warning(plan: Plan, exporter: Exporter, options: ExportOptions) -> str | None:
    """The warning for exporting a plan priced for one training stack to a target that runs another
    (None when they agree, or the target runs the user's own ``--command``). Plain ASCII: the service
    also sends it as an HTTP header."""
    runs = exporter.runs_stack(options)
    priced = plan_stack(plan)
    if runs is None or runs == priced:
        return None
    return (
        f"the plan was priced for the training stack '{priced}' but the {exporter.id} export runs '{runs}': "
        f"its step time, memory and choice of configuration assume {priced}'s kernels, activation memory and "
        f'overlap; re-plan with --stack {runs} (training.stack: "{runs}") to price it for the stack that runs it'
    )


def refuse_recompute_modules(plan: Plan, stack: str, target: str) -> None:
    """A plan recomputing by module (``layernorm+moe_act``: Megatron-core's ``--recompute-modules``) exported to
    ``target``, which has no recomputation by module, is refused naming the field, the training stack that target
    runs and what that stack recomputes (``Stack.recompute``, the same table that prices a re-plan for it)."""
    if plan.parallel.recompute != MODULES:
        return
    modes = [m for m in STACKS[stack].recompute if m != MODULES]
    offer = " or ".join([", ".join(modes[:-1]), modes[-1]] if len(modes) > 1 else modes)
    raise MeshplanError(
        "plan.parallel.recompute",
        f"{target} has no recomputation by module: {MODULES!r} is Megatron-core's --recompute-modules "
        f"{' '.join(MEGATRON_MODULES)} (output-discarding checkpoints of the norms and the MoE activation); "
        f"the {stack!r} training stack recomputes {offer}",
        f"re-plan with parallel.recompute {offer}, or export to megatron",
    )


# ------------------------------------------------------------------------------------------------
# Invariants


def check_invariants(plan: Plan) -> None:
    """The plan's arithmetic must hold before anything is exported: degrees multiply to the GPUs
    used, the configuration keeps the rules every target needs (``planner.specs.rules.runnable``: the layer
    split sums to the model's layers, the global batch splits into micro-batches, TP divides the
    heads, 1F1B has ≥ pp micro-batches…), the estimate's micro-batch count agrees, and the mesh matches
    the degrees. Raises ``MeshplanError`` naming the field (under ``plan.``)."""
    p, est = plan.parallel, plan.estimate
    world = p.num_gpus
    named = f"tp × cp × pp × dp = {p.tp}×{p.cp}×{p.pp}×{p.dp}" if p.cp > 1 else f"tp × pp × dp = {p.tp}×{p.pp}×{p.dp}"
    if world != est.gpus_used:
        raise MeshplanError(
            "plan.parallel",
            f"{named} = {world} but the plan uses {est.gpus_used} GPUs",
            "re-plan, or correct parallel.tp/cp/pp/dp or estimate.gpus_used so they agree",
        )
    if world > plan.cluster.num_gpus:
        raise MeshplanError(
            "plan.parallel",
            f"{named} = {world} exceeds the cluster's {plan.cluster.num_gpus} GPUs",
            "re-plan for this cluster",
        )
    rules.check(rules.prefixed(rules.runnable(plan.model, plan.training, p), "plan."))
    gbs = p.micro_batch_size * est.num_microbatches * p.dp
    if gbs != plan.training.global_batch_size:
        raise MeshplanError(
            "plan.training.global_batch_size",
            f"global batch {plan.training.global_batch_size} ≠ micro_batch_size × num_microbatches × dp "
            f"= {p.micro_batch_size}×{est.num_microbatches}×{p.dp} = {gbs}",
            "re-plan so the global batch is a multiple of micro_batch_size × dp",
        )
    want = mesh_layout(p)
    if plan.mesh.shape != want.shape or plan.mesh.dim_names != want.dim_names:
        raise MeshplanError(
            "plan.mesh",
            f"mesh {plan.mesh.dim_names}={plan.mesh.shape} does not match ({', '.join(want.dim_names)}) = "
            f"({', '.join(map(str, want.shape))})",
            "rebuild the mesh with planner.specs.layout.mesh_layout(parallel)",
        )


def geometry(plan: Plan, options: ExportOptions) -> Geometry:
    """Nodes × processes per node for the plan's world size, checked against the options."""
    world = plan.parallel.num_gpus
    gpn = plan.cluster.gpus_per_node
    if options.gpus_per_node is not None:
        gpn = options.gpus_per_node
    if world <= gpn and options.nodes in (None, 1):
        nnodes, nproc = 1, world
    else:
        if world % gpn:
            raise MeshplanError(
                "gpus_per_node",
                f"the plan's {world} GPUs do not fill nodes of {gpn} GPUs",
                f"use a GPUs-per-node count that divides {world}, or re-plan",
            )
        nnodes, nproc = world // gpn, gpn
    if options.nodes is not None and options.nodes != nnodes:
        raise MeshplanError(
            "nodes",
            f"{options.nodes} nodes given but the plan needs {nnodes} nodes × {nproc} GPUs = {world}",
            f"omit --nodes or pass --nodes {nnodes} (or re-plan for {options.nodes} nodes)",
        )
    return Geometry(world, nnodes, nproc, plan.estimate.num_microbatches)


# ------------------------------------------------------------------------------------------------
# Pipeline helpers shared by the framework targets


def rank_layer_counts(plan: Plan) -> list[int]:
    """Transformer layers held by each pipeline rank (all its chunks together)."""
    counts = [0] * plan.parallel.pp
    for chunk, rank in enumerate(stage_ranks(plan.parallel)):
        counts[rank] += plan.parallel.stage_layers[chunk]
    return counts


def chunk_layer_ranges(stage_layers: list[int]) -> list[range]:
    """Global layer indices of each chunk, in pipeline order."""
    out, start = [], 0
    for n in stage_layers:
        out.append(range(start, start + n))
        start += n
    return out


#: The layout a launched program receives (docs/exports.md; ``runtime.env`` reads them back).
LAYOUT_ENV = (
    "MESHPLAN_PLAN",
    "MESHPLAN_TP",
    "MESHPLAN_PP",
    "MESHPLAN_DP",
    "MESHPLAN_CP",
    "MESHPLAN_CP_COMM",
    "MESHPLAN_EP",
    "MESHPLAN_ETP",
    "MESHPLAN_MICRO_BATCH_SIZE",
    "MESHPLAN_NUM_MICROBATCHES",
    "MESHPLAN_GLOBAL_BATCH_SIZE",
    "MESHPLAN_SEQ_LEN",
    "MESHPLAN_SCHEDULE",
    "MESHPLAN_VIRTUAL_STAGES",
    "MESHPLAN_STAGE_LAYERS",
    "MESHPLAN_RECOMPUTE",
    "MESHPLAN_SEQUENCE_PARALLEL",
    "MESHPLAN_ZERO_STAGE",
    "MESHPLAN_PRECISION",
)


def layout_env(plan: Plan, plan_path: str) -> dict[str, str]:
    """``MESHPLAN_*`` variables that tell the launched program the plan's layout (every launcher
    target exports them; ``runtime.env.mesh_from_env()`` builds the DeviceMesh from them)."""
    p, t = plan.parallel, plan.training
    values = [
        plan_path,
        p.tp,
        p.pp,
        p.dp,
        p.cp,
        p.cp_comm,
        p.ep,
        p.etp,
        p.micro_batch_size,
        plan.estimate.num_microbatches,
        t.global_batch_size,
        t.seq_len,
        p.schedule,
        p.virtual_stages,
        ",".join(map(str, p.stage_layers)),
        p.recompute,
        int(p.sequence_parallel),
        p.zero_stage,
        t.precision,
    ]
    return {k: str(v) for k, v in zip(LAYOUT_ENV, values)}


def env_exports(plan: Plan, plan_path: str) -> str:
    """The layout variables as shell ``export`` lines (torchrun and srun pass them to every process)."""
    import shlex

    lines = ["# The plan's layout, for the launched program (docs/exports.md; runtime.env.mesh_from_env())."]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in layout_env(plan, plan_path).items()]
    return "\n".join(lines) + "\n"


def header_lines(plan: Plan, exporter: Exporter) -> list[str]:
    """What the file is, for whom, and where it came from (no timestamps: outputs are reproducible)."""
    p = plan.parallel
    return [
        f"meshplan export: {exporter.target} ({exporter.target_version})",
        f"model {plan.model.name} on {plan.cluster.num_nodes} node(s) × {plan.cluster.gpus_per_node} {plan.gpu.id}; "
        f"plan rank {plan.rank}",
        f"tp={p.tp} pp={p.pp} dp={p.dp} micro_batch_size={p.micro_batch_size} "
        f"num_microbatches={plan.estimate.num_microbatches} global_batch_size={plan.training.global_batch_size} "
        f"seq_len={plan.training.seq_len}",
        f"schedule={p.schedule} virtual_stages={p.virtual_stages} stage_layers={p.stage_layers}",
        f"recompute={p.recompute} sequence_parallel={str(p.sequence_parallel).lower()} zero_stage={p.zero_stage} "
        f"precision={plan.training.precision}",
    ]


def comment_block(prefix: str, lines: list[str], warnings: list[str], info: list[str]) -> str:
    """Header, then warnings in a box nobody can miss, then remarks; each line starts with prefix."""
    out = [f"{prefix} {line}" for line in lines]
    if warnings:
        bar = f"{prefix} {'!' * 78}"
        out += [bar, f"{prefix} WARNING: this target cannot express all of the plan ({len(warnings)} issue(s)):"]
        for w in warnings:
            out += _wrap(prefix, f"WARNING: {w}")
        out.append(bar)
    for i in info:
        out += _wrap(prefix, f"note: {i}")
    return "\n".join(out) + "\n"


def _wrap(prefix: str, text: str, width: int = 96) -> list[str]:
    words, lines, cur = text.split(), [], ""
    for w in words:
        if cur and len(cur) + 1 + len(w) > width:
            lines.append(cur)
            cur = "  " + w
        else:
            cur = f"{cur} {w}" if cur else w
    if cur:
        lines.append(cur)
    return [f"{prefix} {line}" for line in lines]


def safe_identifier(text: str) -> str:
    """A Python identifier from a name like 'llama3-70b'."""
    ident = re.sub(r"\W", "_", text)
    return ident if ident and not ident[0].isdigit() else f"m_{ident}"
