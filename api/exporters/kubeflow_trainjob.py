"""Kubeflow Trainer v2 ``TrainJob`` (``trainer.kubeflow.org/v1alpha1``), checked against
kubeflow/trainer ``pkg/apis/trainer/v1alpha1/trainjob_types.go`` at commit 0015772c (2026):
``spec.runtimeRef`` {name, apiGroup, kind}, ``spec.trainer`` {image, command, numNodes,
numProcPerNode (an integer now, no longer int-or-string), resourcesPerNode, env}; pod-level changes go
through ``spec.runtimePatches`` (which replaced ``podTemplateOverrides`` in 2026): here the volume of
the plan's ConfigMap and its mount in the trainer container ``node`` (``ContainerPatch.volumeMounts``).
The torch runtime injects ``PET_*`` variables that torchrun reads."""

from __future__ import annotations

import yaml

from planner.specs import Plan

from .base import Exporter, Notes, comment_block, geometry, header_lines
from .kubeflow_pytorchjob import (
    dump_configmap,
    kube_lines,
    metadata,
    plan_configmap,
    plan_env,
    plan_mount,
    plan_volume,
    program_args,
)
from .options import ExportOptions


class TrainJobExporter(Exporter):
    id = "kubeflow-trainjob"
    target = "Kubeflow Trainer v2 TrainJob (trainer.kubeflow.org/v1alpha1)"
    target_version = "Kubeflow Trainer v2, kubeflow/trainer@0015772c (2026)"
    media_type = "application/yaml"
    extension = "yaml"
    runs_command = True  # --command replaces meshplan's runtime

    def render(self, plan: Plan, options: ExportOptions, notes: Notes) -> str:
        geom = geometry(plan, options)
        if options.image is None:
            notes.note("no --image given: the TrainJob uses the runtime's default image")
        trainer: dict = {}
        if options.image:
            trainer["image"] = options.image
        trainer |= {
            "command": ["torchrun", *program_args(options)],
            "env": plan_env(plan, options),
            "numNodes": geom.nnodes,
            "numProcPerNode": geom.nproc_per_node,
            "resourcesPerNode": {
                "limits": {"nvidia.com/gpu": geom.nproc_per_node},
                "requests": {"nvidia.com/gpu": geom.nproc_per_node},
            },
        }
        doc = {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": metadata(options),
            "spec": {
                "runtimeRef": {
                    "apiGroup": "trainer.kubeflow.org",
                    "kind": "ClusterTrainingRuntime",
                    "name": options.runtime_ref,
                },
                "trainer": trainer,
                "runtimePatches": [runtime_patch(options)],
            },
        }
        configmap = plan_configmap(plan, options, notes)
        head = comment_block(
            "#", header_lines(plan, self) + kube_lines(self, plan, options, notes), notes.warnings, notes.info
        )
        return head + "---\n" + yaml.safe_dump(doc, sort_keys=False, width=120) + "---\n" + dump_configmap(configmap)


def runtime_patch(options: ExportOptions) -> dict:
    """Mount the plan's ConfigMap into the trainer pods (``spec.runtimePatches``: manager, then the
    JobSet's replicated job ``node`` and its container ``node``, as the torch runtimes name them)."""
    return {
        "manager": "meshplan",
        "trainingRuntimeSpec": {
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "template": {
                                "spec": {
                                    "template": {
                                        "spec": {
                                            "volumes": [plan_volume(options)],
                                            "containers": [{"name": "node", "volumeMounts": [plan_mount(options)]}],
                                        }
                                    }
                                }
                            },
                        }
                    ]
                }
            }
        },
    }
