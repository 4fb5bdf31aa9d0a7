"""Fit the built-in residual constants on the published runs (issue 11 §3, fitting discipline).

For every published run the cost model can express (``bench/bench_fidelity.py``'s mapping: its
request, stack and measured step time), ONE residual, ``compute_scale`` (``FREE``), is fitted per
(stack preset, GPU generation), per generation pooled over the stacks (``("*", generation)``, from
≥ ``MIN_POOLED_STACKS`` stacks: the fallback for a stack without runs on that generation — since cost model 70
the residual follows the generation more than the stack), and per stack pooled over its generations
(``(stack, "*")``: the fallback for a generation no two stacks ran, V100 and the bundled runtime), with
``planner.answer.calibrate.fit_residuals`` on the physics-only model (identity residuals). Nothing else is fitted.

Leave-one-source-group-out cross-validation (LOSGO): for each source group, the whole table is refitted
without that group's runs and its runs are predicted with the row the planner would then use for them
(``planner.pricing.residuals.row_key``: their (stack, generation) row, else the generation's pooled row, else the
stack's pooled row, else identity). Errors are in the sources' throughput metrics, as ``bench_fidelity``
reports them: measured step ÷ predicted step − 1. ``--alternatives`` also prints the in-sample and LOSGO figures of
the other structures considered (only one of the two fallbacks, a generation fallback pooled over ≥ 1 stack, none;
``comm_scale`` fitted too where a row has ≥ 4 runs from ≥ 2 groups), so the choice can be re-checked after the
physics changes.

Run: ``python bench/fit_residuals.py`` (prints the table and the figures, and writes
``planner/pricing/residuals_builtin.py``; ``--dry-run`` only prints). Deterministic; seconds.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import bench_fidelity as fidelity  # noqa: E402

from planner.answer.calibrate import FitResult, Observation, fit_residuals, predict_step_time  # noqa: E402
from planner.pricing.residuals import generation, residual_preset, row_key  # noqa: E402
from planner.specs import PlanRequest, Residuals  # noqa: E402
from planner.specs.errors import MeshplanError  # noqa: E402
from planner.specs.stacks import resolve  # noqa: E402

OUT = ROOT / "planner" / "pricing" / "residuals_builtin.py"
#: The residuals fitted per row.
FREE: tuple[str, ...] = ("compute_scale",)
#: A generation's pooled row is written only when this many stacks' runs pool into it.
MIN_POOLED_STACKS = 2
#: ``--alternatives``: a row fits ``comm_scale`` too with this many runs from ≥ 2 source groups.
MIN_RUNS_FOR_COMM = 4
#: Significant digits of the residuals written (the figures are computed with the rounded values).
DIGITS = 4

Key = tuple[str, str]


@dataclass(frozen=True)
class Run:
    id: str
    group: str
    key: Key  # (stack preset, GPU generation)
    request: PlanRequest
    measured_step_s: float


def expressed_runs(data: dict[str, Any]) -> list[Run]:
    """The published runs the model expresses (``bench_fidelity.reasons_not_expressible`` empty and
    the planner accepts the request), with their measured step time in seconds."""
    out = []
    for row in data["runs"]:
        if fidelity.reasons_not_expressible(row):
            continue
        if (row["parallel"].get("ep") or 1) > 1:  # MoE rows report their errors; not fitted until MoE is validated
            continue
        try:
            req = fidelity.request(row, data["gpus"])
            measured = fidelity.evaluate(row, data["gpus"]).measured_step_time_s
        except MeshplanError:
            continue
        gen = generation(row["cluster"]["gpu"])
        if gen is None:
            continue
        stack = residual_preset(resolve(fidelity.stack_of(row)).id)
        out.append(Run(row["id"], row["source_group"], (stack, gen), req, measured))
    return out


def error(predicted_step: float, measured_step: float) -> float:
    """The error in the source's throughput metric (tokens/s or TFLOP/s ∝ 1 / step)."""
    return measured_step / predicted_step - 1.0


def mape(errors: Sequence[float]) -> float:
    return sum(abs(e) for e in errors) / len(errors) if errors else math.nan


def round_sig(x: float, digits: int = DIGITS) -> float:
    return float(f"{x:.{digits}g}")


def free_for(runs: Sequence[Run], with_comm: bool = False) -> tuple[str, ...]:
    if with_comm and len(runs) >= MIN_RUNS_FOR_COMM and len({r.group for r in runs}) >= 2:
        return (*FREE, "comm_scale")
    return FREE


def row_keys(runs: Sequence[Run], pooled: str = "both", min_stacks: int = MIN_POOLED_STACKS) -> dict[Key, list[Run]]:
    """The table's rows and their runs, in a stable order: (stack, generation), and the pooled rows —
    (stack, "*") over the generations and ("*", generation) over the stacks, only with ≥ ``min_stacks`` stacks
    (``both``, shipped), or one of them (``stack``, ``generation``: ``--alternatives``), or none."""
    rows: dict[Key, list[Run]] = {}
    for r in sorted(runs, key=lambda r: (r.key, r.id)):
        rows.setdefault(r.key, []).append(r)
    if pooled in ("stack", "both"):
        for r in sorted(runs, key=lambda r: (r.key[0], r.id)):
            rows.setdefault((r.key[0], "*"), []).append(r)
    if pooled in ("generation", "both"):
        pool: dict[Key, list[Run]] = {}
        for r in sorted(runs, key=lambda r: (r.key[1], r.id)):
            if r.key[0] != "meshplan":  # the bundled runtime ran no published run
                pool.setdefault(("*", r.key[1]), []).append(r)
        rows.update({k: v for k, v in pool.items() if len({r.key[0] for r in v}) >= min_stacks})
    return rows


def observations(runs: Sequence[Run]) -> list[Observation]:
    return [Observation(r.measured_step_s, request=r.request, label=r.id, group=r.group) for r in runs]


@dataclass(frozen=True)
class Structure:
    """How the table is built: which rows are pooled, whether ``comm_scale`` is fitted too."""

    pooled: str = "both"  # "both", "stack", "generation" or "none"
    with_comm: bool = False
    min_stacks: int = MIN_POOLED_STACKS  # of a ("*", generation) row

    def describe(self) -> str:
        fallback = {
            "both": f"(*, generation) from ≥ {self.min_stacks} stacks then (stack, *) fallback",
            "generation": f"(*, generation) fallback from ≥ {self.min_stacks} stack{'s' if self.min_stacks > 1 else ''}",
            "stack": "(stack, *) fallback",
            "none": "no fallback",
        }[self.pooled]
        return f"{fallback}, {'compute_scale + comm_scale' if self.with_comm else 'compute_scale'}"


SHIPPED = Structure()
ALTERNATIVES = [
    Structure(p, c, k)
    for c in (False, True)
    for p, k in (
        ("both", MIN_POOLED_STACKS),
        ("stack", MIN_POOLED_STACKS),
        ("generation", MIN_POOLED_STACKS),
        ("generation", 1),
        ("none", 1),
    )
]


def fit_table(runs: Sequence[Run], how: Structure = SHIPPED) -> dict[Key, tuple[Residuals, FitResult]]:
    """Every row's fitted residuals (rounded to ``DIGITS``), physics-only start, no inner CV."""
    table = {}
    for key, rows in row_keys(runs, how.pooled, how.min_stacks).items():
        res = fit_residuals(observations(rows), free=free_for(rows, how.with_comm), cross_validate=False)
        rounded = res.residuals.model_copy(update={f: round_sig(getattr(res.residuals, f)) for f in res.free})
        table[key] = (rounded, res)
    return table


def lookup(table: dict[Key, Any], key: Key) -> Residuals:
    """The row the planner uses for a run (``planner.pricing.residuals.row_key``: its own, the generation's pooled
    row, the stack's pooled row, whichever of them the structure wrote)."""
    k = row_key(table, *key)
    return table[k][0] if k is not None else Residuals()


@dataclass
class Figures:
    physics: dict[str, float]  # run id -> error, identity residuals
    in_sample: dict[str, float]  # with the table fitted on every run
    losgo: dict[str, float]  # with the table fitted without the run's source group


def figures(
    runs: Sequence[Run], table: dict[Key, Any], how: Structure = SHIPPED, log: Callable[[str], None] = lambda s: None
) -> Figures:
    physics = {r.id: error(predict_step_time(r.request, Residuals()), r.measured_step_s) for r in runs}
    in_sample = {r.id: error(predict_step_time(r.request, lookup(table, r.key)), r.measured_step_s) for r in runs}
    losgo = {}
    for group in dict.fromkeys(r.group for r in runs):
        rest = [r for r in runs if r.group != group]
        partial = fit_table(rest, how) if rest else {}
        for r in runs:
            if r.group == group:
                losgo[r.id] = error(predict_step_time(r.request, lookup(partial, r.key)), r.measured_step_s)
        log(f"  LOSGO {group}: refitted on {len(rest)} runs")
    return Figures(physics, in_sample, losgo)


def summary(runs: Sequence[Run], fig: Figures) -> list[tuple[str, int, float, float, float, float]]:
    """(group, runs, physics MAPE, in-sample MAPE, LOSGO MAPE, in-sample max |error|) per source group and
    overall."""
    out = []
    groups = list(dict.fromkeys(r.group for r in runs))
    for g in [*groups, "overall"]:
        ids = [r.id for r in runs if g in ("overall", r.group)]
        out.append(
            (
                g,
                len(ids),
                mape([fig.physics[i] for i in ids]),
                mape([fig.in_sample[i] for i in ids]),
                mape([fig.losgo[i] for i in ids]),
                max(abs(fig.in_sample[i]) for i in ids),
            )
        )
    return out


def alternatives(runs: Sequence[Run]) -> str:
    """In-sample and LOSGO MAPE of each structure considered (the shipped one marked)."""
    lines = [
        "Structures considered (MAPE over every expressed run):",
        f"{'structure':62} {'in-sample':>9} {'LOSGO':>7}",
    ]
    for how in ALTERNATIVES:
        fig = figures(runs, fit_table(runs, how), how)
        ins, lo = mape(list(fig.in_sample.values())), mape(list(fig.losgo.values()))
        mark = "  (shipped)" if how == SHIPPED else ""
        lines.append(f"{how.describe():62} {100 * ins:8.1f}% {100 * lo:6.1f}%{mark}")
    return "\n".join(lines)


def module_text(
    table: dict[Key, tuple[Residuals, FitResult]], runs: Sequence[Run], fig: Figures, data_path: Path, date: str
) -> str:
    digest = hashlib.sha256(data_path.read_bytes()).hexdigest()[:16]
    rows_by_key = row_keys(runs)
    lines = [
        '"""Built-in residual constants of the cost model per (stack preset, GPU generation), fitted on published runs.',
        "",
        "GENERATED by ``python bench/fit_residuals.py`` — do not edit by hand; re-run it after the physics changes.",
        "``planner.pricing.residuals.builtin_residuals`` reads ``ROWS``: the (stack, generation) row, else the generation's",
        'row pooled over the published stacks (``("*", generation)``), else the stack\'s row pooled over its generations',
        '(``(stack, "*")``), else identity. ``FITS`` records, per row, the runs it was',
        "fitted on, the free residuals, and the errors in the sources' throughput metrics (mean |error|) with",
        "identity residuals (physics), with the row (in-sample) and leave-one-source-group-out (LOSGO: each",
        'run predicted by the table refitted without its source group). See docs/planner.md, "Residuals".',
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from typing import Any",
        "",
        f"FITTED_ON = {date!r}",
        f"DATA = {'bench/data/published_runs.json sha256:' + digest!r}",
        "",
        "ROWS: dict[tuple[str, str], dict[str, float]] = {",
    ]
    for key, (res, fit) in table.items():
        vals = ", ".join(f"{f!r}: {getattr(res, f)!r}" for f in fit.free)
        lines.append(f"    {key!r}: {{{vals}}},")
    lines += ["}", "", "FITS: dict[tuple[str, str], dict[str, Any]] = {"]
    for key, (_, fit) in table.items():
        ids = [r.id for r in rows_by_key[key]]
        lines.append(f"    {key!r}: {{")
        lines.append(f"        'free': {fit.free!r},")
        lines.append(f"        'groups': {sorted({r.group for r in rows_by_key[key]})!r},")
        lines.append(f"        'runs': {ids!r},")
        lines.append(f"        'physics_mape': {round(mape([fig.physics[i] for i in ids]), 4)!r},")
        lines.append(f"        'in_sample_mape': {round(mape([fig.in_sample[i] for i in ids]), 4)!r},")
        lines.append(f"        'losgo_mape': {round(mape([fig.losgo[i] for i in ids]), 4)!r},")
        lines.append("    },")
    lines += ["}", "", "#: Per source group and overall: (runs, physics MAPE, in-sample MAPE, LOSGO MAPE)."]
    lines.append("SUMMARY: dict[str, tuple[int, float, float, float]] = {")
    for g, n, ph, ins, lo, _ in summary(runs, fig):
        lines.append(f"    {g!r}: ({n}, {round(ph, 4)!r}, {round(ins, 4)!r}, {round(lo, 4)!r}),")
    lines += ["}", ""]
    return "\n".join(lines)


def write(path: Path, text: str) -> None:
    path.write_text(text)
    ruff = Path(sys.executable).with_name("ruff")
    if ruff.exists():  # the repo's formatter, so the generated module is as ruff writes it
        subprocess.run([str(ruff), "format", "-q", str(path)], check=False)


def report(table: dict[Key, tuple[Residuals, FitResult]], runs: Sequence[Run], fig: Figures) -> str:
    rows_by_key = row_keys(runs)
    lines = [
        "Built-in residuals per (stack, GPU generation); '*' = pooled over the generations or the stacks (fallbacks)"
    ]
    lines.append(
        f"{'stack':12} {'gen':9} {'runs':>4} {'groups':>6} {'compute_scale':>13} {'comm_scale':>10} "
        f"{'physics':>8} {'in-sample':>9} {'LOSGO':>7}"
    )
    for key, (res, fit) in table.items():
        ids = [r.id for r in rows_by_key[key]]
        comm = f"{res.comm_scale:10.4g}" if "comm_scale" in fit.free else f"{'—':>10}"
        lines.append(
            f"{key[0]:12} {key[1]:9} {len(ids):4d} {len({r.group for r in rows_by_key[key]}):6d} "
            f"{res.compute_scale:13.4g} {comm} {100 * mape([fig.physics[i] for i in ids]):7.1f}% "
            f"{100 * mape([fig.in_sample[i] for i in ids]):8.1f}% {100 * mape([fig.losgo[i] for i in ids]):6.1f}%"
        )
    lines.append("")
    lines.append("Per run: error in the source's metric (measured step ÷ predicted step − 1)")
    lines.append(f"{'run':48} {'group':22} {'row':22} {'physics':>8} {'built-in':>8} {'LOSGO':>8}")
    for r in runs:
        lines.append(
            f"{r.id:48} {r.group:22} {r.key[0] + '/' + r.key[1]:22} {100 * fig.physics[r.id]:+7.1f}% "
            f"{100 * fig.in_sample[r.id]:+7.1f}% {100 * fig.losgo[r.id]:+7.1f}%"
        )
    lines.append("")
    lines.append(
        "Per source group: MAPE physics only / with built-in residuals (in-sample) / LOSGO; max |error| in-sample"
    )
    lines.append(f"{'source group':28} {'runs':>4} {'physics':>8} {'in-sample':>9} {'LOSGO':>7} {'max':>7}")
    for g, n, ph, ins, lo, mx in summary(runs, fig):
        lines.append(f"{g:28} {n:4d} {100 * ph:7.1f}% {100 * ins:8.1f}% {100 * lo:6.1f}% {100 * mx:6.1f}%")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=fidelity.DATA)
    ap.add_argument(
        "--out", type=Path, default=OUT, help="the module to write (default planner/pricing/residuals_builtin.py)"
    )
    ap.add_argument("--dry-run", action="store_true", help="print only; write nothing")
    ap.add_argument("--date", default=datetime.now(UTC).date().isoformat(), help="the date recorded in the module")
    ap.add_argument("--alternatives", action="store_true", help="also print the figures of the other structures")
    args = ap.parse_args(argv)
    data = fidelity.load(args.data)
    runs = expressed_runs(data)
    table = fit_table(runs)
    fig = figures(runs, table)
    print(report(table, runs, fig))
    if args.alternatives:
        print()
        print(alternatives(runs))
    if not args.dry_run:
        write(args.out, module_text(table, runs, fig, args.data, args.date))
        print(f"\nwrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
