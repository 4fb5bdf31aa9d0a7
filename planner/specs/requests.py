"""The body of ``planner.plan``/``estimate`` and of ``POST /v1/plans``/``/v1/estimates``."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from planner.specs.calibration import Calibration
from planner.specs.common import Spec
from planner.specs.hf import from_hf_config
from planner.specs.inputs import ClusterSpec, ModelSpec, ParallelPins, TrainingSpec
from planner.specs.profiles import NetworkProfile, Profile

# --------------------------------------------------------------------------------------------
# Requests


class SearchOptions(Spec):
    allow_tp_across_nodes: bool = Field(default=False, description="Allow TP groups that span nodes.")
    time_limit_s: float = Field(default=10.0, gt=0, le=600, description="CP-SAT wall-time limit.")
    num_workers: int = Field(
        default=2,
        ge=1,
        le=64,
        description="CP-SAT search workers. Unset: one for models of fewer than 64 chunks (their solves are "
        "short: a second worker costs CPU and saves no wall time), else 2. The interleaved classes of a free schedule, "
        "solved within a deterministic budget, always use one (parallel workers would make the answer vary by run).",
    )
    prove: bool = Field(
        default=False,
        description="Prove a NOT PROVEN answer exactly: each interleaved class the CP-SAT budget leaves below the answer "
        "is solved over its whole schedule graph by a MIP (SCIP) within the time limit. Seconds to minutes; it ranks "
        "the faster cuts it finds and answers OPTIMAL when no class is left below the answer.",
    )
    memory_headroom: float = Field(
        default=0.05,
        ge=0,
        le=0.5,
        description="Fraction of each GPU's memory a plan leaves unused (0.05 = plans peak at "
        "≤ 95 % of HBM; 0 = up to the last byte the model counts).",
    )


class PlanRequest(Spec):
    """The body of ``planner.plan``/``planner.estimate`` and ``POST /v1/plans``/``/v1/estimates``."""

    model: str | ModelSpec = Field(
        description="A catalog id (see `meshplan models`), an inline ModelSpec, or a Hugging Face config.json as "
        '{"hf_config": {...}, "name": optional id} (model_type llama, mistral, qwen2, qwen3, qwen3_moe, mixtral, '
        "deepseek_v3, gpt_oss, olmoe, kimi_k2, kimi_k25, glm4_moe, llama4), read into a ModelSpec."
    )
    cluster: ClusterSpec
    training: TrainingSpec
    parallel: ParallelPins = Field(default_factory=ParallelPins, description="Pinned parallel settings.")
    profile: Profile | None = None
    profile_id: str | None = Field(default=None, max_length=64, description="A stored profile (service only).")
    network: NetworkProfile | None = None
    calibration: Calibration | None = Field(
        default=None,
        description="Residual constants fitted on the user's own runs (`meshplan calibrate`); replace the built-in ones.",
    )
    calibration_id: str | None = Field(
        default=None, max_length=64, description="A stored calibration (service only: POST /v1/calibrations)."
    )
    top_k: int = Field(default=3, ge=1, le=20)
    options: SearchOptions = Field(default_factory=SearchOptions)

    @field_validator("model", mode="before")
    @classmethod
    def _hf_config(cls, value: Any) -> Any:
        """``{"hf_config": {...}, "name": ...}`` → the ModelSpec it describes (``planner.specs.hf``)."""
        if not (isinstance(value, dict) and "hf_config" in value):
            return value
        extra = set(value) - {"hf_config", "name"}
        if extra:
            raise ValueError(
                f"a Hugging Face model takes hf_config and name, not {', '.join(sorted(extra))}; "
                "give {'hf_config': <config.json>, 'name': <optional id>}"
            )
        config, name = value["hf_config"], value.get("name")
        if not isinstance(config, dict):
            raise ValueError("hf_config must be the config.json object; give the parsed JSON object")
        return from_hf_config(config, name if isinstance(name, str) else None)
