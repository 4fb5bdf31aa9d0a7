"""``/v1/catalog``: the built-in models, GPUs, cluster presets, pipeline schedules, training stacks and export formats."""

from __future__ import annotations

from api.deps import v1_router
from api.routes.exports import export_formats
from api.schemas import ExportFormat
from planner.specs import GpuSpec, ModelSpec
from planner.specs.catalog import CLUSTER_PRESETS, GPUS, MODELS, ClusterPreset
from planner.specs.config import SCHEDULES, ScheduleInfo
from planner.specs.stacks import STACKS, Stack

router = v1_router("/catalog", "catalog")


@router.get("/models", response_model=list[ModelSpec])
async def list_models() -> list[ModelSpec]:
    return list(MODELS.values())


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
    attention kernel, dropout, activation formula, DP gradient overlap, and their sources."""
    return list(STACKS.values())
