"""The one schema vocabulary of meshplan (pydantic v2): CLI, Python API and REST all speak it.

Inputs: ``ModelSpec``, ``GpuSpec``, ``ClusterSpec``, ``TrainingSpec``, ``ParallelConfig`` (and its
all-optional twin ``ParallelPins``), ``Profile``, ``NetworkProfile``, ``PlanRequest``.
Outputs: ``Estimate``, ``Plan`` (pure data: what the runtime, the exporters and the API act on),
``PlanResponse``.

Canonical JSON field names are part of the public contract: other tools are written against them.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from planner import rules
from planner.config import (
    MAX_GPUS,
    MAX_LAYERS,
    MULTI_STAGE_SCHEDULES,  # noqa: F401  (re-exported)
    Recompute,
    Schedule,
    check_fields,
    config_field,
    pin_field,
)

#: 2: ``mesh`` without rank groups, the GPU only in ``cluster.gpu`` (a full GpuSpec), one memory-per-stage
#: list, ``inputs`` (cost inputs and cost-model version). Schema-1 plans are read and upgraded.
SCHEMA_VERSION = 2

Family = Literal["gpt", "llama"]
Activation = Literal["gelu", "swiglu"]
Norm = Literal["layernorm", "rmsnorm"]
Precision = Literal["bf16", "fp16", "fp32"]
Optimizer = Literal["adam", "sgd"]
LayerKind = Literal["embedding", "transformer_block", "lm_head"]

BYTES_PER_ELEMENT: dict[str, int] = {"bf16": 2, "fp16": 2, "fp32": 4}

# Sane upper bounds: far above any real model or cluster, low enough to refuse nonsense early.
MAX_HIDDEN = 131_072
MAX_VOCAB = 4_194_304
MAX_SEQ_LEN = 1_048_576
MAX_GPUS_PER_NODE = 64


class _Spec(BaseModel):
    """Base: unknown fields are errors (a typo must not silently fall back to a default)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


# --------------------------------------------------------------------------------------------
# Model


class ModelSpec(_Spec):
    """A decoder-only transformer (GPT or Llama family)."""

    name: str = Field(min_length=1, max_length=128, description="Model id, e.g. 'llama3-70b'.")
    family: Family = Field(description="'gpt' (LayerNorm, GELU, learned positions) or 'llama' (RMSNorm, SwiGLU, RoPE, GQA).")
    num_layers: int = Field(ge=1, le=MAX_LAYERS, description="Transformer blocks.")
    hidden_size: int = Field(ge=1, le=MAX_HIDDEN)
    num_attention_heads: int = Field(ge=1, le=4096)
    num_kv_heads: int = Field(ge=1, le=4096, description="Key/value heads (GQA); equal to num_attention_heads for MHA.")
    ffn_hidden_size: int = Field(ge=1, le=8 * MAX_HIDDEN)
    vocab_size: int = Field(ge=1, le=MAX_VOCAB)
    activation: Activation
    norm: Norm
    tie_embeddings: bool = False
    max_seq_len: int = Field(ge=1, le=MAX_SEQ_LEN)

    @model_validator(mode="after")
    def _check_shapes(self) -> "ModelSpec":
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"num_attention_heads={self.num_attention_heads} must divide hidden_size={self.hidden_size}; "
                "choose a head count that divides the hidden size"
            )
        if self.num_attention_heads % self.num_kv_heads:
            raise ValueError(
                f"num_kv_heads={self.num_kv_heads} must divide num_attention_heads={self.num_attention_heads}; "
                "use a divisor of the head count (equal to it for multi-head attention)"
            )
        return self

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


# --------------------------------------------------------------------------------------------
# Hardware


class PeakTflops(_Spec):
    """Dense (not sparse) datasheet peak, TFLOP/s, per precision; null where unsupported."""

    fp32: float = Field(gt=0)
    tf32: float | None = Field(default=None, gt=0)
    bf16: float | None = Field(default=None, gt=0)
    fp16: float | None = Field(default=None, gt=0)
    fp8: float | None = Field(default=None, gt=0)


class GpuSpec(_Spec):
    """One accelerator, from its vendor datasheet. Bandwidths are per GPU, one direction, GB/s."""

    id: str = Field(min_length=1, max_length=64)
    memory_gib: float = Field(gt=0, le=4096, description="Usable device memory, GiB.")
    peak_tflops: PeakTflops
    hbm_bandwidth_GBps: float = Field(gt=0)
    nvlink_bandwidth_GBps: float = Field(gt=0, description="Intra-node link, per GPU, one direction.")
    nic_bandwidth_GBps: float = Field(gt=0, description="Inter-node network, per GPU, one direction.")
    source: str = Field(default="", max_length=500, description="Where the numbers come from.")

    def peak_flops(self, precision: str) -> float:
        """Peak FLOP/s for a training precision (fp32 training uses TF32 tensor cores when present)."""
        p = self.peak_tflops
        value = {"bf16": p.bf16, "fp16": p.fp16, "fp32": p.tf32 or p.fp32}[precision]
        if value is None:
            raise ValueError(f"GPU {self.id!r} has no {precision} rate")
        return value * 1e12


class ClusterSpec(_Spec):
    """Homogeneous nodes of identical GPUs."""

    gpu: str | GpuSpec = Field(description="A catalog id (see `meshplan gpus`) or an inline GpuSpec.")
    num_nodes: int = Field(ge=1, le=MAX_GPUS)
    gpus_per_node: int = Field(ge=1, le=MAX_GPUS_PER_NODE)
    intra_node_bandwidth_GBps: float | None = Field(default=None, gt=0, description="Override of the GPU's NVLink rate.")
    inter_node_bandwidth_GBps: float | None = Field(default=None, gt=0, description="Override of the GPU's NIC rate.")
    intra_node_latency_us: float | None = Field(default=None, ge=0, le=1e6)
    inter_node_latency_us: float | None = Field(default=None, ge=0, le=1e6)

    @model_validator(mode="after")
    def _check_size(self) -> "ClusterSpec":
        if self.num_nodes * self.gpus_per_node > MAX_GPUS:
            raise ValueError(f"num_nodes × gpus_per_node must be at most {MAX_GPUS}")
        return self

    @property
    def num_gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node


class TrainingSpec(_Spec):
    global_batch_size: int = Field(ge=1, le=10_000_000, description="Sequences per optimizer step.")
    seq_len: int = Field(ge=1, le=MAX_SEQ_LEN)
    precision: Precision = "bf16"
    optimizer: Optimizer = "adam"


# --------------------------------------------------------------------------------------------
# Parallel configuration


class ParallelConfig(_Spec):
    """A complete parallel configuration. ``stage_layers`` lists the transformer layers of each model
    chunk in pipeline order (``pp × virtual_stages`` entries; chunk c sits on pipeline rank
    ``c % pp`` for looped schedules, and V-shaped for ``zbv-zero-bubble``). Fields: ``planner.config.FIELDS``."""

    tp: int = config_field("tp")
    pp: int = config_field("pp")
    dp: int = config_field("dp")
    micro_batch_size: int = config_field("micro_batch_size")
    schedule: Schedule = config_field("schedule")
    virtual_stages: int = config_field("virtual_stages")
    recompute: Recompute = config_field("recompute")
    sequence_parallel: bool = config_field("sequence_parallel")
    zero_stage: int = config_field("zero_stage")
    stage_layers: list[int] = config_field("stage_layers")

    @model_validator(mode="after")
    def _check_consistency(self) -> "ParallelConfig":
        rules.check(
            rules.stage_layers_count(self.stage_layers, self.pp, self.virtual_stages),
            rules.stage_layers_nonnegative(self.stage_layers),
            rules.virtual_stages_fit(self.schedule, self.virtual_stages),
            rules.sequence_parallel_needs_tp(self.sequence_parallel, self.tp),
        )
        return self

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp * self.dp


class ParallelPins(_Spec):
    """A partial ParallelConfig: each field given is pinned, the rest are searched (``plan``) or take
    documented defaults (``estimate``)."""

    tp: int | None = pin_field("tp")
    pp: int | None = pin_field("pp")
    dp: int | None = pin_field("dp")
    micro_batch_size: int | None = pin_field("micro_batch_size")
    schedule: Schedule | None = pin_field("schedule")
    virtual_stages: int | None = pin_field("virtual_stages")
    recompute: Recompute | None = pin_field("recompute")
    sequence_parallel: bool | None = pin_field("sequence_parallel")
    zero_stage: int | None = pin_field("zero_stage")
    stage_layers: list[int] | None = pin_field("stage_layers")


check_fields(ParallelConfig)
check_fields(ParallelPins, optional=True)


# --------------------------------------------------------------------------------------------
# Profiles


class ActivationBytes(_Spec):
    """Bytes saved for backward by one layer for one micro-batch, per recompute mode."""

    none: int = Field(ge=0)
    selective: int = Field(ge=0)
    full: int = Field(ge=0)

    def for_mode(self, mode: str) -> int:
        return int(getattr(self, mode))


class LayerProfile(_Spec):
    """One layer kind at one (micro_batch_size, seq_len, tp, sequence_parallel) point. Per GPU."""

    kind: LayerKind
    micro_batch_size: int = Field(ge=1)
    seq_len: int = Field(ge=1)
    tp: int = Field(ge=1)
    sequence_parallel: bool = False
    fwd_flops: float = Field(ge=0)
    bwd_flops: float = Field(ge=0)
    param_count: int = Field(ge=0)
    param_bytes: int = Field(ge=0)
    saved_activation_bytes: ActivationBytes
    output_activation_bytes: int = Field(ge=0)
    fwd_time_s: float | None = Field(default=None, ge=0)
    bwd_time_s: float | None = Field(default=None, ge=0)
    peak_memory_bytes: int | None = Field(default=None, ge=0)


class Profile(_Spec):
    """Per-layer-kind measurements (or analytic derivations) of one model on one device."""

    schema_version: int = SCHEMA_VERSION
    model: ModelSpec
    device: str = Field(description="'meta', 'cpu', 'analytic', or a CUDA device name.")
    dtype: Precision = "bf16"
    torch_version: str | None = None
    source: Literal["analytic", "meta", "measured"] = "measured"
    created_at: str | None = None
    layers: list[LayerProfile] = Field(min_length=1, max_length=100_000)
    notes: list[str] = Field(default_factory=list, max_length=100, description="How it was measured.")

    def find(
        self, kind: str, micro_batch_size: int, seq_len: int, tp: int, sequence_parallel: bool = False
    ) -> LayerProfile | None:
        for layer in self.layers:
            if (layer.kind, layer.micro_batch_size, layer.seq_len, layer.tp, layer.sequence_parallel) == (
                kind, micro_batch_size, seq_len, tp, sequence_parallel
            ):
                return layer
        return None


LinkClass = Literal["intra_node", "inter_node"]
Collective = Literal["all_reduce", "all_gather", "reduce_scatter", "send_recv"]


class LinkFit(_Spec):
    """α-β fit of one collective on one link class: time(S) = alpha_s + S · beta_s_per_byte, where S
    is the message size in bytes (per rank) at ``group_size`` ranks."""

    link: LinkClass
    collective: Collective
    group_size: int = Field(ge=2)
    alpha_s: float = Field(ge=0)
    beta_s_per_byte: float = Field(ge=0)
    samples: list[tuple[int, float]] = Field(default_factory=list, description="(bytes, seconds) measured.")

    @property
    def bandwidth_GBps(self) -> float:
        return 1.0 / self.beta_s_per_byte / 1e9 if self.beta_s_per_byte > 0 else float("inf")


class NetworkProfile(_Spec):
    schema_version: int = SCHEMA_VERSION
    backend: str
    device: str
    world_size: int = Field(ge=1)
    nodes: int = Field(default=1, ge=1)
    created_at: str | None = None
    links: list[LinkFit] = Field(default_factory=list, max_length=1000)

    def fit(self, link: str, collective: str) -> LinkFit | None:
        for f in self.links:
            if f.link == link and f.collective == collective:
                return f
        return None


# --------------------------------------------------------------------------------------------
# Requests


class SearchOptions(_Spec):
    allow_tp_across_nodes: bool = Field(default=False, description="Allow TP groups that span nodes.")
    time_limit_s: float = Field(default=10.0, gt=0, le=600, description="CP-SAT wall-time limit.")
    num_workers: int = Field(default=2, ge=1, le=64, description="CP-SAT search workers.")
    memory_headroom: float = Field(default=0.05, ge=0, le=0.5,
                                   description="Fraction of each GPU's memory a plan leaves unused (0.05 = plans peak at "
                                               "≤ 95 % of HBM; 0 = up to the last byte the model counts).")


class PlanRequest(_Spec):
    """The body of ``planner.plan``/``planner.estimate`` and ``POST /v1/plans``/``/v1/estimates``."""

    model: str | ModelSpec = Field(description="A catalog id (see `meshplan models`) or an inline ModelSpec.")
    cluster: ClusterSpec
    training: TrainingSpec
    parallel: ParallelPins = Field(default_factory=ParallelPins, description="Pinned parallel settings.")
    profile: Profile | None = None
    profile_id: str | None = Field(default=None, max_length=64, description="A stored profile (service only).")
    network: NetworkProfile | None = None
    top_k: int = Field(default=3, ge=1, le=20)
    options: SearchOptions = Field(default_factory=SearchOptions)


# --------------------------------------------------------------------------------------------
# Results


class TimeBreakdown(_Spec):
    """Seconds per step on the critical path, by cause. They add up to ``step_time_s``."""

    compute_s: float
    tp_comm_s: float
    pp_bubble_s: float
    pp_p2p_s: float
    dp_sync_s: float = Field(description="Exposed data-parallel communication: the gradient sync beyond its overlap with the last "
                                         "backward, ZeRO-1/2's parameter all-gather, and ZeRO-3's per-layer parameter gathers and "
                                         "gradient reduce-scatters beyond the layer's compute (compute under them is not slowed "
                                         "down in this model, so compute_s is the same as without ZeRO-3).")
    optimizer_s: float


class StageMemory(_Spec):
    """GiB per GPU of one pipeline rank."""

    weights_gib: float
    gradients_gib: float
    optimizer_gib: float
    activations_gib: float
    buffers_gib: float
    reserve_gib: float
    total_gib: float


class Estimate(_Spec):
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
    memory_headroom: float = Field(default=0.0, description="The fraction of GPU memory kept free that ``fits`` was judged with "
                                                            "(options.memory_headroom; 0 in plans written before it existed).")
    usable_memory_gib: float | None = Field(default=None, description="What a rank may peak at (GiB, reserve included) and "
                                                                      "still fit: (1 − memory_headroom) × gpu_memory_gib.")
    notes: list[str] = Field(default_factory=list)


TPLayout = Literal["replicate", "shard_seq", "shard_last"]


class TPRule(_Spec):
    """One entry of a tensor-parallel plan: modules whose qualified name matches ``pattern``
    (fnmatch, e.g. ``layers.*.attn.wq``) get ``style``. Layouts map to DTensor placements:
    replicate → Replicate(), shard_seq → Shard(1), shard_last → Shard(-1)."""

    pattern: str
    style: Literal["colwise", "rowwise", "sequence_parallel", "prepare_input", "prepare_output", "replicate"]
    input_layouts: list[TPLayout] | None = None
    output_layouts: list[TPLayout] | None = None
    desired_input_layouts: list[TPLayout] | None = None
    desired_output_layouts: list[TPLayout] | None = None


class MeshLayout(_Spec):
    """The device mesh: ``dim_names``/``shape`` in row-major order (last dim innermost, i.e. ranks
    adjacent). The rank groups follow from the shape: ``planner.layout.mesh_groups``."""

    dim_names: list[str] = Field(min_length=1, max_length=8)
    shape: list[int] = Field(min_length=1, max_length=8)

    @model_validator(mode="after")
    def _check_dims(self) -> MeshLayout:
        if len(self.dim_names) != len(self.shape) or any(n < 1 for n in self.shape):
            raise ValueError(f"mesh {self.dim_names}={self.shape}: give one size ≥ 1 per dimension name")
        return self


class CostInputs(_Spec):
    """What priced a plan besides its model, cluster and training: the layer and network profiles the
    cost model read (null = the analytic defaults) and the cost model's version. With these,
    ``planner.estimate`` (``planner.api.replay_request``), the trace and the dashboard reproduce the
    plan's numbers exactly, as long as ``cost_model_version`` is the planner's current one."""

    cost_model_version: int = Field(ge=0, description="planner.version.COST_MODEL_VERSION that priced the plan; "
                                                      "0 = unknown (a plan written before schema 2).")
    profile: Profile | None = None
    network: NetworkProfile | None = None


class Alternative(_Spec):
    """The plan with one setting changed, priced by the planner's own cost model (``planner.estimate_plan``
    of ``parallel`` gives these figures): the best value of that setting other than the plan's."""

    setting: Literal["tp", "pp", "micro_batch_size", "schedule", "recompute", "sequence_parallel", "zero_stage"]
    value: int | str | bool = Field(description="The setting's value in this alternative (schedule: its name, v shown in parallel).")
    parallel: ParallelConfig = Field(description="The configuration estimated (dp follows tp·pp; SP off at tp 1; ZeRO 0 at dp 1).")
    cut: Literal["plan", "even"] = Field(description="plan: the plan's stage cut kept; even: an even cut (pp or v changed), "
                                                     "not re-optimised, so an upper bound of that configuration's best time.")
    step_time_s: float
    peak_memory_gib: float
    fits: bool
    delta_step_time_s: float = Field(description="step_time_s − the plan's.")
    delta_peak_memory_gib: float = Field(description="peak_memory_gib − the plan's.")
    summary: str = Field(description='e.g. "ZeRO-1 instead of 2: same time, +5.9 GiB".')


class RuledOut(_Spec):
    """The nearest configuration faster than the plan that does not fit (fewest settings changed, then fastest)."""

    parallel: ParallelConfig
    settings_changed: list[str]
    step_time_s: float
    peak_memory_gib: float = Field(description="What it needs per GPU (GiB, reserve included).")
    usable_memory_gib: float = Field(description="What fits: (1 − memory_headroom) × the GPU's memory.")
    reason: str


class Explanation(_Spec):
    binding_constraint: Literal["memory", "bubble", "communication", "compute"]
    summary: str
    runner_up: str | None = None
    details: list[str] = Field(default_factory=list)
    alternatives: list[Alternative] = Field(default_factory=list, description="Plan 1 only: per setting a reader may question, "
                                                                              "the best configuration differing in it alone.")
    ruled_out: RuledOut | None = Field(default=None, description="Set when binding_constraint is memory: the configuration cited.")


def _check_schema_version(data: object, what: str) -> None:
    version = data.get("schema_version", 1) if isinstance(data, dict) else None
    if isinstance(version, int) and version > SCHEMA_VERSION:
        raise ValueError(f"this {what} has schema_version {version}, newer than this meshplan reads ({SCHEMA_VERSION}); "
                         "upgrade meshplan (pip install -U meshplan)")


def _check_schema1_groups(mesh: dict) -> None:
    """A schema-1 mesh listed its rank groups; they must be the ones its shape implies (they are
    derived now), or the plan would silently run on another layout."""
    from planner.layout import mesh_groups  # the layout imports this module

    try:
        layout = MeshLayout.model_validate({"dim_names": mesh.get("dim_names"), "shape": mesh.get("shape")})
    except ValidationError:
        return  # the mesh itself is invalid: Plan validation reports it
    for dim in layout.dim_names:
        listed = mesh.get(f"{dim}_groups")
        if listed is not None and listed != mesh_groups(layout, dim):
            raise ValueError(f"mesh.{dim}_groups of this schema-1 plan are not the row-major layout of mesh.shape "
                             f"{layout.shape} (the runtime builds that one); re-plan with `meshplan plan` or fix the groups")


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
        raise ValueError("this schema-1 plan has no detailed memory per stage (estimate.memory_per_stage); "
                         "re-plan it with `meshplan plan` (or `meshplan estimate` with its parallel settings)")
    data["inputs"] = {"cost_model_version": 0}
    return data


class Plan(_Spec):
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
            from planner.catalog import get_gpu  # the catalog imports this module

            self.cluster = self.cluster.model_copy(update={"gpu": get_gpu(self.cluster.gpu)})
        return self

    @property
    def gpu(self) -> GpuSpec:
        """The plan's GPU (``cluster.gpu``, always a full spec in a Plan)."""
        assert isinstance(self.cluster.gpu, GpuSpec)
        return self.cluster.gpu


class SolverInfo(_Spec):
    status: Literal["OPTIMAL", "FEASIBLE", "INFEASIBLE", "MODEL_INVALID", "UNKNOWN"]
    objective_value: float | None = None
    best_objective_bound: float | None = None
    wall_time_s: float
    configurations_considered: int = 0
    notes: list[str] = Field(default_factory=list)


class Infeasibility(_Spec):
    """Why no plan exists, and the smallest change that would make one."""

    reason: str
    field: str
    suggestion: str
    min_memory_per_gpu_gib: float | None = None


class PlanResponse(_Spec):
    schema_version: int = SCHEMA_VERSION
    cost_model_version: int = Field(ge=0, description="planner.version.COST_MODEL_VERSION that answered (plans or "
                                                      "infeasibility); 0 = unknown (written before schema 2).")
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


class RunReport(_Spec):
    """What a run of a plan measured, beside what the plan predicted (written by ``meshplan run``,
    stored by the service, shown by the dashboard). Ratios are predicted ÷ measured."""

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
    resumed_from_step: int | None = None
    created_at: str | None = None
    notes: list[str] = Field(default_factory=list)
