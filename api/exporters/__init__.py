"""Exporters: turn a ``Plan`` into what a scheduler or training stack runs.

``FORMATS`` maps a format id to its exporter; ``export(plan, fmt, options)`` checks the plan's
invariants, renders, and returns an ``ExportResult`` (text, media type, download filename, warnings).
Something the target cannot express is either an error (``MeshplanError``) or a warning written
prominently into the output and returned in ``warnings``; ``options.strict`` makes warnings errors.
A plan priced for another training stack than the one the target runs (``Exporter.stack``: Megatron-LM,
DeepSpeed, torchtitan; the launchers and ``meshplan`` run meshplan's runtime unless ``--command``
names another program) exports with a warning saying so and how to re-plan (``stack_warning``).
"""

from __future__ import annotations

from planner.specs import Plan
from planner.specs.errors import MeshplanError
from planner.specs.stacks import resolve as resolve_stack

from .base import Exporter, ExportResult, Notes, check_invariants, plan_stack, stack_warning
from .deepspeed import DeepSpeedExporter
from .kubeflow_pytorchjob import PyTorchJobExporter
from .kubeflow_trainjob import TrainJobExporter
from .megatron import MegatronExporter
from .megatron_eras import Megatron2022Exporter, MegatronV2Exporter, MegatronV25Exporter
from .meshplan import MeshplanExporter
from .options import ExportOptions
from .slurm import SlurmExporter
from .torchrun import TorchrunExporter
from .torchtitan import TorchtitanRecipeExporter, TorchtitanTomlExporter

FORMATS: dict[str, Exporter] = {
    e.id: e
    for e in (
        TorchrunExporter(),
        SlurmExporter(),
        PyTorchJobExporter(),
        TrainJobExporter(),
        MegatronExporter(),
        MegatronV2Exporter(),
        MegatronV25Exporter(),
        Megatron2022Exporter(),
        DeepSpeedExporter(),
        TorchtitanRecipeExporter(),
        TorchtitanTomlExporter(),
        MeshplanExporter(),
    )
}

__all__ = [
    "FORMATS",
    "ExportOptions",
    "ExportResult",
    "Exporter",
    "export",
    "export_formats",
    "plan_stack",
    "stack_warning",
]


def export_formats() -> list[dict[str, str]]:
    """``GET /v1/catalog/export-formats``: ``[{id, media_type, target, target_version, stack}]``."""
    return [e.catalog_entry() for e in FORMATS.values()]


def moe_refusal(plan: Plan, exporter: Exporter, options: ExportOptions) -> None:
    """A mixture-of-experts plan exported to meshplan's runtime (the ``meshplan`` target, or a launcher without
    ``--command``) while that stack does not run MoE models (``Stack.moe``) is refused, naming the way out; the
    launchers still carry the layout (``MESHPLAN_EP``, ``MESHPLAN_ETP``) to a ``--command`` program. (DeepSpeed
    refuses in its own words: ``deepspeed.deepspeed_config``.)"""
    runs = exporter.runs_stack(options)
    if runs is None or exporter.stack != "meshplan":
        return
    if plan.model.moe is None or resolve_stack(runs).moe:  # what its runtime builds (whole experts, dropless), by name
        from api.exporters.meshplan import check_buildable

        try:
            check_buildable(plan)
        except MeshplanError as err:
            if exporter.runs_command:
                err.fix += ", or give --command to start your own program" + (
                    ": it receives MESHPLAN_EP / MESHPLAN_ETP" if plan.model.moe is not None else ""
                )
            raise
        return
    fix = "export to megatron or torchtitan (`meshplan export --format megatron` / `torchtitan`)"
    if exporter.runs_command:
        fix += ", or give --command to start your own program: it receives the layout with MESHPLAN_EP / MESHPLAN_ETP"
    raise MeshplanError(
        "plan.model.moe",
        f"the {exporter.id} export runs meshplan's runtime (training stack 'meshplan'), which cannot run "
        f"{plan.model.name!r}, a mixture of experts (ep={plan.parallel.ep}): its model zoo has no MoE block",
        fix,
    )


def export(plan: Plan, fmt: str, options: ExportOptions | None = None, *, out_name: str | None = None) -> ExportResult:
    """Render ``plan`` for target ``fmt``. Raises ``MeshplanError`` for an unknown format, a plan
    whose invariants do not hold, or a plan the target cannot run at all. ``out_name``: the file the
    output will be written to (named in headers such as Slurm's "Submit with: sbatch FILE")."""
    exporter = FORMATS.get(fmt)
    if exporter is None:
        raise MeshplanError("format", f"unknown export format {fmt!r}", f"use one of {', '.join(FORMATS)}")
    options = options or ExportOptions()
    check_invariants(plan)
    notes = Notes(out_name=out_name)
    moe_refusal(plan, exporter, options)
    mismatch = stack_warning(plan, exporter, options)
    if mismatch is not None:  # first: it concerns every number of the plan
        notes.warn(mismatch)
    content = exporter.render(plan, options, notes)
    if options.strict and notes.warnings:
        raise MeshplanError(
            "format",
            f"{fmt} cannot express the plan exactly: " + "; ".join(notes.warnings),
            "drop --strict to export with warnings, re-plan, or choose another format",
        )
    return ExportResult(
        format=fmt,
        content=content,
        media_type=exporter.media_type,
        filename=out_name or exporter.filename(plan, options),
        warnings=list(notes.warnings),
    )
