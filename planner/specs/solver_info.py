"""What the search says of its own answer (``PlanResponse.solver``): its status, objective and bound, and the classes
that keep an answer from being proven (``UnprovenClass``), each with the pins that search it alone."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from planner.specs.common import Spec
from planner.specs.inputs import ParallelPins

SolverStatus = Literal["OPTIMAL", "FEASIBLE", "INFEASIBLE", "MODEL_INVALID", "UNKNOWN"]


class UnprovenClass(Spec):
    """A configuration class whose stage cuts the search's CP-SAT budget left unproven (issue 26) with a lower bound
    below the answer: a cut of it could be faster. ``parallel`` pins exactly that class: a request with those pins
    searches its cuts alone, without the budget, within ``options.time_limit_s``."""

    parallel: ParallelPins
    lower_bound_s: float = Field(description="Valid lower bound of the class's step time over every stage cut.")
    best_step_s: float | None = Field(
        default=None, description="Step time of the best cut the search found for it (None: none that fits)."
    )
    best_stage_layers: list[int] | None = Field(default=None, description="That cut (layers per chunk).")


class SolverInfo(Spec):
    status: SolverStatus
    objective_value: float | None = None
    best_objective_bound: float | None = None
    wall_time_s: float
    configurations_considered: int = 0
    notes: list[str] = Field(default_factory=list)
    unproven: list[UnprovenClass] = Field(
        default_factory=list,
        description="The classes left unproven whose lower bound is below the answer, lowest bound first: what keeps "
        "a FEASIBLE answer from OPTIMAL (the first one's bound is best_objective_bound).",
    )
