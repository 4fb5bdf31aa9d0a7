"""Kubeflow Training Operator ``PyTorchJob`` (``kubeflow.org/v1``), checked against
kubeflow/training-operator ``pkg/apis/kubeflow.org/v1/pytorch_types.go`` (v1.9 line): ``spec.nprocPerNode``
is a string, replica types ``Master``/``Worker``, the container must be named ``pytorch``. The operator
injects ``PET_NNODES``/``PET_NPROC_PER_NODE``/``PET_NODE_RANK``/``PET_MASTER_ADDR``/``PET_MASTER_PORT``,
which torchrun reads, so the container command is a bare ``torchrun <program>``."""

from __future__ import annotations

import json
import posixpath

import yaml

from planner.specs import Plan

from .base import Exporter, Notes, comment_block, geometry, header_lines, layout_env
from .options import ExportOptions

DEFAULT_IMAGE = "REPLACE-ME/meshplan-train:latest"
#: Where the plan's ConfigMap is mounted when ``plan_path`` is relative.
PLAN_MOUNT_DIR = "/etc/meshplan"
#: Kubernetes refuses ConfigMaps over 1 MiB.
CONFIGMAP_LIMIT = 1024 * 1024
PLAN_VOLUME = "meshplan-plan"


class _LiteralDumper(yaml.SafeDumper):
    """Multi-line strings (the plan file) as literal ``|`` blocks: the plan stays readable JSON."""


_LiteralDumper.add_representer(
    str, lambda d, v: d.represent_scalar("tag:yaml.org,2002:str", v, style="|" if "\n" in v else None)
)


def dump_configmap(doc: dict) -> str:
    return yaml.dump(doc, Dumper=_LiteralDumper, sort_keys=False, width=120)


def mounted_plan_path(options: ExportOptions) -> str:
    """The plan file's path inside the pod: ``plan_path`` if absolute, else under ``PLAN_MOUNT_DIR``."""
    if options.plan_path.startswith("/"):
        return options.plan_path
    return posixpath.join(PLAN_MOUNT_DIR, posixpath.basename(options.plan_path))


def configmap_name(options: ExportOptions) -> str:
    return f"{options.job_name}-plan"


def plan_configmap(plan: Plan, options: ExportOptions, notes: Notes) -> dict:
    """The plan as a ConfigMap (a second YAML document), mounted into every pod at ``mounted_plan_path``."""
    text = json.dumps(plan.model_dump(mode="json"), indent=1) + "\n"
    if len(text.encode()) > CONFIGMAP_LIMIT:
        notes.warn(
            f"the plan file is {len(text.encode())} bytes, over Kubernetes' 1 MiB ConfigMap limit; "
            "store it elsewhere (e.g. bake it into the image) and point --plan-path at it"
        )
    meta = {"name": configmap_name(options)}
    if options.namespace:
        meta["namespace"] = options.namespace
    meta["labels"] = {"app.kubernetes.io/managed-by": "meshplan"}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta,
        "data": {posixpath.basename(mounted_plan_path(options)): text},
    }


def plan_volume(options: ExportOptions) -> dict:
    return {"name": PLAN_VOLUME, "configMap": {"name": configmap_name(options)}}


def plan_env(plan: Plan, options: ExportOptions) -> list[dict]:
    """The layout variables (docs/exports.md) as a container ``env`` list; MESHPLAN_PLAN is the mount."""
    return [{"name": k, "value": v} for k, v in layout_env(plan, mounted_plan_path(options)).items()]


def plan_mount(options: ExportOptions) -> dict:
    return {"name": PLAN_VOLUME, "mountPath": posixpath.dirname(mounted_plan_path(options)), "readOnly": True}


def program_args(options: ExportOptions) -> list[str]:
    """torchrun's program: the user's ``--command``, or the runtime reading the mounted plan."""
    return options.model_copy(update={"plan_path": mounted_plan_path(options)}).program_args()


def container(plan: Plan, options: ExportOptions, name: str, gpus: int, notes: Notes) -> dict:
    if options.image is None:
        notes.warn(f"no --image given: the manifest uses the placeholder image {DEFAULT_IMAGE!r}; set --image")
    return {
        "name": name,
        "image": options.image or DEFAULT_IMAGE,
        "command": ["torchrun", *program_args(options)],
        "env": plan_env(plan, options),
        "volumeMounts": [plan_mount(options)],
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
    runs_command = True  # --command replaces meshplan's runtime

    def render(self, plan: Plan, options: ExportOptions, notes: Notes) -> str:
        geom = geometry(plan, options)

        def replica(n: int) -> dict:
            return {
                "replicas": n,
                "restartPolicy": "OnFailure",
                "template": {
                    "spec": {
                        "containers": [container(plan, options, "pytorch", geom.nproc_per_node, notes)],
                        "volumes": [plan_volume(options)],
                    }
                },
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
        configmap = plan_configmap(plan, options, notes)
        head = comment_block(
            "#", header_lines(plan, self) + kube_lines(self, plan, options, notes), notes.warnings, notes.info
        )
        return head + "---\n" + yaml.safe_dump(doc, sort_keys=False, width=120) + "---\n" + dump_configmap(configmap)


def kube_lines(exporter: Exporter, plan: Plan, options: ExportOptions, notes: Notes) -> list[str]:
    return [
        f"Apply with: kubectl apply -f {notes.out_name or exporter.filename(plan, options)}",
        f"The plan ships as ConfigMap {configmap_name(options)} (second document), mounted at "
        f"{mounted_plan_path(options)} = $MESHPLAN_PLAN.",
    ]
