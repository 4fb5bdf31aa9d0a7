"""The worker's arguments, declared once: ``python -m runtime.train`` parses them (argparse), and
``meshplan run`` offers each as its own option and forwards it to the workers it launches. No PyTorch
here: both commands import this before deciding to start anything."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.specs.errors import MeshplanError


@dataclass(frozen=True)
class WorkerArg:
    """One option of the worker: ``--flag VALUE``, or a bare ``--flag`` switch when ``type`` is bool."""

    flag: str
    type: type  # int, float, str, Path (a file or folder), or bool (a switch, off by default)
    default: Any
    help: str
    min: float | None = None  # smallest accepted value (ints, floats)
    required: bool = False

    @property
    def dest(self) -> str:
        return self.flag[2:].replace("-", "_")


WORKER_ARGS: tuple[WorkerArg, ...] = (
    WorkerArg("--plan", Path, None, "Plan or PlanResponse JSON/YAML (`meshplan plan --json`).", required=True),
    WorkerArg("--plan-index", int, 0, "Which plan of a PlanResponse (0 = best).", min=0),
    WorkerArg("--steps", int, 10, "Optimizer steps to run (after a resume: more steps).", min=0),
    WorkerArg("--data", Path, None, "Flat numpy token file (memmap); default: seeded synthetic tokens."),
    WorkerArg("--data-dtype", str, "uint16", "Token dtype of --data."),
    WorkerArg("--report", Path, None, "Write the RunReport JSON here."),
    WorkerArg("--checkpoint-dir", Path, None, "Save DCP checkpoints under this folder."),
    WorkerArg("--save-every", int, 0, "Save every K steps (and after the last); 0: only at the end.", min=0),
    WorkerArg("--resume", Path, None, "Checkpoint folder to resume from (any plan saved it)."),
    WorkerArg("--seed", int, 0, "Random seed."),
    WorkerArg("--lr", float, 1e-3, "Learning rate (AdamW)."),
    WorkerArg("--max-grad-norm", float, 1.0, "Global gradient-norm clip; ≤ 0 disables."),
    WorkerArg(
        "--profile",
        Path,
        None,
        "Layer profile of this run's hardware (`meshplan profile model --device cpu`) "
        "for the prediction the run is compared with; default: measured after the run.",
    ),
    WorkerArg(
        "--network",
        Path,
        None,
        "Network profile of this run's process group (`meshplan profile cluster` with the run's "
        "--nproc-per-node: with more processes than cores a fit of fewer processes misses their contention); "
        "default: a quick fit measured after the run.",
    ),
    WorkerArg(
        "--compile",
        bool,
        False,
        "Compile each transformer block with torch.compile (after TP and recomputation, before data "
        "parallelism, as torchtitan does); the first steps pay the compilation.",
    ),
)


def parser(prog: str = "python -m runtime.train") -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description="Train a meshplan Plan on this rank.")
    for a in WORKER_ARGS:
        if a.type is bool:
            ap.add_argument(a.flag, action="store_true", default=a.default, help=a.help)
            continue
        ap.add_argument(
            a.flag, type=str if a.type is Path else a.type, default=a.default, required=a.required, help=a.help
        )
    return ap


def check(values: dict[str, Any]) -> None:
    """The declared lower bounds, as errors that name the flag and the fix (every rank, before any work)."""
    for a in WORKER_ARGS:
        value = values.get(a.dest)
        if a.min is not None and value is not None and value < a.min:
            raise MeshplanError(a.flag, f"must be ≥ {a.min:g} (got {value})", f"pass {a.flag} a value ≥ {a.min:g}")


def check_with_plan(values: dict[str, Any], plan: Any) -> None:
    """The worker options that depend on the plan (a ``planner.specs.Plan``), checked where ``check`` is."""
    if values.get("compile") and plan.parallel.recompute == "selective":
        # A compiled block traces the attention core's checkpoint hooks into its graph; backward then
        # recomputes the core eagerly and torch.utils.checkpoint finds different saved tensors.
        raise MeshplanError(
            "--compile",
            "per-block torch.compile does not support selective recomputation (the checkpointed attention "
            "core inside a compiled block is recomputed with other tensors than it saved)",
            "drop --compile, or plan with recompute none or full",
        )


def worker_argv(values: dict[str, Any]) -> list[str]:
    """``--flag value`` for every worker option set in ``values`` (keyed by ``dest``), in declaration
    order: what ``meshplan run`` hands to each worker."""
    argv = []
    for a in WORKER_ARGS:
        value = values.get(a.dest)
        if a.type is bool:
            argv += [a.flag] if value else []
        elif value is not None:
            argv += [a.flag, str(value)]
    return argv
