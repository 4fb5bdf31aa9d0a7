"""``GET /v1/plans/{id}/export/{format}``: a stored plan as a launcher's input (``api.exporters``).

Query parameters are the fields of ``api.exporters.ExportOptions`` (image, job_name, namespace,
partition, nodes, ...) plus ``index`` (which plan of the response; 0 = best)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query, Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from api.deps import StoreDep, v1_router
from api.problems import ProblemException, error_responses
from api.routes.plans import Index, PlanId, _get, _pick
from api.schemas import ExportFormat, ProblemError
from planner.errors import validation_errors

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
    return [ExportFormat.model_validate(entry) for entry in module.export_formats()] if module else []


def _media_types() -> dict[str, dict]:
    module = exporters()
    types = sorted({e.media_type for e in module.FORMATS.values()}) if module else ["text/plain"]
    return {t: {"schema": {"type": "string"}} for t in types}


@router.get(
    "/plans/{plan_id}/export/{fmt}",
    response_class=Response,
    responses={200: {"description": "The export's text, as an attachment (media type per format).", "content": _media_types()},
               **error_responses(401, 404, 422)},
)
async def export_plan(
    plan_id: PlanId,
    fmt: str,
    store: StoreDep,
    index: Index = 0,
    image: Annotated[str | None, Query(max_length=500, description="Container image.")] = None,
    job_name: Annotated[str | None, Query(max_length=63, description="Job name (DNS label).")] = None,
    namespace: Annotated[str | None, Query(max_length=63, description="Kubernetes namespace.")] = None,
    partition: Annotated[str | None, Query(max_length=128, description="Slurm partition.")] = None,
    nodes: Annotated[int | None, Query(ge=1, le=131_072, description="Node count (must agree with the plan).")] = None,
    gpus_per_node: Annotated[int | None, Query(ge=1, le=64)] = None,
    rdzv_endpoint: Annotated[str | None, Query(max_length=253, description="c10d rendezvous host[:port].")] = None,
    rdzv_port: Annotated[int | None, Query(ge=1, le=65535)] = None,
    max_restarts: Annotated[int | None, Query(ge=0, le=100)] = None,
    time_limit: Annotated[str | None, Query(max_length=32, description="Slurm --time.")] = None,
    runtime_ref: Annotated[str | None, Query(max_length=253, description="Kubeflow ClusterTrainingRuntime.")] = None,
    plan_path: Annotated[str | None, Query(max_length=500, description="Plan file path on the job's machines.")] = None,
    command: Annotated[str | None, Query(max_length=4000, description="Training program and arguments for torchrun.")] = None,
    strict: Annotated[bool | None, Query(description="Make every warning an error.")] = None,
) -> Response:
    """Export plan ``index`` of a stored plan for ``fmt`` (see GET /v1/catalog/export-formats)."""
    module = exporters()
    if module is None or fmt not in module.FORMATS:
        known = ", ".join(sorted(module.FORMATS)) if module else "none installed"
        raise ProblemException(404, f"unknown export format {fmt!r}; known: {known}", errors=[
            ProblemError(field="path.fmt", message=f"unknown export format {fmt!r}", fix=f"use one of: {known}"),
        ])
    given = {
        "image": image, "job_name": job_name, "namespace": namespace, "partition": partition, "nodes": nodes,
        "gpus_per_node": gpus_per_node, "rdzv_endpoint": rdzv_endpoint, "rdzv_port": rdzv_port,
        "max_restarts": max_restarts, "time_limit": time_limit, "runtime_ref": runtime_ref,
        "plan_path": plan_path, "command": command, "strict": strict,
    }
    try:
        options = module.ExportOptions(**{k: v for k, v in given.items() if v is not None})
    except ValidationError as exc:
        errors = [ProblemError(**e) for e in validation_errors(exc, prefix="query")]
        raise ProblemException(422, "; ".join(f"{e.field}: {e.message}" for e in errors), errors=errors,
                               title="Invalid request") from None
    plan = _pick(await _get(store, plan_id), index)
    result = await run_in_threadpool(module.export, plan, fmt, options)
    headers = {"Content-Disposition": f'attachment; filename="{result.filename}"'}
    if result.warnings:
        headers["X-Meshplan-Warnings"] = str(len(result.warnings))
    return Response(result.content, media_type=result.media_type, headers=headers)
