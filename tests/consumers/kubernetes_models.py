"""The Kubeflow exports read by the Kubernetes and Kubeflow Python clients' own models: the job
document as ``KubeflowOrgV1PyTorchJob`` (kubeflow-training 1.9.4, its ``ApiClient`` deserializer, with
the Kubernetes client's pod template models) or ``TrainerV1alpha1TrainJob`` (kubeflow-trainer-api 2.3.0,
pydantic), the plan's ConfigMap as the Kubernetes client's ``V1ConfigMap`` (kubernetes 35.0.0). Each
must serialize back to what the file says (a key the model does not know would be dropped: that fails,
naming the key; resource quantities may come back as strings). Then, on the typed objects: every
container that runs the job mounts a volume of the ConfigMap's name, and ``MESHPLAN_PLAN`` (and the
runtime's ``--plan``) is that mount's path joined with a key of the ConfigMap's data.
Item: ``{"id", "path", "kind"}``; ``kind`` is ``PyTorchJob`` or ``TrainJob``."""

from __future__ import annotations

import json
import posixpath
from typing import Any

import yaml
from _common import run
from kubeflow.training import ApiClient as TrainingApiClient
from kubeflow_trainer_api.models import TrainerV1alpha1TrainJob
from kubernetes.client import ApiClient


class _Response:
    """What ``ApiClient.deserialize`` reads: a body with ``.data``."""

    def __init__(self, doc: dict) -> None:
        self.data = json.dumps(doc)


def differences(written: Any, read: Any, path: str = "") -> list[str]:
    """Where the model's serialization differs from the file (quantities compare as strings)."""
    if isinstance(written, dict) and isinstance(read, dict):
        out = [f"{path}/{k}: not in the model" for k in written if k not in read]
        out += [f"{path}/{k}: added by the model" for k in read if k not in written]
        for k in written.keys() & read.keys():
            out += differences(written[k], read[k], f"{path}/{k}")
        return out
    if isinstance(written, list) and isinstance(read, list) and len(written) == len(read):
        return [d for i, (w, r) in enumerate(zip(written, read)) for d in differences(w, r, f"{path}[{i}]")]
    quantity = "/resources/" in path and str(written) == str(read)
    return [] if written == read or quantity else [f"{path}: {written!r} read back as {read!r}"]


def _round_trip(kind: str, written: dict, read: dict) -> None:
    diff = differences(written, read)
    if diff:
        raise ValueError(f"{kind} does not read back as written: " + "; ".join(diff))


def _mounted_plan(pod_volumes, container, env: dict[str, str], configmap) -> str:
    """The plan file's path in the container, checked against the ConfigMap and MESHPLAN_PLAN."""
    volumes = {v.name: v for v in pod_volumes or []}
    name = configmap.metadata.name
    for mount in container.volume_mounts or []:
        volume = volumes.get(mount.name)
        if volume is None:
            raise ValueError(f"container {container.name!r} mounts volume {mount.name!r}, which the pod does not have")
        if volume.config_map is not None and volume.config_map.name == name:
            paths = {posixpath.join(mount.mount_path, key) for key in configmap.data}
            if env.get("MESHPLAN_PLAN") not in paths:
                raise ValueError(f"MESHPLAN_PLAN={env.get('MESHPLAN_PLAN')!r} is not the mounted plan file ({paths})")
            return env["MESHPLAN_PLAN"]
    raise ValueError(f"container {container.name!r} does not mount ConfigMap {name!r}")


def check(item: dict[str, Any]) -> dict[str, Any]:
    with open(item["path"]) as f:
        job_doc, cm_doc = yaml.safe_load_all(f)
    core = ApiClient()
    configmap = core.deserialize(_Response(cm_doc), "V1ConfigMap")
    _round_trip("V1ConfigMap", cm_doc, core.sanitize_for_serialization(configmap))
    facts: dict[str, Any] = {"configmap": configmap.metadata.name, "plan_files": dict(configmap.data)}
    if item["kind"] == "PyTorchJob":
        client = TrainingApiClient()
        job = client.deserialize(_Response(job_doc), "KubeflowOrgV1PyTorchJob")
        _round_trip("KubeflowOrgV1PyTorchJob", job_doc, client.sanitize_for_serialization(job))
        replicas, mounted = {}, set()
        for role, spec in job.spec.pytorch_replica_specs.items():
            replicas[role] = spec.replicas
            pod = spec.template.spec
            (container,) = [c for c in pod.containers if c.name == "pytorch"]
            env = {e.name: e.value for e in container.env or []}
            mounted.add(_mounted_plan(pod.volumes, container, env, configmap))
            facts["command"] = container.command
            facts["gpus"] = container.resources.limits["nvidia.com/gpu"]
        facts |= {"replicas": replicas, "nproc_per_node": job.spec.nproc_per_node, "mounted": sorted(mounted)}
    else:
        job = TrainerV1alpha1TrainJob.from_dict(job_doc)
        _round_trip("TrainerV1alpha1TrainJob", job_doc, job.to_dict())
        trainer = job.spec.trainer
        env = {e.name: e.value for e in trainer.env or []}
        mounted = set()
        for patch in job.spec.runtime_patches or []:
            for rjob in patch.training_runtime_spec.template.spec.replicated_jobs or []:
                pod = rjob.template.spec.template.spec
                for container in pod.containers or []:
                    if container.name == "node":
                        mounted.add(_mounted_plan(pod.volumes, container, env, configmap))
        if not mounted:
            raise ValueError("no runtime patch mounts the plan into the trainer container 'node'")
        facts |= {
            "num_nodes": trainer.num_nodes,
            "nproc_per_node": trainer.num_proc_per_node,
            "gpus": trainer.resources_per_node.to_dict()["limits"]["nvidia.com/gpu"],
            "runtime_ref": job.spec.runtime_ref.name,
            "command": trainer.command,
            "mounted": sorted(mounted),
        }
    return facts


if __name__ == "__main__":
    run(check, ["kubernetes", "kubeflow-training", "kubeflow-trainer-api"])
