"""What the planner and the runtime answer: estimates, plans, solver info, run reports."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, ValidationError, model_serializer, model_validator

from planner.specs.calibration import Calibration
from planner.specs.common import SCHEMA_VERSION, Spec
from planner.specs.inputs import ClusterSpec, GpuSpec, ModelSpec, ParallelConfig, TrainingSpec
from planner.specs.profiles import NetworkProfile, Profile
from planner.specs.requests import PlanRequest
from planner.specs.solver_info import SolverInfo

# --------------------------------------------------------------------------------------------
# Results


class TimeBreakdown(Spec):
    """Seconds per step on the critical path, by cause. They add up to ``step_time_s``."""

    compute_s: float
    tp_comm_s: float
    pp_bubble_s: float
    pp_p2p_s: float
    dp_sync_s: float = Field(
        description="Exposed data-parallel communication: the gradient sync beyond its overlap with the last "
        "backward, ZeRO-1/2's parameter all-gather, and ZeRO-3's per-layer parameter gathers and "
        "gradient reduce-scatters beyond the layer's compute (compute under them is not slowed "
        "down in this model, so compute_s is the same as without ZeRO-3)."
    )
    optimizer_s: float
    cp_comm_s: float = Field(
        default=0.0,
        description="Exposed context-parallel communication: the ring's K/V steps beyond the attention blocks they "
        "run beside, and the all-gathers / all-to-alls the attention waits for (0 without context parallelism).",
    )
    ep_comm_s: float = Field(
        default=0.0,
        description="Expert-parallel token dispatch and combine (all-to-all over the EP group) on the busiest "
        "rank, blocking its compute stream (mixture-of-experts models; 0 otherwise).",
    )


class StageMemory(Spec):
    """GiB per GPU of one pipeline rank."""

    weights_gib: float
    gradients_gib: float
    optimizer_gib: float
    activations_gib: float
    buffers_gib: float
    reserve_gib: float
    total_gib: float
    expert_weights_gib: float = Field(
        default=0.0,
        description="Of weights_gib, the routed experts' (mixture-of-experts models: sharded over the expert-parallel "
        "ranks, and by ZeRO-3 over expert-data-parallel ones); 0 on dense models.",
    )
    expert_gradients_gib: float = Field(default=0.0, description="Of gradients_gib, the routed experts'.")
    expert_optimizer_gib: float = Field(
        default=0.0, description="Of optimizer_gib, the routed experts' (ZeRO-1/2 shard them over expert-DP)."
    )

    @model_serializer(mode="wrap")
    def _drop_dense_zeros(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A dense model's stage (no routed experts) is written as before the expert fields existed."""
        data = handler(self)
        if isinstance(data, dict) and not (
            self.expert_weights_gib or self.expert_gradients_gib or self.expert_optimizer_gib
        ):
            for name in ("expert_weights_gib", "expert_gradients_gib", "expert_optimizer_gib"):
                data.pop(name, None)
        return data


class Estimate(Spec):
    step_time_s: float
    tokens_per_s: float
    model_tflops_per_gpu: float
    mfu: float
    memory_per_stage: list[StageMemory] = Field(min_length=1, description="One entry per pipeline rank.")
    peak_memory_gib: float
    gpu_memory_gib: float
    fits: bool
    num_microbatches: int
    gpus_used: int
    breakdown: TimeBreakdown
    memory_headroom: float = Field(
        default=0.0,
        description="The fraction of GPU memory kept free that ``fits`` was judged with "
        "(options.memory_headroom; 0 in plans written before it existed).",
    )
    usable_memory_gib: float | None = Field(
        default=None,
        description="What a rank may peak at (GiB, reserve included) and "
        "still fit: (1 − memory_headroom) × gpu_memory_gib.",
    )
    notes: list[str] = Field(default_factory=list)


TPLayout = Literal["replicate", "shard_seq", "shard_last"]
TPStyle = Literal["colwise", "rowwise", "sequence_parallel", "prepare_input", "prepare_output", "replicate"]


class TPRule(Spec):
    """One entry of a tensor-parallel plan: modules whose qualified name matches ``pattern``
    (fnmatch, e.g. ``layers.*.attn.wq``) get ``style``. Layouts map to DTensor placements:
    replicate → Replicate(), shard_seq → Shard(1), shard_last → Shard(-1)."""

    pattern: str
    style: TPStyle
    input_layouts: list[TPLayout] | None = None
    output_layouts: list[TPLayout] | None = None
    desired_input_layouts: list[TPLayout] | None = None
    desired_output_layouts: list[TPLayout] | None = None


class MeshLayout(Spec):
    """The device mesh: ``dim_names``/``shape`` in row-major order (last dim innermost, i.e. ranks
    adjacent). The rank groups follow from the shape: ``planner.specs.layout.mesh_groups``."""

    dim_names: list[str] = Field(min_length=1, max_length=8)
    shape: list[int] = Field(min_length=1, max_length=8)

    @model_validator(mode="after")
    def _check_dims(self) -> MeshLayout:
        if len(self.dim_names) != len(self.shape) or any(n < 1 for n in self.shape):
            raise ValueError(f"mesh {self.dim_names}={self.shape}: give one size ≥ 1 per dimension name")
        return self


class CostInputs(Spec):
    """What priced a plan besides its model, cluster and training: the layer and network profiles the
    cost model read (null = the analytic defaults), the calibration whose residual constants it applied
    (null = none) and the cost model's version. With these,
    ``planner.estimate`` (``planner.answer.request.replay_request``), the trace and the dashboard reproduce the
    plan's numbers exactly, as long as ``cost_model_version`` is the planner's current one."""

    cost_model_version: int = Field(
        ge=0,
        description="planner.specs.version.COST_MODEL_VERSION that priced the plan; "
        "0 = unknown (a plan written before schema 2).",
    )
    profile: Profile | None = None
    network: NetworkProfile | None = None
    calibration: Calibration | None = None


class Alternative(Spec):
    """The plan with one setting changed, priced by the planner's own cost model (``planner.estimate_plan``
    of ``parallel`` gives these figures): the best value of that setting other than the plan's."""

    setting: Literal[
        "tp", "cp", "pp", "micro_batch_size", "schedule", "recompute", "sequence_parallel", "zero_stage", "ep", "etp"
    ]
    value: int | str | bool = Field(
        description="The setting's value in this alternative (schedule: its name, v shown in parallel)."
    )
    parallel: ParallelConfig = Field(
        description="The configuration estimated (dp follows tp·pp; SP off at tp 1; ZeRO 0 at dp 1)."
    )
    cut: Literal["plan", "even"] = Field(
        description="plan: the plan's stage cut kept; even: an even cut (pp or v changed), "
        "not re-optimised, so an upper bound of that configuration's best time."
    )
    step_time_s: float
    peak_memory_gib: float
    fits: bool
    delta_step_time_s: float = Field(description="step_time_s − the plan's.")
    delta_peak_memory_gib: float = Field(description="peak_memory_gib − the plan's.")
    summary: str = Field(description='e.g. "ZeRO-1 instead of 2: same time, +5.9 GiB".')


class RuledOut(Spec):
    """The nearest configuration faster than the plan that does not fit (fewest settings changed, then fastest)."""

    parallel: ParallelConfig
    settings_changed: list[str]
    step_time_s: float
    peak_memory_gib: float = Field(description="What it needs per GPU (GiB, reserve included).")
    usable_memory_gib: float = Field(description="What fits: (1 − memory_headroom) × the GPU's memory.")
    reason: str


class Explanation(Spec):
    binding_constraint: Literal["memory", "bubble", "communication", "compute"]
    summary: str
    runner_up: str | None = None
    details: list[str] = Field(default_factory=list)
    alternatives: list[Alternative] = Field(
        default_factory=list,
        description="Plan 1 only: per setting a reader may question, the best configuration differing in it alone.",
    )
    ruled_out: RuledOut | None = Field(
        default=None, description="Set when binding_constraint is memory: the configuration cited."
    )


def _check_schema_version(data: object, what: str) -> None:
    version = data.get("schema_version", 1) if isinstance(data, dict) else None
    if isinstance(version, int) and version > SCHEMA_VERSION:
        raise ValueError(
            f"this {what} has schema_version {version}, newer than this meshplan reads ({SCHEMA_VERSION}); "
            "upgrade meshplan (pip install -U meshplan)"
        )


def _check_schema1_groups(mesh: dict) -> None:
    """A schema-1 mesh listed its rank groups; they must be the ones its shape implies (they are
    derived now), or the plan would silently run on another layout."""
    from planner.specs.layout import mesh_groups  # the layout imports this module

    try:
        layout = MeshLayout.model_validate({"dim_names": mesh.get("dim_names"), "shape": mesh.get("shape")})
    except ValidationError:
        return  # the mesh itself is invalid: Plan validation reports it
    for dim in layout.dim_names:
        listed = mesh.get(f"{dim}_groups")
        if listed is not None and listed != mesh_groups(layout, dim):
            raise ValueError(
                f"mesh.{dim}_groups of this schema-1 plan are not the row-major layout of mesh.shape "
                f"{layout.shape} (the runtime builds that one); re-plan with `meshplan plan` or fix the groups"
            )


def upgrade_plan_data(data: object) -> object:
    """A schema-1 Plan document (rank groups in ``mesh``, ``gpu`` beside ``cluster``, the memory per
    stage twice, no cost inputs) as a schema-2 one: the groups and the duplicates are dropped, the
    full GpuSpec moves into ``cluster.gpu``, and the cost-model version is 0 (unknown). Anything
    else passes through untouched."""
    _check_schema_version(data, "plan")
    if not isinstance(data, dict) or data.get("schema_version", 1) != 1 or "inputs" in data:
        return data
    data = dict(data)
    data["schema_version"] = SCHEMA_VERSION
    mesh = data.get("mesh")
    if isinstance(mesh, dict):
        data["mesh"] = {k: v for k, v in mesh.items() if not k.endswith("_groups")}
        _check_schema1_groups(mesh)
    gpu = data.pop("gpu", None)
    if isinstance(data.get("cluster"), dict) and gpu is not None:
        data["cluster"] = {**data["cluster"], "gpu": gpu}
    estimate = data.get("estimate")
    if isinstance(estimate, dict) and estimate.get("memory_per_stage"):
        data["estimate"] = {k: v for k, v in estimate.items() if k != "memory_per_stage_gib"}
    elif isinstance(estimate, dict):
        raise ValueError(
            "this schema-1 plan has no detailed memory per stage (estimate.memory_per_stage); "
            "re-plan it with `meshplan plan` (or `meshplan estimate` with its parallel settings)"
        )
    data["inputs"] = {"cost_model_version": 0}
    return data


class Plan(Spec):
    """A complete, executable plan: pure data, self-contained (the runtime, exporters and API need
    nothing else, and ``inputs`` lets the planner re-derive its estimate). ``cluster.gpu`` is always
    the full GpuSpec (a catalog id is resolved when the plan is made or read)."""

    schema_version: int = SCHEMA_VERSION
    rank: int = Field(default=1, ge=1, description="1 = best.")
    model: ModelSpec
    cluster: ClusterSpec
    training: TrainingSpec
    parallel: ParallelConfig
    mesh: MeshLayout
    tp_plan: list[TPRule]
    estimate: Estimate
    inputs: CostInputs
    explanation: Explanation | None = None

    @model_validator(mode="before")
    @classmethod
    def _upgrade(cls, data: object) -> object:
        return upgrade_plan_data(data)

    @model_validator(mode="after")
    def _resolve_gpu(self) -> Plan:
        if isinstance(self.cluster.gpu, str):
            from planner.specs.catalog import get_gpu  # the catalog imports this module

            self.cluster = self.cluster.model_copy(update={"gpu": get_gpu(self.cluster.gpu)})
        return self

    @property
    def gpu(self) -> GpuSpec:
        """The plan's GPU (``cluster.gpu``, always a full spec in a Plan)."""
        assert isinstance(self.cluster.gpu, GpuSpec)
        return self.cluster.gpu


class Infeasibility(Spec):
    """Why no plan exists, and the smallest change that would make one."""

    reason: str
    field: str
    suggestion: str
    min_memory_per_gpu_gib: float | None = None


class PlanResponse(Spec):
    schema_version: int = SCHEMA_VERSION
    cost_model_version: int = Field(
        ge=0,
        description="planner.specs.version.COST_MODEL_VERSION that answered (plans or "
        "infeasibility); 0 = unknown (written before schema 2).",
    )
    model: ModelSpec
    cluster: ClusterSpec
    training: TrainingSpec
    plans: list[Plan]
    solver: SolverInfo
    infeasible: Infeasibility | None = None

    @model_validator(mode="before")
    @classmethod
    def _upgrade(cls, data: object) -> object:
        _check_schema_version(data, "plan response")
        if isinstance(data, dict) and data.get("schema_version", 1) == 1 and "cost_model_version" not in data:
            data = {**data, "schema_version": SCHEMA_VERSION, "cost_model_version": 0}
        return data


PositiveInt = Annotated[int, Field(ge=1)]


class Prediction(Spec):
    """A prediction of a run's step time and peak memory for named hardware, and what priced it."""

    predicted_on: str = Field(description="The hardware the prediction is for, e.g. 'h100-sxm5-80gb' or 'cpu'.")
    basis: str = Field(default="", description="What priced it (profiles, network fit, datasheet figures).")
    step_time_s: float | None = None
    peak_memory_gib: float | None = None
    step_time_ratio: float | None = Field(default=None, description="predicted ÷ measured (same hardware only).")
    memory_ratio: float | None = Field(default=None, description="predicted ÷ measured (same hardware only).")
    request: PlanRequest | None = Field(
        default=None,
        description="The request that priced it (``planner.estimate_plan`` of it gives step_time_s): the plan's "
        "configuration on this hardware's profiles, network fit and processor figures. `meshplan calibrate` "
        "re-prices it; null in reports written before it was recorded.",
    )


class RunReport(Spec):
    """What a run of a plan measured, beside what the plan predicted (written by ``meshplan run``,
    stored by the service, shown by the dashboard). Ratios are predicted ÷ measured, and only ever
    between a prediction and a measurement on the same hardware: ``predicted_*`` is the plan's own
    prediction for ``predicted_on`` (its GPU); ``step_time_ratio``/``memory_ratio`` are set only when
    the run ran on that hardware. ``local_prediction`` re-prices the plan for the hardware the run
    actually used (e.g. a CPU layer profile and a gloo network fit) and carries its own ratios."""

    schema_version: int = SCHEMA_VERSION
    model: str
    parallel: ParallelConfig
    world_size: int = Field(ge=1)
    device: str
    torch_version: str
    steps: int = Field(ge=0)
    global_batch_size: int = Field(ge=1)
    seq_len: int = Field(ge=1)
    losses: list[float]
    step_times_s: list[float]
    measured_step_time_s: float = Field(ge=0, description="Median step time after the first (warm-up) step.")
    tokens_per_s: float = Field(ge=0)
    peak_memory_gib_per_rank: list[float]
    predicted_step_time_s: float | None = None
    predicted_peak_memory_gib: float | None = None
    step_time_ratio: float | None = None
    memory_ratio: float | None = None
    predicted_on: str | None = Field(default=None, description="The hardware of predicted_* (the plan's GPU).")
    local_prediction: Prediction | None = Field(
        default=None, description="The plan re-priced for the run's own hardware."
    )
    resumed_from_step: int | None = None
    created_at: str | None = None
    notes: list[str] = Field(default_factory=list)
