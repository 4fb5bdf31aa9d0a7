"""``GET /v1/plans/{id}/export/{format}``: a stored plan as a launcher's input (``api.exporters``).

The query parameters are one model, ``ExportQuery``: the fields of ``api.exporters.ExportOptions``
(image, job_name, namespace, partition, nodes, ...) plus ``index`` (which plan of the response; 0 =
best). FastAPI reads, validates and documents them from it (OpenAPI lists each field with its bounds,
default and description), so a new export option is a new query parameter with nothing else to edit.

Headers besides the file: ``X-Meshplan-Warnings`` (how many warnings the file carries in its box),
``X-Meshplan-Plan-Stack`` (the training stack the plan was priced for), ``X-Meshplan-Target-Stack`` (the
one the export runs; absent when it runs the user's ``command``) and, when they differ,
``X-Meshplan-Stack-Warning`` (the warning, also the first one in the file)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query, Response
from pydantic import ConfigDict
from starlette.concurrency import run_in_threadpool

import api.exporters as exporters
from api.deps import StoreDep, v1_router
from api.exporters import ExportOptions, plan_stack, stack_warning
from api.problems import ProblemException, error_responses
from api.routes.plans import Index, PlanId, _get, _pick
from api.schemas import ExportFormat, ProblemError

router = v1_router("", "exports")


class ExportQuery(ExportOptions):
    """The query parameters of an export: the job options, and which plan of the stored response."""

    model_config = ConfigDict(extra="ignore")  # other query parameters are ignored, as for every route

    index: Index = 0

    def options(self) -> ExportOptions:
        """The job options the user gave (the rest keep ExportOptions' defaults)."""
        return ExportOptions.model_validate(
            self.model_dump(include=set(ExportOptions.model_fields) & self.model_fields_set)
        )


#: Headers of an export's answer (besides Content-Disposition).
EXPORT_HEADERS = {
    "X-Meshplan-Warnings": {
        "description": "How many warnings the file carries (written into it in a box).",
        "schema": {"type": "string"},
    },
    "X-Meshplan-Plan-Stack": {
        "description": "The training stack the plan was priced for (training.stack; an inline stack's base).",
        "schema": {"type": "string"},
    },
    "X-Meshplan-Target-Stack": {
        "description": "The training stack the export runs; absent when it runs the user's own command.",
        "schema": {"type": "string"},
    },
    "X-Meshplan-Stack-Warning": {
        "description": "Set when the two differ: the plan's figures assume another stack; how to re-plan.",
        "schema": {"type": "string"},
    },
}


def export_formats() -> list[ExportFormat]:
    return [ExportFormat.model_validate(entry) for entry in exporters.export_formats()]


def _media_types() -> dict[str, dict]:
    return {t: {"schema": {"type": "string"}} for t in sorted({e.media_type for e in exporters.FORMATS.values()})}


@router.get(
    "/plans/{plan_id}/export/{fmt}",
    response_class=Response,
    responses={
        200: {
            "description": "The export's text, as an attachment (media type per format).",
            "content": _media_types(),
            "headers": EXPORT_HEADERS,
        },
        **error_responses(401, 404, 422),
    },
)
async def export_plan(plan_id: PlanId, fmt: str, store: StoreDep, query: Annotated[ExportQuery, Query()]) -> Response:
    """Export plan ``index`` of a stored plan for ``fmt`` (see GET /v1/catalog/export-formats)."""
    if fmt not in exporters.FORMATS:
        known = ", ".join(sorted(exporters.FORMATS))
        raise ProblemException(
            404,
            f"unknown export format {fmt!r}; known: {known}",
            errors=[
                ProblemError(field="path.fmt", message=f"unknown export format {fmt!r}", fix=f"use one of: {known}"),
            ],
        )
    plan = _pick(await _get(store, plan_id), query.index)
    options = query.options()
    result = await run_in_threadpool(exporters.export, plan, fmt, options)
    headers = {
        "Content-Disposition": f'attachment; filename="{result.filename}"',
        "X-Meshplan-Plan-Stack": plan_stack(plan),
    }
    runs = exporters.FORMATS[fmt].runs_stack(options)
    if runs is not None:
        headers["X-Meshplan-Target-Stack"] = runs
    mismatch = stack_warning(plan, exporters.FORMATS[fmt], options)
    if mismatch is not None:
        headers["X-Meshplan-Stack-Warning"] = mismatch
    if result.warnings:
        headers["X-Meshplan-Warnings"] = str(len(result.warnings))
    return Response(result.content, media_type=result.media_type, headers=headers)
