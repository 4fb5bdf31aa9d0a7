"""``/v1/calibrations``: store, list and read calibrations (``meshplan calibrate``'s output), and the
resolution of a request's ``calibration_id``.

A calibration's id is the content hash of the calibration without its ``id`` and ``created_at``, so
uploading it again (or as fetched) answers ``200`` with the stored one; stored calibrations are never
changed or deleted, which keeps a plan keyed by a request that names one the answer to that request.
A ``PlanRequest`` (``POST /v1/plans``, ``POST /v1/estimates``) may name a stored calibration with
``calibration_id`` instead of carrying it inline in ``calibration``; ``resolve_calibration`` inlines it
before the planner sees the request (as ``resolve_profile`` does for ``profile_id``).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query, Response
from starlette.concurrency import run_in_threadpool

from api.deps import StoreDep, v1_router
from api.problems import ProblemException, error_responses, not_found
from api.schemas import CalibrationSummary, Page, ProblemError
from api.store import Store
from planner.specs import Calibration, PlanRequest

router = v1_router("/calibrations", "calibrations")

CalibrationId = Annotated[str, Path(max_length=64, description="Calibration id: the content hash of the calibration.")]

#: An example body for the OpenAPI document (what `meshplan calibrate --out cal.json` writes).
CALIBRATION_EXAMPLES = {
    "cpu": {
        "summary": "Residuals fitted on CPU runs of the bundled runtime (one run shown)",
        "value": {
            "gpu": "cpu",
            "stack": "meshplan",
            "residuals": {"compute_scale": 1.3, "kernel_overhead_us": 40.0, "comm_scale": 2.0},
            "runs": [
                {
                    "label": "tiny-llama tp1 dp1 pp1 mbs2 on cpu (gloo)",
                    "measured_step_time_s": 0.21,
                    "predicted_before_s": 0.16,
                    "predicted_after_s": 0.2,
                }
            ],
            "in_sample_mape": 0.04,
            "cross_validated_mape": 0.07,
        },
    }
}


@router.post(
    "",
    response_model=Calibration,
    status_code=201,
    responses={
        200: {"model": Calibration, "description": "This calibration was stored before: the stored one."},
        **error_responses(400, 401, 413, 422),
    },
    openapi_extra={
        "requestBody": {"content": {"application/json": {"examples": CALIBRATION_EXAMPLES}}},
    },
)
async def create_calibration(body: Calibration, response: Response, store: StoreDep) -> Calibration:
    """Store a calibration (``meshplan calibrate --out cal.json``); answers it with its ``id``, which a
    ``PlanRequest`` names as ``calibration_id``. Its id is its content hash: uploading it again
    answers ``200`` with the stored one. A number JSON cannot hold (``1e999``) is a 422 naming it."""
    stored, created = await store.call(store.put_calibration, body)
    response.status_code = 201 if created else 200
    return stored


@router.get("", response_model=Page[CalibrationSummary], responses=error_responses(401, 422))
async def list_calibrations(
    store: StoreDep,
    gpu: Annotated[str | None, Query(max_length=64, description="Only calibrations of this GPU (or 'cpu').")] = None,
    stack: Annotated[str | None, Query(max_length=200, description="Only calibrations of this training stack.")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
) -> Page[CalibrationSummary]:
    """Stored calibrations, newest first: GPU, stack, how many runs, in-sample and cross-validated error."""
    return await run_in_threadpool(lambda: store.list_calibrations(gpu=gpu, stack=stack, limit=limit, offset=offset))


@router.get("/{calibration_id}", response_model=Calibration, responses=error_responses(401, 404, 422))
async def get_calibration(calibration_id: CalibrationId, store: StoreDep) -> Calibration:
    stored = await store.call(store.get_calibration, calibration_id)
    if stored is None:
        raise not_found("calibration", calibration_id)
    return stored


async def resolve_calibration(request: PlanRequest, store: Store) -> PlanRequest:
    """A request naming a stored calibration gets it inlined (the solver sees plain data). Both
    ``calibration`` and ``calibration_id``, or an id not stored: 422 naming ``calibration_id``."""
    if request.calibration_id is None:
        return request
    if request.calibration is not None:
        raise ProblemException(
            422,
            "calibration_id: give either calibration or calibration_id, not both",
            errors=[
                ProblemError(
                    field="calibration_id",
                    message="both calibration and calibration_id are set",
                    fix="drop one of them: calibration_id names a stored calibration, calibration carries one inline",
                ),
            ],
            title="Invalid request",
        )
    stored = await store.call(store.get_calibration, request.calibration_id)
    if stored is None:
        raise ProblemException(
            422,
            f"calibration_id: no stored calibration with id {request.calibration_id!r}",
            errors=[
                ProblemError(
                    field="calibration_id",
                    message=f"no stored calibration with id {request.calibration_id!r}",
                    fix="store it with POST /v1/calibrations and use the id it returns "
                    "(GET /v1/calibrations lists the stored ones), or give it inline as calibration",
                ),
            ],
            title="Invalid request",
        )
    return request.model_copy(update={"calibration": stored, "calibration_id": None})
