"""What a request describes: the model, the hardware, the training setup, the parallel configuration."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from planner.specs import rules
from planner.specs.common import (
    MAX_GPUS_PER_NODE,
    MAX_SEQ_LEN,
    Fp8Recipe,
    Optimizer,
    Precision,
    Spec,
)
from planner.specs.config import (
    MAX_GPUS,
    CpComm,
    Recompute,
    Schedule,
    check_fields,
    config_field,
    pin_field,
)
from planner.specs.host import HostDispatch
from planner.specs.model import ModelSpec as ModelSpec  # its own module; re-exported here
from planner.specs.stack_override import StackId as StackId  # its own module; re-exported here
from planner.specs.stack_override import StackOverride as StackOverride

# --------------------------------------------------------------------------------------------
# Hardware


class PeakTflops(Spec):
    """Dense (not sparse) datasheet peak, TFLOP/s, per precision; null where unsupported."""

    fp32: float = Field(gt=0)
    tf32: float | None = Field(default=None, gt=0)
    bf16: float | None = Field(default=None, gt=0)
    fp16: float | None = Field(default=None, gt=0)
    fp8: float | None = Field(default=None, gt=0)


#: The id prefix of a host device recorded before ``GpuSpec.kind`` existed (``runtime.report.host_spec`` names it
#: ``cpu``): read only when ``kind`` is unset.
HOST_ID_PREFIX = "cpu"


class GpuSpec(Spec):
    """One accelerator, from its vendor datasheet. Bandwidths are per GPU, one direction, GB/s."""

    id: str = Field(min_length=1, max_length=64)
    memory_gib: float = Field(gt=0, le=4096, description="Usable device memory, GiB.")
    peak_tflops: PeakTflops
    hbm_bandwidth_GBps: float = Field(gt=0)
    nvlink_bandwidth_GBps: float = Field(gt=0, description="Intra-node link, per GPU, one direction.")
    nic_bandwidth_GBps: float = Field(gt=0, description="Inter-node network, per GPU, one direction.")
    source: str = Field(default="", max_length=500, description="Where the numbers come from.")
    host_dispatch: HostDispatch | None = Field(
        default=None, description="A CPU host's measured dispatch costs (``meshplan run``); None on a GPU."
    )
    kind: Literal["gpu", "host"] | None = Field(
        default=None,
        description="'host': the device is a host's processor (a CPU run of `meshplan run`: it runs the ops "
        "itself, every kernel's dispatch adds to its time); 'gpu' otherwise. Unset: 'host' for an id starting "
        "with 'cpu' (runs recorded before this field), else 'gpu'.",
    )

    @property
    def on_host(self) -> bool:
        """Whether the device is a host's processor (``kind``)."""
        if self.kind is not None:
            return self.kind == "host"
        return self.id.lower().startswith(HOST_ID_PREFIX)

    @model_serializer(mode="wrap")
    def _drop_unset_kind(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        if data.get("kind", "") is None:  # unset: as before the field existed (request hashes unchanged)
            del data["kind"]
        return data

    def peak_flops(self, precision: str) -> float:
        """Peak FLOP/s for a training precision (fp32 training uses TF32 tensor cores when present)."""
        p = self.peak_tflops
        value = {"bf16": p.bf16, "fp16": p.fp16, "fp32": p.tf32 or p.fp32, "fp8": p.fp8}[precision]
        if value is None:
            raise ValueError(f"GPU {self.id!r} has no {precision} rate")
        return value * 1e12


_BANDWIDTH = re.compile(
    r"^\s*(?:(?P<count>\d+)\s*[xX×*]\s*)?(?P<rate>\d+(?:\.\d+)?)\s*(?P<unit>[GT](?:b/s|bps|bit/s|B/s|Bps))"
    r"\s*(?:(?i:per\s+|/\s*)(?P<scope>(?i:node|gpu)))?\s*$"
)
BANDWIDTH_FORMS = "'8x400Gb/s' (8 links per node), '400 Gb/s per GPU', '50 GB/s per GPU' or '3200 Gb/s per node'"


def bandwidth_per_gpu_GBps(text: str, gpus_per_node: int) -> float:
    """The one conversion of a bandwidth as people state it into what the cost model uses: GB/s per
    GPU, one direction. ``text`` is ``[N x] RATE UNIT [per node|per GPU]``: UNIT is Gb/s (bits, as NIC
    datasheets give it; also Gbps, Tb/s) or GB/s (bytes; also TB/s); ``N x RATE`` is N links (NICs)
    per node of RATE each, shared by the node's GPUs; without ``N x`` the scope is required (``per
    node`` is shared by the node's GPUs, ``per GPU`` is each GPU's own). Raises ValueError("what;
    fix") on anything else."""
    m = _BANDWIDTH.match(text)
    if m is None:
        raise ValueError(f"cannot read the bandwidth {text!r}; write it as {BANDWIDTH_FORMS}")
    unit = m["unit"]
    bits = unit[1] == "b"
    factor = (1000.0 if unit[0] in "Tt" else 1.0) / (8 if bits else 1)
    rate = float(m["rate"]) * factor
    scope = (m["scope"] or "").lower()
    if rate <= 0:
        raise ValueError(f"the bandwidth {text!r} is not positive; give a rate above 0")
    if m["count"] is not None:
        count = int(m["count"])
        if count < 1:
            raise ValueError(f"the bandwidth {text!r} has {count} links; give at least one link")
        if scope == "gpu":
            return count * rate  # N links per GPU
        return count * rate / gpus_per_node  # N links per node (the default of 'N x')
    if not scope:
        raise ValueError(f"the bandwidth {text!r} does not say per node or per GPU; write it as {BANDWIDTH_FORMS}")
    return rate if scope == "gpu" else rate / gpus_per_node


class ClusterSpec(Spec):
    """Homogeneous nodes of identical GPUs.

    Link bandwidths are given either as the cost model's own figure (``*_bandwidth_GBps``: GB/s per
    GPU, one direction) or as people state them (``*_bandwidth``: '8x400Gb/s', '400 Gb/s per GPU',
    '3200 Gb/s per node'); the statement is converted once, on validation, into ``*_bandwidth_GBps``
    (``bandwidth_per_gpu_GBps``). A ``preset`` (see `meshplan clusters`) fills the GPU, the GPUs per
    node and both bandwidths of a known system, unless they are given."""

    preset: str | None = Field(
        default=None,
        max_length=64,
        description="A known system (see `meshplan clusters`): "
        "fills gpu, gpus_per_node and the link bandwidths that are not given.",
    )
    gpu: str | GpuSpec = Field(
        description="A catalog id (see `meshplan gpus`) or an inline GpuSpec (the preset's when omitted with a preset)."
    )
    num_nodes: int = Field(ge=1, le=MAX_GPUS)
    gpus_per_node: int = Field(
        ge=1, le=MAX_GPUS_PER_NODE, description="GPUs per node (the preset's when omitted with a preset)."
    )
    intra_node_bandwidth: str | None = Field(
        default=None,
        max_length=64,
        description=("Intra-node link bandwidth as stated, e.g. '450 GB/s per GPU' (sets intra_node_bandwidth_GBps)."),
    )
    inter_node_bandwidth: str | None = Field(
        default=None,
        max_length=64,
        description=(
            "Inter-node network as stated: '8x400Gb/s' (NICs per node × rate), '400 Gb/s per GPU' or "
            "'400 Gb/s per node' (sets inter_node_bandwidth_GBps)."
        ),
    )
    intra_node_bandwidth_GBps: float | None = Field(
        default=None, gt=0, description="Override of the GPU's NVLink rate, GB/s per GPU."
    )
    inter_node_bandwidth_GBps: float | None = Field(
        default=None, gt=0, description="Override of the GPU's NIC rate, GB/s per GPU."
    )
    intra_node_latency_us: float | None = Field(default=None, ge=0, le=1e6)
    inter_node_latency_us: float | None = Field(default=None, ge=0, le=1e6)
    oversubscription: float | None = Field(
        default=None,
        ge=1,
        le=64,
        description="Bandwidth oversubscription of the fabric above a scalable unit (leaf → spine): a collective "
        "whose group spans more nodes than one scalable unit gets each GPU's NIC rate ÷ this. Unset: 1 "
        "(non-blocking, as the DGX SuperPOD reference architectures; `meshplan clusters`).",
    )
    scalable_unit_nodes: int | None = Field(
        default=None,
        ge=1,
        le=MAX_GPUS,
        description="Nodes of one scalable unit (the rail-optimized leaf group, one switch hop apart). Unset: 32 "
        "(DGX SuperPOD H100/B200 reference architectures).",
    )

    @model_validator(mode="before")
    @classmethod
    def _apply_preset(cls, data: object) -> object:
        if not isinstance(data, dict) or data.get("preset") is None:
            return data
        from planner.specs.catalog import CLUSTER_PRESETS  # the catalog imports this module

        preset = CLUSTER_PRESETS.get(data["preset"]) if isinstance(data["preset"], str) else None
        if preset is None:
            return data  # ``_check_preset`` names the field
        filled = dict(data)
        for key, value in preset.fills().items():
            if filled.get(key) is None:
                filled[key] = value
        # a stated bandwidth given by the user wins over the preset's other form of it
        for link in ("intra_node", "inter_node"):
            if data.get(f"{link}_bandwidth_GBps") is not None and data.get(f"{link}_bandwidth") is None:
                filled.pop(f"{link}_bandwidth", None)
        return filled

    @field_validator("preset")
    @classmethod
    def _check_preset(cls, preset: str | None) -> str | None:
        if preset is not None:
            from planner.specs.catalog import get_cluster_preset

            get_cluster_preset(preset)
        return preset

    @field_validator("intra_node_bandwidth", "inter_node_bandwidth")
    @classmethod
    def _check_statement(cls, text: str | None, info: ValidationInfo) -> str | None:
        if text is not None:
            bandwidth_per_gpu_GBps(text, info.data.get("gpus_per_node") or 1)
        return text

    @field_validator("intra_node_bandwidth_GBps", "inter_node_bandwidth_GBps")
    @classmethod
    def _one_statement(cls, given: float | None, info: ValidationInfo) -> float | None:
        link = str(info.field_name).removesuffix("_bandwidth_GBps")
        stated = info.data.get(f"{link}_bandwidth")
        if given is not None and stated is not None:
            per_gpu = bandwidth_per_gpu_GBps(stated, info.data.get("gpus_per_node") or 1)
            if abs(given - per_gpu) > 1e-9 * per_gpu:
                raise ValueError(
                    f"{link}_bandwidth {stated!r} is {per_gpu:g} GB/s per GPU but {link}_bandwidth_GBps is "
                    f"{given:g}; give only one of them"
                )
        return given

    @model_serializer(mode="wrap")
    def _drop_unset_fabric(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data = handler(self)
        for key in (
            "oversubscription",
            "scalable_unit_nodes",
        ):  # unset: as before the fields (request hashes unchanged)
            if key in data and data[key] is None:
                del data[key]
        return data

    @model_validator(mode="after")
    def _check_size(self) -> ClusterSpec:
        if self.num_nodes * self.gpus_per_node > MAX_GPUS:
            raise ValueError(f"num_nodes × gpus_per_node must be at most {MAX_GPUS}")
        for link in ("intra_node", "inter_node"):
            stated = getattr(self, f"{link}_bandwidth")
            if stated is None:
                continue
            setattr(self, f"{link}_bandwidth_GBps", bandwidth_per_gpu_GBps(stated, self.gpus_per_node))
        return self

    @property
    def num_gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node


class TrainingSpec(Spec):
    global_batch_size: int = Field(ge=1, le=10_000_000, description="Sequences per optimizer step.")
    seq_len: int = Field(ge=1, le=MAX_SEQ_LEN)
    precision: Precision = "bf16"
    fp8_recipe: Fp8Recipe | None = Field(
        default=None,
        description="FP8 scaling recipe with precision 'fp8': tensorwise / rowwise (torchao), delayed / current "
        "(Transformer Engine), mxfp8 (Blackwell); unset: the stack's default (planner.specs.fp8).",
    )
    optimizer: Optimizer = "adam"
    stack: StackId | StackOverride = Field(
        default="meshplan",
        description="Training stack the plan is priced for: a preset id (see `meshplan stacks`) or an inline "
        "{base, ...overrides} object.",
    )

    @model_serializer(mode="wrap")
    def _drop_unset_recipe(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """``fp8_recipe`` is left out of a dump when unset, so a request without FP8 serialises (and hashes, in
        the service's store) as before the field existed."""
        data: dict[str, Any] = handler(self)
        if data.get("fp8_recipe", 0) is None:
            del data["fp8_recipe"]
        return data

    @model_validator(mode="after")
    def _fp8_recipe_needs_fp8(self) -> TrainingSpec:
        if self.fp8_recipe is not None and self.precision != "fp8":
            raise ValueError(
                f"training.fp8_recipe {self.fp8_recipe!r} is set but training.precision is {self.precision!r}; "
                'set training.precision to "fp8" or drop training.fp8_recipe'
            )
        return self


# --------------------------------------------------------------------------------------------
# Parallel configuration


class ParallelConfig(Spec):
    """A complete parallel configuration. ``stage_layers`` lists the transformer layers of each model
    chunk in pipeline order (``pp × virtual_stages`` entries; chunk c sits on pipeline rank
    ``c % pp`` for looped schedules, and V-shaped for ``zbv-zero-bubble``). Fields: ``planner.specs.config.FIELDS``."""

    tp: int = config_field("tp")
    pp: int = config_field("pp")
    dp: int = config_field("dp")
    cp: int = config_field("cp")
    cp_comm: CpComm = config_field("cp_comm")
    micro_batch_size: int = config_field("micro_batch_size")
    schedule: Schedule = config_field("schedule")
    virtual_stages: int = config_field("virtual_stages")
    recompute: Recompute = config_field("recompute")
    sequence_parallel: bool = config_field("sequence_parallel")
    zero_stage: int = config_field("zero_stage")
    stage_layers: list[int] = config_field("stage_layers")
    tp_comm_overlap: bool = config_field("tp_comm_overlap")
    ep: int = config_field("ep")
    etp: int = config_field("etp")

    @model_validator(mode="after")
    def _check_consistency(self) -> ParallelConfig:
        rules.check(
            rules.stage_layers_count(self.stage_layers, self.pp, self.virtual_stages),
            rules.stage_layers_nonnegative(self.stage_layers),
            rules.virtual_stages_fit(self.schedule, self.virtual_stages),
            rules.sequence_parallel_needs_tp(self.sequence_parallel, self.tp),
            rules.tp_overlap_needs_sp(self.tp_comm_overlap, self.tp, self.sequence_parallel),
            rules.etp_is_one_or_tp(self.etp, self.tp),
            rules.ep_divides_dp(self.ep, self.dp),
        )
        return self

    @property
    def num_gpus(self) -> int:
        return self.tp * self.cp * self.pp * self.dp


class ParallelPins(Spec):
    """A partial ParallelConfig: each field given is pinned, the rest are searched (``plan``) or take
    documented defaults (``estimate``)."""

    tp: int | None = pin_field("tp")
    pp: int | None = pin_field("pp")
    dp: int | None = pin_field("dp")
    cp: int | None = pin_field("cp")
    cp_comm: CpComm | None = pin_field("cp_comm")
    micro_batch_size: int | None = pin_field("micro_batch_size")
    schedule: Schedule | None = pin_field("schedule")
    virtual_stages: int | None = pin_field("virtual_stages")
    recompute: Recompute | None = pin_field("recompute")
    sequence_parallel: bool | None = pin_field("sequence_parallel")
    zero_stage: int | None = pin_field("zero_stage")
    stage_layers: list[int] | None = pin_field("stage_layers")
    tp_comm_overlap: bool | None = pin_field("tp_comm_overlap")
    ep: int | None = pin_field("ep")
    etp: int | None = pin_field("etp")


check_fields(ParallelConfig)
check_fields(ParallelPins, optional=True)
