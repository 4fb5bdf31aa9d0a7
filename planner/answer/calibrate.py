"""Fitting the cost model's residual constants to measured step times (issue 11 §3-4).

``fit_residuals(observations, free=(...))`` fits the free fields of ``Residuals``
(``planner.specs.calibration``: each acts on one term of the model) so that the model's predicted step
times match measured ones: it minimises Σ log²(predicted ÷ measured) over the free residuals, each as
the log of its value (positive by construction), with Levenberg–Marquardt on a forward-difference
Jacobian (numpy only; a few dozen evaluations of every observation). It reports the fitted residuals,
the in-sample mean |predicted ÷ measured − 1|, the same with each observation predicted by a fit that
left it out (leave-one-out, or leave-one-group-out when every observation names its group) and every
observation's prediction before (at ``start``) and after.

An observation is a measured step time and either a ``PlanRequest`` whose parallel configuration is
pinned (it is priced by ``planner.estimate``'s evaluation, ``predict_step_time``) or a callable
``Residuals -> predicted seconds``.

Which residuals price a request (the built-in table's rows) is ``planner.pricing.residuals``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from planner.answer.residual_notes import describe_residuals  # noqa: F401 (re-exported)
from planner.pricing.residuals import (  # noqa: F401 (re-exported: what prices a request is planner.pricing.residuals)
    FIELDS,
    builtin_residuals,
    generation,
    row_key,
    stack_preset,
)
from planner.specs import Calibration, CalibrationRun, Residuals
from planner.specs.errors import MeshplanError

if TYPE_CHECKING:
    from planner.specs import PlanRequest

#: Fields that multiply a term (identity 1) and fields that add to one (identity 0).
SCALES = ("compute_scale", "memory_scale", "comm_scale")
ADDITIVE = ("kernel_overhead_us", "step_overhead_s")
#: Where an additive residual starts when ``start`` holds 0 (its log needs a positive value): a few µs per
#: launch (the order of a CUDA kernel launch), 1 % of the median measured step.
ADDITIVE_START = {
    "kernel_overhead_us": lambda median_step: 5.0,
    "step_overhead_s": lambda median_step: 0.01 * median_step,
}
#: Finite-difference step in log space, iteration cap and convergence tolerance of the fit.
LOG_STEP = 1e-4
MAX_ITERATIONS = 40
TOLERANCE = 1e-10


# ------------------------------------------------------------------------------------------------
# Predictions


def predict_step_time(request: PlanRequest, residuals: Residuals) -> float:
    """Step seconds of ``request``'s pinned configuration (``planner.estimate``'s evaluation; its
    defaults fill what is not pinned) priced with ``residuals`` instead of the request's own."""
    from planner.answer.request import complete_pins, context
    from planner.compose.cost import class_costs, evaluate

    ctx = context(request)
    ctx.calibration = Calibration(gpu=ctx.gpu.id, stack=ctx.stack.id, residuals=residuals)
    ctx.__dict__.pop("residuals", None)  # priced with these, whatever the request carried
    ctx.__dict__.pop("comm", None)
    cand, n = complete_pins(ctx, request)
    return evaluate(class_costs(ctx, cand), n).objective_ns / 1e9


@dataclass(frozen=True)
class Observation:
    """One measured step: what to predict it with (``request`` or ``predict``) and the measurement."""

    measured_step_time_s: float
    request: PlanRequest | None = None
    predict: Callable[[Residuals], float] | None = None
    label: str = ""
    #: Observations of one group (a source, a cluster, a day) are left out together in cross-validation.
    group: str | None = None

    def predicted(self, residuals: Residuals) -> float:
        if self.predict is not None:
            return self.predict(residuals)
        assert self.request is not None
        return predict_step_time(self.request, residuals)


@dataclass(frozen=True)
class ObservationFit:
    label: str
    group: str | None
    measured_s: float
    before_s: float  # at ``start``
    after_s: float  # at the fitted residuals
    cross_validated_s: float | None  # by the fit that left this observation (its group) out


@dataclass
class FitResult:
    residuals: Residuals
    free: tuple[str, ...]  # the fields fitted (those the observations depend on)
    in_sample_mape: float  # mean |after ÷ measured − 1|
    before_mape: float  # the same at ``start``
    cross_validated_mape: float | None
    cross_validation: str  # "leave-one-group-out", "leave-one-out" or why none
    observations: list[ObservationFit]
    evaluations: int  # model evaluations of one observation, all fits together
    notes: list[str] = field(default_factory=list)

    def calibration(self, gpu: str, stack: str, **extra: Any) -> Calibration:
        """This fit as a ``Calibration`` (the runs with their predictions before and after)."""
        return Calibration(
            gpu=gpu,
            stack=stack,
            residuals=self.residuals,
            runs=[
                CalibrationRun(
                    label=o.label[:200] or f"run {i + 1}",
                    measured_step_time_s=o.measured_s,
                    predicted_before_s=o.before_s,
                    predicted_after_s=o.after_s,
                )
                for i, o in enumerate(self.observations)
            ],
            in_sample_mape=self.in_sample_mape,
            cross_validated_mape=self.cross_validated_mape,
            notes=list(self.notes),
            **extra,
        )


def mape(predicted: Sequence[float], measured: Sequence[float]) -> float:
    """Mean |predicted ÷ measured − 1|."""
    return sum(abs(p / m - 1.0) for p, m in zip(predicted, measured, strict=True)) / len(measured)


# ------------------------------------------------------------------------------------------------
# The fit


class _Counter:
    def __init__(self) -> None:
        self.n = 0


def _with(start: Residuals, free: Sequence[str], theta: Sequence[float]) -> Residuals:
    return start.model_copy(update={f: math.exp(t) for f, t in zip(free, theta, strict=True)})


def _bounds(name: str) -> tuple[float, float]:
    """(lowest, highest) value of a free residual, in log space: the spec's upper bound; scales above
    1/1000, additive ones above 1e-9 of their unit (0 within any measurement's precision)."""
    info = Residuals.model_fields[name]
    hi = next(m.le for m in info.metadata if hasattr(m, "le"))
    lo = 1e-3 if name in SCALES else 1e-9
    return math.log(lo), math.log(hi)


def _residual_fn(obs: Sequence[Observation], start: Residuals, free: Sequence[str], count: _Counter, field_name: str):
    import numpy as np

    logs = np.array([math.log(o.measured_step_time_s) for o in obs])

    def fn(theta: Any) -> Any:
        res = _with(start, free, theta)
        out = np.empty(len(obs))
        for i, o in enumerate(obs):
            try:
                p = o.predicted(res)
            except MeshplanError as exc:
                raise MeshplanError(f"{field_name}[{i}].{exc.field}", exc.message, exc.fix) from None
            count.n += 1
            out[i] = math.log(max(p, 1e-30))
        return out - logs

    return fn


def _levenberg_marquardt(fn: Callable[[Any], Any], theta0: Any, lo: Any, hi: Any) -> Any:
    """argmin ‖fn(θ)‖² over lo ≤ θ ≤ hi from θ0 (Levenberg–Marquardt, Marquardt's diagonal scaling,
    forward-difference Jacobian)."""
    import numpy as np

    theta = np.clip(np.asarray(theta0, dtype=float), lo, hi)
    r = fn(theta)
    cost = float(r @ r)
    lam = 1e-3
    for _ in range(MAX_ITERATIONS):
        done = False
        jac = np.empty((len(r), len(theta)))
        for j in range(len(theta)):
            step = np.array(theta)
            h = LOG_STEP if step[j] + LOG_STEP <= hi[j] else -LOG_STEP
            step[j] += h
            jac[:, j] = (fn(step) - r) / h
        grad, normal = jac.T @ r, jac.T @ jac
        diag = np.diag(normal) + 1e-12
        improved = False
        while lam < 1e12:
            delta = np.linalg.solve(normal + lam * np.diag(diag), -grad)
            trial = np.clip(theta + delta, lo, hi)
            r_trial = fn(trial)
            c_trial = float(r_trial @ r_trial)
            if c_trial < cost:
                done = cost - c_trial <= TOLERANCE * max(cost, 1e-30) or float(np.max(np.abs(trial - theta))) < 1e-9
                theta, r, cost, lam = trial, r_trial, c_trial, max(lam / 10, 1e-12)
                improved = True
                break
            lam *= 10
        if not improved or done:
            break
    return theta


def _fit(
    obs: Sequence[Observation], start: Residuals, free: Sequence[str], count: _Counter, field_name: str
) -> Residuals:
    import numpy as np

    if not free:
        return start
    fn = _residual_fn(obs, start, free, count, field_name)
    median = sorted(o.measured_step_time_s for o in obs)[len(obs) // 2]
    theta0 = []
    for f in free:
        v = getattr(start, f)
        theta0.append(math.log(v if v > 0 else ADDITIVE_START[f](median)))
    bounds = [_bounds(f) for f in free]
    theta = _levenberg_marquardt(
        fn, np.array(theta0), np.array([b[0] for b in bounds]), np.array([b[1] for b in bounds])
    )
    return _with(start, free, theta)


def _check(observations: Sequence[Observation], free: Sequence[str], field_name: str) -> None:
    unknown = [f for f in free if f not in FIELDS]
    if unknown:
        raise MeshplanError(
            "free", f"not a residual constant: {', '.join(map(repr, unknown))}", f"free any of {', '.join(FIELDS)}"
        )
    if len(set(free)) != len(free):
        raise MeshplanError("free", "a residual is named twice", "name each free residual once")
    for i, o in enumerate(observations):
        if not (o.measured_step_time_s > 0 and math.isfinite(o.measured_step_time_s)):
            raise MeshplanError(
                f"{field_name}[{i}].measured_step_time_s",
                f"must be a positive number of seconds (got {o.measured_step_time_s})",
                "give the run's measured seconds per optimizer step",
            )
        if o.request is None and o.predict is None:
            raise MeshplanError(f"{field_name}[{i}]", "nothing to predict it with", "give a request or a predictor")
    if len(observations) < max(1, len(free)):
        raise MeshplanError(
            field_name,
            f"{len(observations)} measured run{'s' if len(observations) != 1 else ''} cannot determine "
            f"{len(free)} free residual constant{'s' if len(free) != 1 else ''} ({', '.join(free)})",
            f"give at least {max(1, len(free))} run{'s' if len(free) > 1 else ''} of different configurations (one "
            "more for a cross-validated error), or fit fewer residuals",
        )


def fit_residuals(
    observations: Sequence[Observation],
    free: Sequence[str] = ("compute_scale",),
    start: Residuals | None = None,
    *,
    field_name: str = "runs",
    cross_validate: bool = True,
) -> FitResult:
    """Fit the ``free`` residuals (the others stay at ``start``, default identity) to the observations;
    see the module docstring. Raises ``MeshplanError`` naming ``field_name`` (or ``free``) when the
    observations cannot determine the free residuals. A free residual the observations do not depend
    on (e.g. ``comm_scale`` with one process) is held at ``start`` and named in ``notes``."""
    import numpy as np

    start = start or Residuals()
    free = tuple(free)
    _check(observations, free, field_name)
    obs = list(observations)
    count = _Counter()
    notes: list[str] = []

    # Residuals the observations do not depend on cannot be fitted: hold them.
    if free:
        fn = _residual_fn(obs, start, free, count, field_name)
        median = sorted(o.measured_step_time_s for o in obs)[len(obs) // 2]
        base_vals = [getattr(start, f) if getattr(start, f) > 0 else ADDITIVE_START[f](median) for f in free]
        theta0 = np.log(np.array(base_vals))
        r0 = fn(theta0)
        live = []
        for j, f in enumerate(free):
            moved = np.array(theta0)
            moved[j] += 0.1
            if float(np.max(np.abs(fn(moved) - r0))) > 1e-9:
                live.append(f)
            else:
                notes.append(f"{f}: the runs do not depend on it; held at {getattr(start, f):g}")
        free = tuple(live)

    fitted = _fit(obs, start, free, count, field_name)
    before = [o.predicted(start) for o in obs]
    after = [o.predicted(fitted) for o in obs]
    count.n += 2 * len(obs)
    measured = [o.measured_step_time_s for o in obs]

    cv: list[float | None] = [None] * len(obs)
    groups = [o.group for o in obs]
    if not cross_validate:
        how = "not asked"
    else:
        by_group = all(g is not None for g in groups) and len(set(groups)) > 1
        folds = (
            [[i for i, g in enumerate(groups) if g == key] for key in dict.fromkeys(groups)]
            if by_group
            else [[i] for i in range(len(obs))]
        )
        how = "leave-one-group-out" if by_group else "leave-one-out"
        for out in folds:
            keep = [o for i, o in enumerate(obs) if i not in out]
            if len(keep) < max(1, len(free)):
                how = f"none: leaving a {'group' if by_group else 'run'} out leaves fewer runs than free residuals"
                cv = [None] * len(obs)
                break
            res = _fit(keep, fitted, free, count, field_name)
            for i in out:
                cv[i] = obs[i].predicted(res)
                count.n += 1
    cv_mape = mape([c for c in cv if c is not None], measured) if all(c is not None for c in cv) else None
    return FitResult(
        residuals=fitted,
        free=free,
        in_sample_mape=mape(after, measured),
        before_mape=mape(before, measured),
        cross_validated_mape=cv_mape,
        cross_validation=how,
        observations=[
            ObservationFit(o.label, o.group, m, b, a, c)
            for o, m, b, a, c in zip(obs, measured, before, after, cv, strict=True)
        ],
        evaluations=count.n,
        notes=notes,
    )
