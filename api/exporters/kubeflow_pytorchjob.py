"""Kubeflow Training Operator ``PyTorchJob`` (``kubeflow.org/v1``), checked against
kubeflow/training-operator ``pkg/apis/kubeflow.org/v1/pytorch_types.go`` (v1.9 line): ``spec.nprocPerNode``
is a string, replica types ``Master``/``Worker``, the container must be named ``pytorch``. The operator
injects ``PET_NNODES``/``PET_NPROC_PER_NODE``/``PET_NODE_RANK``/``PET_MASTER_ADDR``/``PET_MASTER_PORT``,
which torchrun reads, so the container command is a bare ``torchrun <program>``."""

from __future__ import annotations

import yaml

from planner.specs import Plan

from .base import Exporter, Notes, comment_block, geometry, header_lines
from .options import ExportOptions

DEFAULT_IMAGE = "REPLACE-ME/meshplan-train:latest"


def container(options: ExportOptions, name: str, gpus: int, notes: Notes) -> dict:
    if options.image is None:
        notes.warn(f"no --image given: the manifest uses the placeholder image {DEFAULT_IMAGE!r}; set --image")
    return {
        "name": name,
        "image": options.image or DEFAULT_IMAGE,
        "command": ["torchrun", *options.program_args()],
        "resources": {"limits": {"nvidia.com/gpu": gpus}, "requests": {"nvidia.com/gpu": gpus}},
    }


def metadata(options: ExportOptions) -> dict:
    meta: dict = {"name": options.job_name}
    if options.namespace:
        meta["namespace"] = options.namespace
    meta["labels"] = {"app.kubernetes.io/managed-by": "meshplan"}
    return meta


class PyTorchJobExporter(Exporter):
    id = "kubeflow-pytorchjob"
    target = "Kubeflow Training Operator PyTorchJob (kubeflow.org/v1)"
    target_version = "training-operator v1.9 (kubeflow.org/v1)"
    media_type = "application/yaml"
    extension = "yaml"

    def render(self, plan: Plan, options: ExportOptions, notes: Notes) -> str:
        geom = geometry(plan, options)

        def replica(n: int) -> dict:
            return {
                "replicas": n,
                "restartPolicy": "OnFailure",
                "template": {"spec": {"containers": [container(options, "pytorch", geom.nproc_per_node, notes)]}},
            }

        specs = {"Master": replica(1)}
        if geom.nnodes > 1:
            specs["Worker"] = replica(geom.nnodes - 1)
        doc = {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": metadata(options),
            "spec": {
                "nprocPerNode": str(geom.nproc_per_node),
                "runPolicy": {"cleanPodPolicy": "None", "backoffLimit": options.max_restarts},
                "pytorchReplicaSpecs": specs,
            },
        }
        head = comment_block("#", header_lines(plan, self) + ["Apply with: kubectl apply -f " + self.filename(plan, options)],
                             notes.warnings, notes.info)
        return head + "---\n" + yaml.safe_dump(doc, sort_keys=False, width=120)
