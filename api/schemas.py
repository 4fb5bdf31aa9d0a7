"""The service's own bodies (docs/architecture.md, "REST contract"): stored records, list pages and
the problem document. Planner data inside them keeps the ``planner.specs`` field names."""

from __future__ import annotations

from typing import Generic, TypeVar

from pydantic import BaseModel, Field

from planner.specs import ModelSpec, PlanRequest, PlanResponse, Profile, RunReport

T = TypeVar("T")


class ProblemError(BaseModel):
    field: str = Field(description="Dotted path of the failing field, e.g. 'cluster.num_nodes'.")
    message: str
    fix: str | None = None


class Problem(BaseModel):
    """RFC 9457 problem details (``application/problem+json``)."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str | None = None
    instance: str | None = None
    errors: list[ProblemError] = Field(default_factory=list)


class Page(BaseModel, Generic[T]):
    items: list[T]
    total: int
    limit: int
    offset: int


class StoredPlan(BaseModel):
    id: str = Field(description="Content hash of the canonical plan request and the cost-model version.")
    created_at: str
    cached: bool = Field(description="True when answered from the store without solving.")
    cost_model_version: int = Field(
        description="The planner cost model that answered; 0 = unknown (stored before versioning)."
    )
    stale: bool = Field(
        description="Answered by another cost model than the server's current one: POST the request "
        "again for a current answer."
    )
    request: PlanRequest
    response: PlanResponse


class PlanSummary(BaseModel):
    """One stored plan in a list; figures are the best plan's, null when infeasible."""

    id: str
    created_at: str
    model: str
    gpu: str
    num_gpus: int
    status: str
    step_time_s: float | None = None
    tokens_per_s: float | None = None
    mfu: float | None = None
    fits: bool | None = None
    cost_model_version: int = 0
    stale: bool = False


class StoredProfile(BaseModel):
    id: str
    created_at: str
    profile: Profile


class ProfileSummary(BaseModel):
    id: str
    created_at: str
    model: str
    device: str
    source: str


class StoredRun(BaseModel):
    id: str
    created_at: str
    report: RunReport


class RunSummary(BaseModel):
    id: str
    created_at: str
    model: str
    world_size: int
    measured_step_time_s: float
    predicted_step_time_s: float | None = None
    step_time_ratio: float | None = None


class CalibrationSummary(BaseModel):
    """One stored calibration in a list (``GET /v1/calibrations``)."""

    id: str
    created_at: str = Field(description="When the service stored it.")
    gpu: str = Field(description="The GPU (catalog id, or 'cpu') the runs measured.")
    stack: str = Field(description="The training stack the runs used.")
    runs: int = Field(description="How many measured runs it was fitted on.")
    in_sample_mape: float | None = Field(default=None, description="Mean |predicted/measured − 1| on those runs.")
    cross_validated_mape: float | None = Field(
        default=None, description="The same, each run predicted by a fit that left it out."
    )


class CatalogModel(ModelSpec):
    """A catalog model as ``GET /v1/catalog/models`` lists it: the ``ModelSpec`` (a request names it by ``name``)
    plus its parameter counts (``planner.workload.analytic``), which are not ModelSpec fields — drop
    ``CATALOG_MODEL_COUNTS`` before validating one as a ModelSpec."""

    total_parameters: int = Field(description="Parameters of the model (tied embedding/head weights once).")
    active_parameters: int = Field(
        description="Parameters one token uses: a mixture of experts counts its top-k routed experts (and shared "
        "ones); a dense model's equal total_parameters."
    )
    moe_layers: int = Field(description="Layers with MoE MLPs (0 for a dense model).")


#: The fields ``CatalogModel`` adds to a ``ModelSpec``.
CATALOG_MODEL_COUNTS = ("total_parameters", "active_parameters", "moe_layers")


class ExportFormat(BaseModel):
    id: str
    media_type: str
    target: str
    target_version: str
    stack: str = Field(
        default="meshplan",
        description="The training stack (GET /v1/catalog/stacks) the target runs: a plan priced for another "
        "exports with a warning. Launchers run meshplan's runtime unless a command names another program.",
    )


class Health(BaseModel):
    status: str
    detail: str | None = None


#: Example bodies for the OpenAPI document (/docs "Try it out", and the schema fuzz's first cases).
PLAN_REQUEST_EXAMPLES = {
    "llama3-70b on 64 H100": {
        "summary": "Llama 3 70B on 8 nodes of 8 H100",
        "value": {
            "model": "llama3-70b",
            "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 8, "gpus_per_node": 8},
            "training": {"global_batch_size": 512, "seq_len": 4096},
        },
    },
    "tiny": {
        "summary": "An 8-layer GPT on one node (solves in about a second)",
        "value": {
            "model": "tiny-gpt",
            "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "gpus_per_node": 8},
            "training": {"global_batch_size": 32, "seq_len": 128},
            "top_k": 2,
            "options": {"time_limit_s": 5.0, "num_workers": 1},
        },
    },
}

ESTIMATE_EXAMPLES = {
    "pinned": {
        "summary": "Estimate one configuration: tp 2, pp 2, dp 2",
        "value": {
            "model": "tiny-gpt",
            "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "gpus_per_node": 8},
            "training": {"global_batch_size": 32, "seq_len": 128},
            "parallel": {"tp": 2, "pp": 2, "dp": 2, "micro_batch_size": 1},
        },
    },
}
