"""`meshplan calibrate`: fit the cost model's residual constants (``planner.specs.Residuals``) on the
user's own runs.

Each ``RunReport`` that ``meshplan run --report`` wrote carries the request that re-prices the run's
plan on the hardware it ran on (``local_prediction.request``: the layer profile and network fit measured
there, the host's figures). ``calibrate`` re-prices every run with it (``--profile``/``--network`` replace
the measured ones), fits the residuals on the measured step times (``planner.answer.calibrate.fit_residuals``)
and returns a ``Calibration`` with, per run, the prediction before and after. ``--calibration cal.json``
(``PlanRequest.calibration``) then applies it to ``meshplan plan``/``estimate`` on that hardware.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import typer

from planner.specs import (
    NetworkProfile,
    PlanRequest,
    Profile,
    Residuals,
    RunReport,
)
from planner.specs.errors import MeshplanError

#: Fewest steps a run needs: its first (warm-up) step is not measured.
MIN_STEPS = 2


@dataclass(frozen=True)
class MeasuredRun:
    """One run to calibrate on: where it came from, what it measured, and how to re-price it."""

    path: str
    label: str
    measured_step_time_s: float
    request: PlanRequest  # the run's plan on the run's hardware, without a calibration
    device: str
    stack: str


def run_label(report: RunReport) -> str:
    """e.g. 'tiny-gpt tp2 pp1 dp1 mbs8 sp on 2× cpu'."""
    p = report.parallel
    parts = [report.model, f"tp{p.tp} pp{p.pp} dp{p.dp} mbs{p.micro_batch_size}"]
    if p.pp > 1:
        parts.append(p.schedule)
    if p.sequence_parallel:
        parts.append("sp")
    if p.zero_stage and p.dp > 1:
        parts.append(f"zero{p.zero_stage}")
    if p.recompute != "none":
        parts.append(f"recompute-{p.recompute}")
    return " ".join(parts) + f" on {report.world_size}× {report.device}"


def _stack_id(request: PlanRequest) -> str:
    from planner.specs.stacks import resolve

    return resolve(request.training.stack).id.split("+", 1)[0]


def measured_run(
    report: RunReport, path: str, profile: Profile | None = None, network: NetworkProfile | None = None
) -> MeasuredRun:
    """A report as a run to calibrate on; ``profile``/``network`` replace the ones the run measured."""
    field = f"runs ({path})"
    if report.steps < MIN_STEPS or report.measured_step_time_s <= 0:
        raise MeshplanError(
            field,
            f"the run measured {report.steps} step(s): its only step is the warm-up, not a step time",
            "re-run it with `meshplan run --steps 5` or more (the first step is not measured)",
        )
    local = report.local_prediction
    if local is None or local.request is None:
        why = (
            "it has no local_prediction (the cost model could not price it on its hardware)"
            if local is None
            else "its local_prediction has no request (written by a meshplan before calibration)"
        )
        raise MeshplanError(
            field,
            f"{why}, so its plan cannot be re-priced on the hardware it ran on",
            "re-run the plan with this meshplan (`meshplan run --plan PLAN --report run.json`)",
        )
    request = local.request.model_copy(update={"calibration": None, "calibration_id": None})
    if profile is not None:
        p, t = report.parallel, request.training
        if profile.model.name != report.model:
            raise MeshplanError(
                "profile",
                f"the profile is of {profile.model.name!r}, the run trained {report.model!r}",
                "profile the run's model",
            )
        if profile.find("transformer_block", p.micro_batch_size, t.seq_len, p.tp, p.sequence_parallel) is None:
            raise MeshplanError(
                "profile",
                f"the profile has no transformer_block record for micro_batch_size={p.micro_batch_size} "
                f"seq_len={t.seq_len} tp={p.tp} sequence_parallel={p.sequence_parallel} ({path})",
                f"profile with --micro-batch-sizes {p.micro_batch_size} --tp {p.tp} --seq-len {t.seq_len}, or omit --profile",
            )
        if profile.device.lower() not in {"meta", "analytic", report.device.lower()}:
            raise MeshplanError(
                "profile",
                f"the profile was measured on {profile.device!r}, the run ran on {report.device!r}",
                "profile on the hardware the runs ran on, or omit --profile (each run's own profile is used)",
            )
        request = request.model_copy(update={"profile": profile})
    if network is not None:
        request = request.model_copy(update={"network": network})
    return MeasuredRun(
        path=path,
        label=run_label(report),
        measured_step_time_s=report.measured_step_time_s,
        request=request,
        device=report.device,
        stack=_stack_id(request),
    )


def load_runs(
    paths: list[str | Path], profile: Profile | None = None, network: NetworkProfile | None = None
) -> list[MeasuredRun]:
    """The reports at ``paths`` as runs to calibrate on; they must share hardware and stack."""
    from planner.answer.io import load_model

    if not paths:
        raise MeshplanError(
            "runs", "no run reports given", "pass --runs r1.json r2.json … (from `meshplan run --report`)"
        )
    runs = [measured_run(load_model(RunReport, p, f"runs ({p})"), str(p), profile, network) for p in paths]
    for what, key in (("hardware", "device"), ("training stack", "stack")):
        values = {getattr(r, key) for r in runs}
        if len(values) > 1:
            listing = ", ".join(f"{r.path}: {getattr(r, key)}" for r in runs)
            raise MeshplanError(
                "runs",
                f"the runs are of different {what} ({listing}); residuals are fitted per {what}",
                f"calibrate the runs of each {what} separately (one --out file each)",
            )
    return runs


def calibration_gpu(report: RunReport) -> str:
    """What ``Calibration.gpu`` names: the plan's catalog GPU when the run ran on it, else the device."""
    from runtime.report import same_hardware

    if report.predicted_on and same_hardware(report.device, report.predicted_on):
        return report.predicted_on
    return report.device


def live_residuals(runs: list[MeasuredRun], fields: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """The residual fields (of ``fields``, default all) that move at least one run's predicted step time:
    with measured layer times, for example, the compute and kernel residuals do not act (the profile's
    times replace the formula), and with one process ``comm_scale`` does not."""
    from planner.answer.calibrate import FIELDS, predict_step_time

    base = [predict_step_time(r.request, Residuals()) for r in runs]
    probe = {
        "compute_scale": 2.0,
        "memory_scale": 2.0,
        "kernel_overhead_us": 10.0,
        "comm_scale": 2.0,
        "step_overhead_s": 1.0,
    }
    live = []
    for f in fields or FIELDS:
        moved = Residuals(**{f: probe[f]})
        if any(
            abs(predict_step_time(r.request, moved) - b) > 1e-12 * max(b, 1e-9) for r, b in zip(runs, base, strict=True)
        ):
            live.append(f)
    return tuple(live)


def calibrate(runs: list[MeasuredRun], gpu: str, free: tuple[str, ...] | None = None):
    """Fit the residuals on ``runs`` (``planner.answer.calibrate.fit_residuals``: Levenberg–Marquardt on the log
    error, leave-one-out cross-validation; runs of the same configuration left out together). ``free``: the
    residuals to fit (default: every one the runs depend on). Returns (the Calibration, the fit with each run's
    cross-validated prediction)."""
    from planner.answer.calibrate import FIELDS, Observation, fit_residuals

    if free is not None:
        unknown = [f for f in free if f not in FIELDS]
        if unknown:
            raise MeshplanError(
                "free", f"not a residual constant: {', '.join(unknown)}", f"choose among {', '.join(FIELDS)}"
            )
    chosen = live_residuals(runs, free)
    held = [f for f in (free or FIELDS) if f not in chosen]
    configs = len({r.label for r in runs})  # runs of one configuration repeat one equation: they count once
    if configs < len(chosen):
        raise MeshplanError(
            "runs",
            f"{len(runs)} run(s) of {configs} configuration(s) cannot determine the {len(chosen)} residual constants "
            f"they depend on ({', '.join(chosen)})",
            f"give at least {len(chosen)} runs of different configurations (one more for a cross-validated error), "
            f"or fit fewer with --free (e.g. --free {','.join(chosen[-2:])})",
        )
    # runs of one configuration (a plan run several times) are left out together in cross-validation: leaving out
    # one of them alone would leave its twins in, and the error would not be that of an unseen plan
    repeated = configs < len(runs)
    observations = [
        Observation(r.measured_step_time_s, request=r.request, label=r.label, group=r.label if repeated else None)
        for r in runs
    ]
    fit = fit_residuals(observations, free=chosen)
    notes = [f"fitted by `meshplan calibrate` on {len(runs)} run report(s): {', '.join(r.path for r in runs)}"]
    notes.append(f"fitted {', '.join(fit.free) or 'nothing'}; cross-validation: {fit.cross_validation}")
    if held:
        notes.append(f"held at identity (the runs do not depend on them): {', '.join(held)}")
    notes += fit.notes
    cal = fit.calibration(gpu, runs[0].stack, created_at=datetime.now(UTC).isoformat(timespec="seconds"))
    return cal.model_copy(update={"notes": notes}), fit


def table(fit):
    """The per-run table `meshplan calibrate` prints (a rich Table): measured, predicted before and after,
    the error after, and the prediction of the fit that left the run out."""
    from rich.table import Table

    t = Table("run", "measured s", "before s", "error", "after s", "error", "left out s", "error")
    t.columns[0].no_wrap = True
    for o in fit.observations:
        cv = o.cross_validated_s
        t.add_row(
            o.label,
            f"{o.measured_s:.4g}",
            f"{o.before_s:.4g}",
            f"{o.before_s / o.measured_s - 1:+.1%}",
            f"{o.after_s:.4g}",
            f"{o.after_s / o.measured_s - 1:+.1%}",
            "-" if cv is None else f"{cv:.4g}",
            "-" if cv is None else f"{cv / o.measured_s - 1:+.1%}",
        )
    return t


def calibrate_cmd(
    runs: list[Path] = typer.Option(
        ..., "--runs", metavar="FILE", help="RunReport files (`meshplan run --report`): --runs r1.json r2.json …"
    ),
    more_runs: list[Path] | None = typer.Argument(
        None, metavar="FILE", hidden=True, help="The files after the first of --runs."
    ),
    profile: Path | None = typer.Option(
        None, "--profile", help="Layer profile (`meshplan profile model`) replacing each run's own."
    ),
    network: Path | None = typer.Option(
        None, "--network", help="Network profile (`meshplan profile cluster`) replacing each run's own fit."
    ),
    out: Path = typer.Option(..., "--out", help="Where to write the Calibration (JSON)."),
    free: str | None = typer.Option(
        None,
        "--free",
        help="Residuals to fit, comma-separated (default: every one the runs depend on): compute_scale, "
        "memory_scale, kernel_overhead_us, comm_scale, step_overhead_s.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the Calibration as JSON instead of the table."),
) -> None:
    """Fit the cost model's residual constants on your own runs; apply them with --calibration FILE."""
    from planner.answer.io import load_model
    from planner.answer.residual_notes import calibration_note
    from planner.answer.terminal import console, show

    prof = load_model(Profile, profile, "profile") if profile is not None else None
    net = load_model(NetworkProfile, network, "network") if network is not None else None
    runs = [*runs, *(more_runs or [])]  # `--runs a.json b.json`: click gives --runs the first, the rest are arguments
    measured = load_runs(list(runs), prof, net)
    first = load_model(RunReport, runs[0], f"runs ({runs[0]})")
    chosen = tuple(f.strip() for f in free.split(",") if f.strip()) if free else None
    cal, fit = calibrate(measured, calibration_gpu(first), chosen)
    out.write_text(cal.model_dump_json(indent=2))
    if as_json:
        typer.echo(json.dumps(cal.model_dump(mode="json"), indent=2))
        return
    show(table(fit))
    c = console()
    c.print(calibration_note(cal), highlight=False, soft_wrap=True)
    for note in cal.notes:
        c.print(f"note: {note}", highlight=False, soft_wrap=True)
    c.print(
        f"wrote {out}; apply it with `meshplan plan ... --calibration {out}` on {cal.gpu}",
        highlight=False,
        soft_wrap=True,
    )


def register(app: typer.Typer) -> None:
    app.command("calibrate")(calibrate_cmd)
