"""Residual constants of the cost model and the calibrations that carry them (issue 11 §3-4).

The per-op model (``planner.pricing.gpu``, ``planner.pricing.comm``, ``planner.compose.terms``) prices a step from cited
datasheets and microbenchmarks. What it still misses on a given stack and GPU generation is carried by a
handful of *residual constants* (``Residuals``), each acting on ONE term of the model:

==========================  =====================================================================
field                       acts on
==========================  =====================================================================
``compute_scale``           × the seconds of GEMMs and the attention core (``planner.pricing.gpu``); on a
                            host device ("cpu…") also × its measured dispatch (``GpuSpec.host_dispatch``):
                            the same processor computes and dispatches
``memory_scale``            × the seconds of memory-bound ops (norms, activation, RoPE, adds)
``kernel_overhead_us``      + host/launch microseconds per kernel a layer issues (forward, backward)
``comm_scale``              × the seconds of every collective and pipeline send/recv (``planner.pricing.comm``)
``step_overhead_s``         + fixed seconds per optimizer step (host work, synchronisation)
==========================  =====================================================================

The identity (``Residuals()``) prices the model exactly as its cited constants say. Built-in residuals per
(stack, GPU generation) are fitted on published runs with leave-one-source-group-out error reported
(``docs/planner.md``); a ``Calibration`` fitted on the user's own runs (``meshplan calibrate``) replaces
them for a request (``PlanRequest.calibration`` / ``calibration_id``).
"""

from __future__ import annotations

from pydantic import Field

from planner.specs.common import Spec


class Residuals(Spec):
    """Residual constants of the cost model (identity by default); see the module docstring."""

    compute_scale: float = Field(default=1.0, gt=0, le=1000, description="× the time of GEMMs and the attention core.")
    memory_scale: float = Field(default=1.0, gt=0, le=1000, description="× the time of memory-bound ops.")
    kernel_overhead_us: float = Field(
        default=0.0, ge=0, le=1e6, description="Host/launch microseconds added per kernel a layer issues."
    )
    comm_scale: float = Field(default=1.0, gt=0, le=1000, description="× the time of collectives and send/recv.")
    step_overhead_s: float = Field(default=0.0, ge=0, le=3600, description="Fixed seconds added per optimizer step.")


class CalibrationRun(Spec):
    """One measured run a calibration was fitted on, and how well the fitted model predicts it."""

    label: str = Field(max_length=200, description="e.g. 'tiny-llama tp2 dp1 pp1 mbs2 on cpu (gloo)'.")
    measured_step_time_s: float = Field(gt=0)
    predicted_before_s: float = Field(gt=0, description="Predicted step time with the residuals it replaced.")
    predicted_after_s: float = Field(gt=0, description="Predicted step time with the fitted residuals.")


class Calibration(Spec):
    """Residual constants fitted on measured runs of one GPU (or CPU) and stack (``meshplan calibrate``,
    ``POST /v1/calibrations``). Applied to a request by ``PlanRequest.calibration``/``calibration_id``."""

    schema_version: int = 1
    id: str | None = Field(default=None, max_length=64, description="Set by the service when stored.")
    gpu: str = Field(max_length=64, description="The GPU (catalog id, or 'cpu') the runs measured.")
    stack: str = Field(default="meshplan", max_length=200, description="The training stack the runs used.")
    residuals: Residuals = Field(default_factory=Residuals)
    runs: list[CalibrationRun] = Field(default_factory=list, max_length=10_000)
    in_sample_mape: float | None = Field(default=None, ge=0, description="Mean |predicted/measured − 1| on the runs.")
    cross_validated_mape: float | None = Field(
        default=None, ge=0, description="The same, each run predicted by a fit that left it out."
    )
    created_at: str | None = None
    notes: list[str] = Field(default_factory=list)
