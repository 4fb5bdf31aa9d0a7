"""RFC 9457 problem details for every error the service returns.

Validation errors carry the failing field paths (``cluster.num_nodes``, ``query.limit``); a
``MeshplanError`` from the planner carries its field and fix; anything unexpected becomes a plain
500 problem with no trace in the body (the trace goes to the log only).
"""

from __future__ import annotations

import logging
from http import HTTPStatus

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from api.schemas import Problem, ProblemError
from planner.specs.errors import (
    MeshplanError,
    explain_error,
    field_info,
    is_union_tag,
    located,
    merge_union_errors,
    validation_errors,
    with_known_fields,
)

PROBLEM_JSON = "application/problem+json"
log = logging.getLogger("meshplan.api")


class ProblemException(Exception):
    """Raise from a route to answer with a problem document."""

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        errors: list[ProblemError] | None = None,
        headers: dict[str, str] | None = None,
        title: str | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.errors = errors or []
        self.headers = headers or {}
        self.title = title


def problem_response(
    status: int,
    detail: str | None = None,
    *,
    errors: list[ProblemError] | None = None,
    headers: dict[str, str] | None = None,
    title: str | None = None,
    instance: str | None = None,
) -> JSONResponse:
    body = Problem(
        title=title or _title(status),
        status=status,
        detail=detail,
        instance=instance,
        errors=errors or [],
    )
    return JSONResponse(
        body.model_dump(exclude_none=True), status_code=status, headers=headers, media_type=PROBLEM_JSON
    )


def _title(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def not_found(kind: str, key: str) -> ProblemException:
    return ProblemException(404, f"no {kind} with id {key!r}; list them with GET /v1/{kind}s")


def _field_of(loc: tuple) -> str:
    # FastAPI puts the source first ('body', 'query', 'path', 'header'); a body field is named as in
    # the JSON document (cluster.num_nodes), other sources keep their prefix (query.limit).
    parts = [str(p) for p in loc if not is_union_tag(p)]
    if parts and parts[0] == "body":
        parts = parts[1:]
    return ".".join(parts) or "body"


def _declared(request: Request, loc: tuple):
    """The pydantic FieldInfo the route declares at ``loc`` (body model fields, query parameters or a
    query model's fields): its bounds and description make the fix. None where not found."""
    route = request.scope.get("route")
    loc = tuple(p for p in loc if not is_union_tag(p))
    if route is None or not loc:
        return None
    if loc[0] == "body":
        body = getattr(route, "body_field", None)
        return field_info(body.field_info.annotation, list(loc[1:])) if body is not None and len(loc) > 1 else None
    dependant = getattr(route, "dependant", None)
    kind = {"query": "query_params", "path": "path_params", "header": "header_params"}.get(str(loc[0]))
    for param in (getattr(dependant, kind, None) or []) if kind else []:
        annotation = param.field_info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):  # a query model
            found = field_info(annotation, list(loc[1:]))
            if found is not None:
                return found
        elif len(loc) > 1 and param.alias == loc[1]:
            return param.field_info
    return None


def problem_errors(request: Request, errors: list[dict]) -> list[ProblemError]:
    """Pydantic/FastAPI error entries as problem errors, each with the field path and a fix."""
    out = []
    body = getattr(request.scope.get("route"), "body_field", None)
    for e in merge_union_errors(errors):
        loc = located(e)
        if e.get("type") == "extra_forbidden" and body is not None and loc[:1] == ("body",):
            e = with_known_fields(e, body.field_info.annotation, [p for p in loc[1:] if not is_union_tag(p)])
        field = _field_of(loc)
        message, fix = explain_error(e, field, _declared(request, loc))
        out.append(ProblemError(field=field, message=message, fix=fix))
    return out


async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = problem_errors(request, list(exc.errors()))
    detail = "; ".join(f"{e.field}: {e.message}" for e in errors[:5]) or "invalid request"
    return problem_response(422, detail, errors=errors, title="Invalid request", instance=request.url.path)


async def _meshplan(request: Request, exc: MeshplanError) -> JSONResponse:
    err = ProblemError(field=exc.field, message=exc.message, fix=exc.fix or None)
    return problem_response(422, str(exc), errors=[err], title="Invalid request", instance=request.url.path)


async def _pydantic(request: Request, exc: ValidationError) -> JSONResponse:
    errors = [ProblemError(**e) for e in validation_errors(exc)]  # raised by planner code: no route schema applies
    detail = "; ".join(f"{e.field}: {e.message}" for e in errors[:5])
    return problem_response(422, detail, errors=errors, title="Invalid request", instance=request.url.path)


async def _problem(request: Request, exc: ProblemException) -> JSONResponse:
    return problem_response(
        exc.status, exc.detail, errors=exc.errors, headers=exc.headers, title=exc.title, instance=request.url.path
    )


async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    detail = exc.detail if isinstance(exc.detail, str) else None
    errors = []
    if exc.status_code == 400:  # FastAPI could not read the body (e.g. not UTF-8)
        errors = [ProblemError(field="body", message=detail or "unreadable body", fix="send a UTF-8 JSON document")]
    return problem_response(
        exc.status_code, detail, errors=errors, headers=getattr(exc, "headers", None), instance=request.url.path
    )


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return problem_response(500, "internal error; the server log has the details", instance=request.url.path)


def install(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(MeshplanError, _meshplan)
    app.add_exception_handler(ValidationError, _pydantic)
    app.add_exception_handler(ProblemException, _problem)
    app.add_exception_handler(StarletteHTTPException, _http)
    app.add_exception_handler(Exception, _unexpected)


#: Documented error answers (OpenAPI), so clients and the schema fuzz know every status a route gives.
def error_responses(*statuses: int) -> dict[int | str, dict]:
    return {
        s: {
            "model": Problem,
            "description": _title(s),
            "content": {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
        for s in statuses
    }
