"""`meshplan export --plan plan.json --format FMT [--out FILE] [job options]`."""

from __future__ import annotations

from pathlib import Path

import typer

from planner.answer.io import load_plan

#: The flag of each ExportOptions field (tests/test_exporters.py checks that every field has its flag,
#: with the same default, and nothing else is forwarded).
OPTION_FLAGS = {
    "image": "--image",
    "job_name": "--job-name",
    "namespace": "--namespace",
    "partition": "--partition",
    "nodes": "--nodes",
    "gpus_per_node": "--gpus-per-node",
    "rdzv_endpoint": "--rdzv-endpoint",
    "rdzv_port": "--rdzv-port",
    "max_restarts": "--max-restarts",
    "time_limit": "--time",
    "runtime_ref": "--runtime-ref",
    "plan_path": "--plan-path",
    "command": "--command",
    "strict": "--strict",
}


def export_command(
    plan: Path = typer.Option(..., "--plan", help="Plan or PlanResponse JSON/YAML (from `meshplan plan --json`)."),
    fmt: str = typer.Option(..., "--format", "-f", help="Export format (see --list-formats)."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Write here instead of stdout."),
    index: int = typer.Option(0, "--index", min=0, help="Which plan of a PlanResponse (0 = best)."),
    image: str | None = typer.Option(None, "--image", help="Container image."),
    job_name: str = typer.Option("meshplan-train", "--job-name", help="Job name (DNS label)."),
    namespace: str | None = typer.Option(None, "--namespace", help="Kubernetes namespace."),
    partition: str | None = typer.Option(None, "--partition", help="Slurm partition."),
    nodes: int | None = typer.Option(None, "--nodes", help="Node count (must match the plan)."),
    gpus_per_node: int | None = typer.Option(None, "--gpus-per-node", help="GPUs per node (must match the plan)."),
    rdzv_endpoint: str | None = typer.Option(None, "--rdzv-endpoint", help="Rendezvous host[:port]."),
    rdzv_port: int = typer.Option(29500, "--rdzv-port", help="Rendezvous port."),
    max_restarts: int = typer.Option(0, "--max-restarts", help="torchrun --max-restarts."),
    time_limit: str | None = typer.Option(None, "--time", help="Slurm time limit."),
    runtime_ref: str = typer.Option("torch-distributed", "--runtime-ref", help="Kubeflow Trainer runtime name."),
    plan_path: str = typer.Option("plan.json", "--plan-path", help="The plan file's path on the cluster."),
    command: str | None = typer.Option(
        None, "--command", help="Program + args for torchrun (default: meshplan's runtime)."
    ),
    strict: bool = typer.Option(False, "--strict", help="Fail instead of exporting with warnings."),
) -> None:
    """Export a plan for a scheduler or training stack (Slurm, Kubeflow, Megatron-LM, DeepSpeed, torchtitan…)."""
    from pydantic import ValidationError

    from api.exporters import export
    from api.exporters.options import ExportOptions
    from planner.specs.errors import explain

    given = locals()
    try:
        options = ExportOptions(**{field: given[field] for field in OPTION_FLAGS})
    except ValidationError as exc:
        raise explain(exc, model=ExportOptions, flags=OPTION_FLAGS) from None
    result = export(load_plan(plan, index), fmt, options, out_name=str(out) if out is not None else None)
    for w in result.warnings:
        typer.echo(f"warning: {w}", err=True)
    if out is None:
        typer.echo(result.content, nl=False)
    else:
        out.write_text(result.content)
        typer.echo(f"wrote {out} ({result.media_type}; suggested name {result.filename})", err=True)


def export_formats_command() -> None:
    """List the export formats, the training stack each runs and the target version each was written for."""
    from api.exporters import export_formats

    for f in export_formats():
        typer.echo(f"{f['id']:<22} {f['media_type']:<22} {f['stack']:<11} {f['target_version']}")


def register(app: typer.Typer) -> None:
    app.command("export")(export_command)
    app.command("export-formats")(export_formats_command)
