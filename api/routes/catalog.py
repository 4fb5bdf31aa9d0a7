"""``/v1/catalog``: the built-in models, GPUs, cluster presets, pipeline schedules, training stacks and export formats."""

from __future__ import annotations

from api.deps import v1_router
from api.routes.exports import export_formats
from api.schemas import CatalogModel, ExportFormat
from planner.specs import GpuSpec
from planner.specs.catalog import CLUSTER_PRESETS, GPUS, MODELS, ClusterPreset
from planner.specs.config import SCHEDULES, ScheduleInfo
from planner.specs.stacks import STACKS, Stack

router = v1_router("/catalog", "catalog")


@router.get("/models", response_model=list[CatalogModel])
async def list_models() -> list[CatalogModel]:
    """The catalog models (``ModelSpec``; mixtures of experts carry ``moe``: experts, top-k, ...) with their
    total and active parameter counts and MoE layer count, which a request does not send back."""
    from planner.workload.analytic import num_active_parameters, num_parameters

    return [
        CatalogModel(
            **m.model_dump(),
            total_parameters=num_parameters(m),
            active_parameters=num_active_parameters(m),
            moe_layers=sum(m.is_moe_layer(i) for i in range(m.num_layers)),
        )
        for m in MODELS.values()
    ]


@router.get("/gpus", response_model=list[GpuSpec])
async def list_gpus() -> list[GpuSpec]:
    return list(GPUS.values())


@router.get("/clusters", response_model=list[ClusterPreset])
async def list_clusters() -> list[ClusterPreset]:
    """Known systems a request can name as ``cluster.preset``: GPU, GPUs per node, links as their
    datasheets state them and as GB/s per GPU, and the datasheet."""
    return list(CLUSTER_PRESETS.values())


@router.get("/export-formats", response_model=list[ExportFormat])
async def list_export_formats() -> list[ExportFormat]:
    return export_formats()


@router.get("/schedules", response_model=list[ScheduleInfo])
async def list_schedules() -> list[ScheduleInfo]:
    """Every pipeline schedule a plan may name: ``priced`` ones the planner searches and estimates
    (``parallel.schedule`` pins accept only these), ``runnable`` ones the runtime executes."""
    return list(SCHEDULES)


@router.get("/stacks", response_model=list[Stack])
async def list_stacks() -> list[Stack]:
    """Training stack presets a request can name as ``training.stack`` (or start an inline one from):
    attention kernel, dropout, activation formula, DP gradient overlap, and their sources; what each runs
    (ZeRO stages, schedules, recompute, ``precisions``: the ``training.precision`` values it trains in besides FP8,
    ``cp_comms``: the ``parallel.cp_comm`` exchanges it runs with cp > 1,
    ``fp8_recipes``: the ``training.fp8_recipe`` values it runs, its default first, ``tp_overlap``)."""
    return list(STACKS.values())
