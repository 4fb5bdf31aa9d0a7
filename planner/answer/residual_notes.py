"""What the explanation and the plan's notes say of the residuals that priced it, and the check that a
calibration fits the request's GPU and stack."""

from __future__ import annotations

from typing import TYPE_CHECKING

from planner.pricing.residuals import FIELDS, generation, residual_preset, row_key, stack_preset
from planner.specs import Calibration, Residuals
from planner.specs.errors import MeshplanError

if TYPE_CHECKING:
    from planner.compose.context import Context


def describe_residuals(ctx: Context) -> str | None:
    """One line for explanations: the residuals that priced the plan and where they come from (None for
    identity without a calibration: the cited physics alone)."""
    r = ctx.residuals
    changed = ", ".join(
        f"{f} {getattr(r, f):.4g}" for f in FIELDS if getattr(r, f) != Residuals.model_fields[f].default
    )
    if ctx.calibration is not None:
        return calibration_note(ctx.calibration)
    if not changed:
        return None
    from planner.pricing.residuals_builtin import FITS, ROWS

    key = row_key(ROWS, residual_preset(ctx.stack.id), generation(ctx.gpu.id))
    fit = FITS.get(key, {}) if key is not None else {}
    gens = (
        "all the GPU generations it ran on" if key is not None and key[1] == "*" else f"{generation(ctx.gpu.id)} GPUs"
    )
    whose = key[0] if key is not None else residual_preset(ctx.stack.id)
    if whose == "*":  # the generation's row pooled over the stacks (``residuals.row_key``)
        whose = f"{residual_preset(ctx.stack.id)} (none of its own: pooled over the stacks with published runs)"
    return (
        f"built-in residuals for {whose} on {gens}: {changed}, "
        f"fitted on "
        f"{len(fit.get('runs', []))} published runs ({', '.join(fit.get('groups', []))}); leave-one-source-group-out "
        f"error {fit.get('losgo_mape', float('nan')):.1%} (docs/planner.md, Residuals)"
    )


def check_calibration(calibration: Calibration, gpu_id: str, stack_id: str) -> None:
    """A calibration's residuals correct the cost model for the hardware and stack its runs measured:
    applied to another GPU (a CPU fit on an H100, an A100 fit on an H100) they would move every number
    by a factor that belongs to other hardware, silently. So the calibration's ``gpu`` must be the
    cluster's (the same matching as a measured profile's device, ``check_profile_device``) and its stack
    the request's (the same preset; inline overrides of it are allowed)."""
    from planner.answer.request import DEVICELESS, check_profile_device

    same = calibration.gpu.lower() == gpu_id.lower()
    if not same and calibration.gpu.lower() not in DEVICELESS | {"cpu"} and gpu_id.lower() != "cpu":
        for device, catalog_id in ((calibration.gpu, gpu_id), (gpu_id, calibration.gpu)):  # either may be a device name
            try:
                check_profile_device(device, catalog_id)
                same = True
            except MeshplanError:
                pass
    if not same:
        raise MeshplanError(
            "calibration.gpu",
            f"the calibration was fitted on runs on {calibration.gpu!r}, but the cluster's GPU is {gpu_id!r}: its "
            "residuals correct the model for that hardware, not this one",
            f"calibrate on runs of the cluster's GPU (`meshplan run` there, then `meshplan calibrate --runs ...`), "
            f"set cluster.gpu to {calibration.gpu!r}, or leave out the calibration",
        )
    if stack_preset(calibration.stack) != stack_preset(stack_id):
        raise MeshplanError(
            "calibration.stack",
            f"the calibration was fitted on runs of the {calibration.stack!r} training stack, but the request is "
            f"priced for {stack_id!r}: residuals are per stack",
            f"set training.stack to {stack_preset(calibration.stack)!r}, calibrate on runs of "
            f"{stack_preset(stack_id)!r}, or leave out the calibration",
        )


def calibration_note(calibration: Calibration) -> str:
    """One line for a plan's notes and explanation: that it was calibrated, and on what."""
    r = calibration.residuals
    fields = ", ".join(f"{k}={v:.4g}" for k, v in r.model_dump().items() if v != Residuals().model_dump()[k])
    ident = f" {calibration.id}" if calibration.id else ""
    err = []
    if calibration.in_sample_mape is not None:
        err.append(f"in-sample error {calibration.in_sample_mape:.1%}")
    if calibration.cross_validated_mape is not None:
        err.append(f"cross-validated {calibration.cross_validated_mape:.1%}")
    runs = len(calibration.runs)
    return (
        f"calibrated{ident} on {runs} measured run{'s' if runs != 1 else ''} on {calibration.gpu} "
        f"({calibration.stack} stack)" + (f", {', '.join(err)}" if err else "") + f": residuals {fields or 'identity'}"
    )
