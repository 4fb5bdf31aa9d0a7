"""``GET /v1/plans/{id}/export/{format}``: a stored plan as a launcher's input (``api.exporters``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query, Response
from starlette.concurrency import run_in_threadpool

from api.deps import StoreDep, v1_router
from api.problems import ProblemException, error_responses
from api.routes.plans import Index, PlanId, _get, _pick
from api.schemas import ExportFormat

router = v1_router("", "exports")


def exporters():
    """``api.exporters`` (None while that part is not installed)."""
    try:
        import api.exporters as module
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("api.exporters"):
            return None
        raise
    return module


def export_formats() -> list[ExportFormat]:
    module = exporters()
    if module is None:
        return []
    return [
        ExportFormat(
            id=fmt_id,
            media_type=getattr(exporter, "media_type", "text/plain"),
            target=getattr(exporter, "target", fmt_id),
            target_version=str(getattr(exporter, "target_version", "")),
        )
        for fmt_id, exporter in module.FORMATS.items()
    ]


@router.get(
    "/plans/{plan_id}/export/{fmt}",
    response_class=Response,
    responses={200: {"description": "The export's text, as an attachment.", "content": {"text/plain": {}}},
               **error_responses(401, 404, 422)},
)
async def export_plan(
    plan_id: PlanId,
    fmt: str,
    store: StoreDep,
    index: Index = 0,
    image: Annotated[str | None, Query(max_length=512, description="Container image.")] = None,
    job_name: Annotated[str | None, Query(max_length=128)] = None,
    namespace: Annotated[str | None, Query(max_length=128, description="Kubernetes namespace.")] = None,
    partition: Annotated[str | None, Query(max_length=128, description="Slurm partition.")] = None,
    nodes: Annotated[int | None, Query(ge=1, le=100_000, description="Node count (defaults to the plan's).")] = None,
) -> Response:
    """Export plan ``index`` of a stored plan for ``fmt`` (see GET /v1/catalog/export-formats)."""
    module = exporters()
    if module is None or fmt not in module.FORMATS:
        known = ", ".join(sorted(module.FORMATS)) if module else "none installed"
        raise ProblemException(404, f"unknown export format {fmt!r}; known: {known}", errors=[
            {"field": "path.fmt", "message": f"unknown export format {fmt!r}", "fix": f"use one of: {known}"},
        ])
    plan = _pick(await _get(store, plan_id), index)
    given = {"image": image, "job_name": job_name, "namespace": namespace, "partition": partition, "nodes": nodes}
    options = module.ExportOptions(**{k: v for k, v in given.items() if v is not None})
    result = await run_in_threadpool(module.export, plan, fmt, options)
    headers = {"Content-Disposition": f'attachment; filename="{result.filename}"'}
    if result.warnings:
        headers["X-Meshplan-Warnings"] = str(len(result.warnings))
    return Response(result.content, media_type=result.media_type, headers=headers)
