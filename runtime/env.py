"""The plan's layout as a launched program sees it: the ``MESHPLAN_*`` variables every launcher export
sets (``api.exporters.base.layout_env``; docs/exports.md), read back into a ``Layout``, the plan, and a
DeviceMesh with the runtime's dims ``("pp", "dp", "tp")`` (``("pp", "dp", "cp", "tp")`` when ``MESHPLAN_CP`` > 1:
``planner.specs.layout``):

    from runtime.env import mesh_from_env, layout_from_env
    layout = layout_from_env()          # tp, pp, dp, micro_batch_size, schedule, stage_layers, ...
    mesh = mesh_from_env()              # call after torch.distributed is initialised (or let it init)
    tp_mesh, dp_mesh = mesh["tp"], mesh["dp"]
    emesh = expert_mesh_from_env()      # a mixture of experts: ("pp", "edp", "ep"), MESHPLAN_EP carved from dp

Bad or missing values are ``MeshplanError``s naming the variable and the fix."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from planner.specs.config import CP_COMM_INFO
from planner.specs.errors import MeshplanError
from planner.specs.layout import mesh_dims

MESH_DIMS = ("pp", "dp", "tp")  # without context parallelism; see Layout.mesh_dims


@dataclass(frozen=True)
class Layout:
    plan_path: str | None
    tp: int
    pp: int
    dp: int
    micro_batch_size: int
    num_microbatches: int
    global_batch_size: int
    seq_len: int
    schedule: str
    virtual_stages: int
    stage_layers: tuple[int, ...]
    recompute: str
    sequence_parallel: bool
    zero_stage: int
    precision: str
    cp: int = 1
    cp_comm: str = "p2p"
    ep: int = 1  # expert parallelism (MESHPLAN_EP; absent in exports written before issue 23: 1)
    etp: int = 1

    @property
    def world_size(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    @property
    def mesh_dims(self) -> tuple[str, ...]:
        return mesh_dims(self.cp)

    @property
    def mesh_shape(self) -> tuple[int, ...]:
        sizes = {"pp": self.pp, "dp": self.dp, "cp": self.cp, "tp": self.tp}
        return tuple(sizes[d] for d in self.mesh_dims)


def _get(env: Mapping[str, str], name: str) -> str:
    value = env.get(name)
    if value is None or value == "":
        raise MeshplanError(
            name,
            "is not set",
            "launch through a meshplan export (torchrun, Slurm, Kubeflow), "
            "or export the MESHPLAN_* variables listed in docs/exports.md",
        )
    return value


def _int(env: Mapping[str, str], name: str, lo: int = 1) -> int:
    value = _get(env, name)
    try:
        n = int(value)
    except ValueError:
        raise MeshplanError(name, f"{value!r} is not an integer", f"set {name} to an integer ≥ {lo}") from None
    if n < lo:
        raise MeshplanError(name, f"must be ≥ {lo} (got {n})", f"set {name} to an integer ≥ {lo}")
    return n


def layout_from_env(env: Mapping[str, str] | None = None) -> Layout:
    """The ``MESHPLAN_*`` layout variables, checked (degrees ≥ 1, global batch = mbs × micro-batches × dp)."""
    env = os.environ if env is None else env
    layers = _get(env, "MESHPLAN_STAGE_LAYERS")
    try:
        stage_layers = tuple(int(x) for x in layers.split(","))
    except ValueError:
        raise MeshplanError(
            "MESHPLAN_STAGE_LAYERS",
            f"{layers!r} is not a comma-separated list of integers",
            "set it to one layer count per model chunk, e.g. 16,16",
        ) from None
    sp = _get(env, "MESHPLAN_SEQUENCE_PARALLEL")
    if sp not in ("0", "1"):
        raise MeshplanError("MESHPLAN_SEQUENCE_PARALLEL", f"{sp!r} is not 0 or 1", "set it to 0 or 1")
    cp_comm = env.get("MESHPLAN_CP_COMM") or "p2p"  # both absent in exports written before issue 24: no CP
    if cp_comm not in CP_COMM_INFO:
        raise MeshplanError(
            "MESHPLAN_CP_COMM", f"{cp_comm!r} is not a cp_comm", f"set it to one of {', '.join(CP_COMM_INFO)}"
        )
    layout = Layout(
        plan_path=env.get("MESHPLAN_PLAN") or None,
        tp=_int(env, "MESHPLAN_TP"),
        pp=_int(env, "MESHPLAN_PP"),
        dp=_int(env, "MESHPLAN_DP"),
        micro_batch_size=_int(env, "MESHPLAN_MICRO_BATCH_SIZE"),
        num_microbatches=_int(env, "MESHPLAN_NUM_MICROBATCHES"),
        global_batch_size=_int(env, "MESHPLAN_GLOBAL_BATCH_SIZE"),
        seq_len=_int(env, "MESHPLAN_SEQ_LEN"),
        schedule=_get(env, "MESHPLAN_SCHEDULE"),
        virtual_stages=_int(env, "MESHPLAN_VIRTUAL_STAGES"),
        stage_layers=stage_layers,
        recompute=_get(env, "MESHPLAN_RECOMPUTE"),
        sequence_parallel=sp == "1",
        zero_stage=_int(env, "MESHPLAN_ZERO_STAGE", 0),
        precision=_get(env, "MESHPLAN_PRECISION"),
        cp=_int(env, "MESHPLAN_CP") if env.get("MESHPLAN_CP") else 1,
        cp_comm=cp_comm,
        ep=_int(env, "MESHPLAN_EP") if env.get("MESHPLAN_EP") else 1,
        etp=_int(env, "MESHPLAN_ETP") if env.get("MESHPLAN_ETP") else 1,
    )
    if layout.dp % layout.ep:
        raise MeshplanError(
            "MESHPLAN_EP",
            f"{layout.ep} does not divide MESHPLAN_DP={layout.dp}: expert-parallel ranks are carved out of the "
            "data-parallel ranks",
            "re-export the plan",
        )
    if layout.micro_batch_size * layout.num_microbatches * layout.dp != layout.global_batch_size:
        raise MeshplanError(
            "MESHPLAN_GLOBAL_BATCH_SIZE",
            f"{layout.global_batch_size} ≠ MICRO_BATCH_SIZE × NUM_MICROBATCHES × DP = "
            f"{layout.micro_batch_size}×{layout.num_microbatches}×{layout.dp}",
            "re-export the plan",
        )
    if len(stage_layers) != layout.pp * layout.virtual_stages:
        raise MeshplanError(
            "MESHPLAN_STAGE_LAYERS",
            f"{len(stage_layers)} entries but PP × VIRTUAL_STAGES = {layout.pp * layout.virtual_stages}",
            "re-export the plan",
        )
    return layout


def plan_from_env(env: Mapping[str, str] | None = None):
    """The ``Plan`` at ``$MESHPLAN_PLAN`` (``planner.answer.io.load_plan``), checked against the layout variables."""
    from planner.answer.io import load_plan

    env = os.environ if env is None else env
    layout = layout_from_env(env)
    plan = load_plan(_get(env, "MESHPLAN_PLAN"))
    p = plan.parallel
    if (p.tp, p.cp, p.pp, p.dp, p.ep, p.micro_batch_size) != (
        layout.tp,
        layout.cp,
        layout.pp,
        layout.dp,
        layout.ep,
        layout.micro_batch_size,
    ):
        raise MeshplanError(
            "MESHPLAN_PLAN",
            f"the plan file has tp={p.tp} cp={p.cp} pp={p.pp} dp={p.dp} ep={p.ep} mbs={p.micro_batch_size}, the "
            f"environment tp={layout.tp} cp={layout.cp} pp={layout.pp} dp={layout.dp} ep={layout.ep} "
            f"mbs={layout.micro_batch_size}",
            "point MESHPLAN_PLAN at the plan that was exported",
        )
    return plan


def mesh_from_env(device_type: str | None = None, env: Mapping[str, str] | None = None):
    """``init_device_mesh(device_type, (pp, dp, tp), mesh_dim_names=("pp", "dp", "tp"))`` (with ``cp`` between dp
    and tp when MESHPLAN_CP > 1) from the layout variables, as ``runtime.job.build_mesh`` does for a plan.
    Initialises the default process group (nccl on CUDA, else gloo) when the program has not. The world size
    must be tp × cp × pp × dp."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    env = os.environ if env is None else env
    layout = layout_from_env(env)
    if device_type is None:
        device_type = "cuda" if torch.cuda.is_available() else "cpu"
    world = dist.get_world_size() if dist.is_initialized() else int(env.get("WORLD_SIZE", "1"))
    if world != layout.world_size:
        raise MeshplanError(
            "WORLD_SIZE",
            f"{world} processes but the plan's layout needs tp×cp×pp×dp = "
            f"{layout.tp}×{layout.cp}×{layout.pp}×{layout.dp} = {layout.world_size}",
            f"launch {layout.world_size} processes (the exported script's torchrun does)",
        )
    if device_type == "cuda":
        torch.cuda.set_device(int(env.get("LOCAL_RANK", "0")))
    return init_device_mesh(device_type, layout.mesh_shape, mesh_dim_names=layout.mesh_dims)


def expert_mesh_from_env(device_type: str | None = None, env: Mapping[str, str] | None = None):
    """The expert layers' DeviceMesh ``("pp", "edp", "ep")`` (``runtime.expert_parallel.expert_mesh``: EP carved out
    of the data-parallel ranks, edp = dp / ep × cp × tp) from the layout variables, over the ranks of
    ``mesh_from_env``'s mesh. Call after ``mesh_from_env`` (or with torch.distributed initialised)."""
    import torch
    from torch.distributed.device_mesh import DeviceMesh

    from runtime.expert_parallel import EXPERT_MESH_DIMS, expert_ranks

    env = os.environ if env is None else env
    layout = layout_from_env(env)
    if device_type is None:
        device_type = "cuda" if torch.cuda.is_available() else "cpu"
    ranks = expert_ranks(layout.pp, layout.dp, layout.cp, layout.tp, layout.ep)
    return DeviceMesh(device_type, ranks, mesh_dim_names=EXPERT_MESH_DIMS)
