"""A small typed client of the meshplan service, for job schedulers and scripts.

    from api.client import MeshplanClient

    with MeshplanClient("http://127.0.0.1:8000", token=os.environ.get("MESHPLAN_API_TOKEN")) as mc:
        stored = mc.plan({"model": "llama3-70b", "cluster": {...}, "training": {...}})
        best = stored.response.plans[0]
        script = mc.export(stored.id, "slurm", partition="gpu")

Every error answer raises ``MeshplanAPIError`` carrying the problem document (status, detail and the
failing fields).
"""

from __future__ import annotations

from typing import Any

import httpx
from pydantic import BaseModel, TypeAdapter

from api.schemas import (
    CATALOG_MODEL_COUNTS,
    CalibrationSummary,
    ExportFormat,
    Page,
    PlanSummary,
    Problem,
    ProfileSummary,
    RunSummary,
    StoredPlan,
    StoredProfile,
    StoredRun,
)
from planner.answer.compare import PlanComparison
from planner.specs import Calibration, GpuSpec, ModelSpec, Plan, PlanRequest, Profile, RunReport
from planner.specs.catalog import ClusterPreset
from planner.specs.config import ScheduleInfo
from planner.specs.stacks import Stack


class MeshplanAPIError(Exception):
    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        self.status = problem.status
        fields = "; ".join(f"{e.field}: {e.message}" for e in problem.errors)
        super().__init__(
            f"{problem.status} {problem.title}: {problem.detail or ''}" + (f" [{fields}]" if fields else "")
        )


def _body(value: BaseModel | dict) -> dict:
    return value.model_dump(mode="json", exclude_none=True) if isinstance(value, BaseModel) else value


class MeshplanClient:
    """``base_url`` of the service; ``token`` when it sets MESHPLAN_API_TOKEN. Pass ``http`` to use
    a ready ``httpx.Client`` (e.g. a FastAPI ``TestClient``) instead of opening one."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000",
        *,
        token: str | None = None,
        timeout: float = 120.0,
        http: httpx.Client | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        if http is None:
            self._http = httpx.Client(base_url=base_url, headers=headers, timeout=timeout)
            self._owned = True
        else:
            http.headers.update(headers)
            self._http = http
            self._owned = False

    def close(self) -> None:
        if self._owned:
            self._http.close()

    def __enter__(self) -> MeshplanClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        response = self._http.request(method, path, **kwargs)
        if response.status_code >= 400:
            try:
                problem = Problem.model_validate(response.json())
            except ValueError:
                problem = Problem(
                    title=response.reason_phrase or "Error", status=response.status_code, detail=response.text[:500]
                )
            raise MeshplanAPIError(problem)
        return response

    # ---- plans ---------------------------------------------------------------------------

    def plan(self, request: PlanRequest | dict) -> StoredPlan:
        """Solve (or fetch the stored answer to) a plan request."""
        return StoredPlan.model_validate_json(self._send("POST", "/v1/plans", json=_body(request)).content)

    def get_plan(self, plan_id: str) -> StoredPlan:
        return StoredPlan.model_validate_json(self._send("GET", f"/v1/plans/{plan_id}").content)

    def list_plans(
        self, *, model: str | None = None, gpu: str | None = None, limit: int = 50, offset: int = 0
    ) -> Page[PlanSummary]:
        params = {
            k: v for k, v in {"model": model, "gpu": gpu, "limit": limit, "offset": offset}.items() if v is not None
        }
        return Page[PlanSummary].model_validate_json(self._send("GET", "/v1/plans", params=params).content)

    def delete_plan(self, plan_id: str) -> None:
        self._send("DELETE", f"/v1/plans/{plan_id}")

    def trace(self, plan_id: str, index: int = 0) -> dict:
        return self._send("GET", f"/v1/plans/{plan_id}/trace", params={"index": index}).json()

    def compare(self, plan_id: str, other_id: str, *, index: int = 0, other_index: int = 0) -> PlanComparison:
        """Plan ``index`` of ``plan_id`` beside plan ``other_index`` of ``other_id`` (settings, time by cause, memory)."""
        return PlanComparison.model_validate_json(
            self._send(
                "GET", f"/v1/plans/{plan_id}/compare/{other_id}", params={"index": index, "other_index": other_index}
            ).content
        )

    def export(self, plan_id: str, fmt: str, *, index: int = 0, **options: str | int) -> str:
        """The export's text (e.g. ``fmt="slurm"``, ``partition="gpu"``, ``nodes=8``)."""
        return self._send("GET", f"/v1/plans/{plan_id}/export/{fmt}", params={"index": index, **options}).text

    def estimate(self, request: PlanRequest | dict) -> Plan:
        return Plan.model_validate_json(self._send("POST", "/v1/estimates", json=_body(request)).content)

    # ---- profiles and runs ---------------------------------------------------------------

    def upload_profile(self, profile: Profile | dict) -> StoredProfile:
        return StoredProfile.model_validate_json(self._send("POST", "/v1/profiles", json=_body(profile)).content)

    def get_profile(self, profile_id: str) -> StoredProfile:
        return StoredProfile.model_validate_json(self._send("GET", f"/v1/profiles/{profile_id}").content)

    def list_profiles(self, *, model: str | None = None, limit: int = 50, offset: int = 0) -> Page[ProfileSummary]:
        params = {k: v for k, v in {"model": model, "limit": limit, "offset": offset}.items() if v is not None}
        return Page[ProfileSummary].model_validate_json(self._send("GET", "/v1/profiles", params=params).content)

    def upload_run(self, report: RunReport | dict) -> StoredRun:
        return StoredRun.model_validate_json(self._send("POST", "/v1/runs", json=_body(report)).content)

    def get_run(self, run_id: str) -> StoredRun:
        return StoredRun.model_validate_json(self._send("GET", f"/v1/runs/{run_id}").content)

    def list_runs(self, *, limit: int = 50, offset: int = 0) -> Page[RunSummary]:
        return Page[RunSummary].model_validate_json(
            self._send("GET", "/v1/runs", params={"limit": limit, "offset": offset}).content
        )

    # ---- calibrations --------------------------------------------------------------------

    def upload_calibration(self, calibration: Calibration | dict) -> Calibration:
        """Store a calibration (``meshplan calibrate --out cal.json``); the answer carries its ``id``
        (name it as a request's ``calibration_id``). Uploading it again returns the stored one."""
        return Calibration.model_validate_json(self._send("POST", "/v1/calibrations", json=_body(calibration)).content)

    def get_calibration(self, calibration_id: str) -> Calibration:
        return Calibration.model_validate_json(self._send("GET", f"/v1/calibrations/{calibration_id}").content)

    def list_calibrations(
        self, *, gpu: str | None = None, stack: str | None = None, limit: int = 50, offset: int = 0
    ) -> Page[CalibrationSummary]:
        params = {
            k: v for k, v in {"gpu": gpu, "stack": stack, "limit": limit, "offset": offset}.items() if v is not None
        }
        return Page[CalibrationSummary].model_validate_json(
            self._send("GET", "/v1/calibrations", params=params).content
        )

    # ---- catalog -------------------------------------------------------------------------

    def models(self) -> list[ModelSpec]:
        """The catalog models as ModelSpecs (the parameter counts the route adds are dropped)."""
        return [
            ModelSpec.model_validate({k: v for k, v in m.items() if k not in CATALOG_MODEL_COUNTS})
            for m in self._send("GET", "/v1/catalog/models").json()
        ]

    def gpus(self) -> list[GpuSpec]:
        return [GpuSpec.model_validate(g) for g in self._send("GET", "/v1/catalog/gpus").json()]

    def schedules(self) -> list[ScheduleInfo]:
        """Pipeline schedules: which the planner prices (``priced``) and which the runtime runs (``runnable``)."""
        return TypeAdapter(list[ScheduleInfo]).validate_json(self._send("GET", "/v1/catalog/schedules").content)

    def clusters(self) -> list[ClusterPreset]:
        return [ClusterPreset.model_validate(c) for c in self._send("GET", "/v1/catalog/clusters").json()]

    def stacks(self) -> list[Stack]:
        return [Stack.model_validate(x) for x in self._send("GET", "/v1/catalog/stacks").json()]

    def export_formats(self) -> list[ExportFormat]:
        return [ExportFormat.model_validate(f) for f in self._send("GET", "/v1/catalog/export-formats").json()]

    def healthy(self) -> bool:
        try:
            return self._http.get("/readyz").status_code == 200
        except httpx.HTTPError:
            return False
