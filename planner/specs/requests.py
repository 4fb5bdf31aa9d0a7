"""The body of ``planner.plan``/``estimate`` and of ``POST /v1/plans``/``/v1/estimates``."""

from __future__ import annotations

from pydantic import Field

from planner.specs.calibration import Calibration
from planner.specs.common import Spec
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
        "short: a second worker costs CPU and saves no wall time), else 2.",
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

    model: str | ModelSpec = Field(description="A catalog id (see `meshplan models`) or an inline ModelSpec.")
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
