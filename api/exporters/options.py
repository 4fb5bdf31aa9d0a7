"""Job-level options of an export: what the plan does not know (image, names, scheduler knobs).

Every field is optional; the plan supplies the rest (node count, GPUs per node). A bad value is a
pydantic ``ValidationError`` naming the field (the CLI and the service turn it into exit code 2 /
HTTP 422), and a value that contradicts the plan is a ``MeshplanError`` raised by the exporter.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

#: Kubernetes object names: RFC 1035 labels (the TrainJob CRD enforces this pattern and ≤ 63 chars).
_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
#: Values that end up inside shell scripts unquoted or in #SBATCH lines: no spaces or shell syntax.
_SAFE_TOKEN = re.compile(r"^[A-Za-z0-9._:/@+=,%-]+$")


class ExportOptions(BaseModel):
    """Job-level parameters of an export (CLI flags ``--image`` …, REST query parameters)."""

    model_config = ConfigDict(extra="forbid")

    image: str | None = Field(
        default=None,
        max_length=500,
        description="Container image (Kubernetes targets; Slurm via pyxis `srun --container-image`).",
    )
    job_name: str = Field(
        default="meshplan-train",
        min_length=1,
        max_length=63,
        description="Job name: Kubernetes metadata.name, Slurm --job-name, rendezvous id.",
    )
    namespace: str | None = Field(default=None, max_length=63, description="Kubernetes namespace.")
    partition: str | None = Field(default=None, max_length=128, description="Slurm partition.")
    nodes: int | None = Field(
        default=None,
        ge=1,
        le=131_072,
        description="Node count; defaults to what the plan needs (must agree with it when given).",
    )
    gpus_per_node: int | None = Field(
        default=None,
        ge=1,
        le=64,
        description="GPUs (processes) per node; defaults to the plan's cluster (must agree with it).",
    )
    rdzv_endpoint: str | None = Field(
        default=None,
        max_length=253,
        description="host or host:port of the c10d rendezvous (torchrun/meshplan targets); "
        "default: $MASTER_ADDR at run time.",
    )
    rdzv_port: int = Field(default=29500, ge=1, le=65535, description="Rendezvous port.")
    max_restarts: int = Field(default=0, ge=0, le=100, description="torchrun --max-restarts.")
    time_limit: str | None = Field(default=None, max_length=32, description="Slurm --time (e.g. 2-00:00:00).")
    runtime_ref: str = Field(
        default="torch-distributed",
        min_length=1,
        max_length=253,
        description="Kubeflow Trainer ClusterTrainingRuntime name.",
    )
    plan_path: str = Field(
        default="plan.json",
        min_length=1,
        max_length=500,
        description="Where the plan file will be on the machines that run the job.",
    )
    command: str | None = Field(
        default=None,
        max_length=4000,
        description="The training program and its arguments as torchrun receives them "
        "(default: `-m runtime.train --plan <plan_path>`, meshplan's bundled runtime).",
    )
    strict: bool = Field(
        default=False,
        description="Turn every warning (something the target cannot express exactly) into an error.",
    )

    @field_validator("job_name")
    @classmethod
    def _job_name(cls, v: str) -> str:
        if not _DNS_LABEL.match(v):
            raise ValueError(
                f"{v!r} is not a DNS label; use lowercase letters, digits and '-', starting with a letter and "
                "not ending with '-', e.g. 'llama3-70b-train'"
            )
        return v

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, v: str | None) -> str | None:
        if v is not None and not _DNS_LABEL.match(v):
            raise ValueError(f"{v!r} is not a DNS label; use lowercase letters, digits and '-', e.g. 'training'")
        return v

    @field_validator("image", "partition", "rdzv_endpoint", "time_limit", "runtime_ref", "plan_path")
    @classmethod
    def _token(cls, v: str | None) -> str | None:
        if v is not None and not _SAFE_TOKEN.match(v):
            raise ValueError(
                f"{v!r} is not a single token; use only letters, digits and ._:/@+=,%- (no spaces, quotes or shell syntax)"
            )
        return v

    @field_validator("command")
    @classmethod
    def _command(cls, v: str | None) -> str | None:
        if v is None:
            return v
        import shlex

        if "\n" in v or "\r" in v:
            raise ValueError("command spans several lines; give the program and its arguments on one line")
        try:
            words = shlex.split(v)
        except ValueError as exc:
            raise ValueError(f"command is not valid shell words ({exc}); quote arguments that hold spaces") from None
        if not words:
            raise ValueError("command is empty; omit it to run meshplan's runtime")
        return v

    def program_args(self) -> list[str]:
        """The words torchrun runs (its positional arguments)."""
        import shlex

        if self.command is not None:
            return shlex.split(self.command)
        return ["-m", "runtime.train", "--plan", self.plan_path]
