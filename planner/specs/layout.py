"""How a ParallelConfig lands on ranks and modules: the device-mesh layout and the tensor-parallel plan.

Mesh: dims ``("pp", "dp", "cp", "tp")`` in row-major order, TP innermost (adjacent ranks, so a TP group of
size ≤ gpus_per_node that divides it stays inside one node), then CP, then DP, PP outermost: Megatron's
order tp-cp-(ep)-dp-pp. The ``cp`` dim is present only when cp > 1 (a plan without context parallelism
keeps the mesh ``("pp", "dp", "tp")`` of earlier plans). Global rank r has coordinates
``unravel(r, shape)``. A Plan carries only the mesh's names and shape; ``mesh_groups`` derives the rank
groups of a dimension (as ``init_device_mesh`` does). Dense layers' data parallelism (DP/ZeRO/FSDP)
runs over the flattened ``("dp", "cp")`` sub-mesh: cp ranks hold the same weights and their gradients
reduce over dp × cp, as in Megatron (the DP-CP group) and torchtitan (FSDP over dp_shard·cp).

TP plan: Megatron column/row splits on the model zoo's module names (see ``runtime/models``):
``embed.tok`` (+ ``embed.pos`` for GPT), ``layers.<i>.attn_norm``, ``layers.<i>.attn.{wq,wk,wv,wo}``,
``layers.<i>.mlp_norm``, ``layers.<i>.mlp.{w1,w2,w3}`` (w3 only for SwiGLU), ``norm``, ``head``.
With sequence parallelism, the norms run sequence-sharded and the residual stream is Shard(1) between
blocks (the torchtitan pattern).
"""

from __future__ import annotations

import itertools
import math

from planner.specs import MeshLayout, ModelSpec, ParallelConfig, TPLayout, TPRule, TPStyle
from planner.specs.config import SCHEDULE_INFO

MESH_DIMS = ("pp", "dp", "cp", "tp")


def mesh_dims(cp: int) -> tuple[str, ...]:
    """The mesh's dimension names: ``MESH_DIMS``, without ``cp`` when cp = 1."""
    return MESH_DIMS if cp > 1 else tuple(d for d in MESH_DIMS if d != "cp")


def rank_coords(rank: int, pp: int, dp: int, tp: int) -> tuple[int, int, int]:
    """(pp_rank, dp_rank, tp_rank) of a global rank (a mesh without cp)."""
    return rank // (dp * tp), (rank // tp) % dp, rank % tp


def cp_a2a_size(parallel: ParallelConfig, gpus_per_node: int) -> int:
    """``a2a+p2p``'s all-to-all group: the cp ranks one node holds (the mesh puts cp just outside tp, so a node of
    g GPUs holds g / tp consecutive cp ranks), as a divisor of cp; the ring runs over cp / this. Megatron's
    ``--hierarchical-context-parallel-sizes`` (the export) and the bundled runtime use the same split."""
    return math.gcd(parallel.cp, max(1, gpus_per_node // parallel.tp))


def mesh_layout(parallel: ParallelConfig) -> MeshLayout:
    sizes = {"pp": parallel.pp, "dp": parallel.dp, "cp": parallel.cp, "tp": parallel.tp}
    dims = mesh_dims(parallel.cp)
    return MeshLayout(dim_names=list(dims), shape=[sizes[d] for d in dims])


def mesh_groups(mesh: MeshLayout, dim: str) -> list[list[int]]:
    """The global ranks of each group along ``dim`` of a row-major mesh: ranks that differ only in that
    coordinate, each group in coordinate order, groups in row-major order of the other coordinates
    (the groups ``init_device_mesh`` forms; e.g. ``mesh_groups(m, "tp")`` are the TP groups)."""
    if dim not in mesh.dim_names:
        raise ValueError(f"mesh has no dimension {dim!r} (it has {mesh.dim_names})")
    d = mesh.dim_names.index(dim)
    strides = [math.prod(mesh.shape[i + 1 :]) for i in range(len(mesh.shape))]
    others = [range(n) for i, n in enumerate(mesh.shape) if i != d]
    groups = []
    for coords in itertools.product(*others):
        base = sum(c * strides[i] for i, c in zip([i for i in range(len(mesh.shape)) if i != d], coords))
        groups.append([base + x * strides[d] for x in range(mesh.shape[d])])
    return groups


def tp_plan(model: ModelSpec, parallel: ParallelConfig) -> list[TPRule]:
    """The per-module tensor-parallel plan for the model zoo (empty when tp = 1)."""
    if parallel.tp == 1:
        return []
    sp = parallel.sequence_parallel
    seq: TPLayout = "shard_seq"
    rep: TPLayout = "replicate"
    rules: list[TPRule] = []
    # Vocabulary-parallel embedding and LM head when the vocabulary splits evenly.
    vocab_parallel = model.vocab_size % parallel.tp == 0
    if vocab_parallel:
        rules.append(TPRule(pattern="embed.tok", style="rowwise", input_layouts=[rep], output_layouts=[rep]))
    if sp:
        rules.append(
            TPRule(pattern="embed", style="prepare_output", output_layouts=[rep], desired_output_layouts=[seq])
        )
    norm_style: TPStyle = "sequence_parallel" if sp else "replicate"
    rules += [
        TPRule(pattern="layers.*.attn_norm", style=norm_style),
        TPRule(pattern="layers.*.mlp_norm", style=norm_style),
    ]
    # a mixture of experts: MoE layers' MLP is ``moe`` (runtime.models.moe), the dense layers' ``mlp``
    dense = model.moe is None or any(not model.is_moe_layer(i) for i in range(model.num_layers))
    if sp:
        rules.append(
            TPRule(pattern="layers.*.attn", style="prepare_input", input_layouts=[seq], desired_input_layouts=[rep])
        )
        if dense:
            rules.append(
                TPRule(pattern="layers.*.mlp", style="prepare_input", input_layouts=[seq], desired_input_layouts=[rep])
            )
    out: list[TPLayout] | None = [seq] if sp else None
    rules += _attention_rules(model, out)
    if dense:
        rules.append(TPRule(pattern="layers.*.mlp.w1", style="colwise"))
        if model.activation == "swiglu":
            rules.append(TPRule(pattern="layers.*.mlp.w3", style="colwise"))
        rules.append(TPRule(pattern="layers.*.mlp.w2", style="rowwise", output_layouts=out))
    if model.moe is not None and sp:
        rules += _moe_rules(model)
    rules.append(TPRule(pattern="norm", style=norm_style))
    if vocab_parallel:
        rules.append(
            TPRule(pattern="head", style="colwise", input_layouts=[seq] if sp else [rep], output_layouts=[rep])
        )
    elif sp:
        # Head stays replicated: gather the sequence back before it.
        rules.append(TPRule(pattern="head", style="prepare_input", input_layouts=[seq], desired_input_layouts=[rep]))
    return rules


def _attention_rules(model: ModelSpec, out: list[TPLayout] | None) -> list[TPRule]:
    """Q/K/V column-parallel by heads, the output projection row-parallel. Latent attention
    (``runtime.models.mla``, ``workload.moe.mla_linears``): the up projections ``wq_b`` (or ``wq`` without a query
    bottleneck) and ``wkv_b`` column-parallel; the down projections ``wq_a``, ``wkv_a`` and their norms have no rule
    (replicated: every rank holds them whole, as Megatron-core's MLASelfAttention)."""
    if model.mla is not None:
        q = "wq_b" if model.mla.q_lora_rank is not None else "wq"
        cols = [f"layers.*.attn.{q}", "layers.*.attn.wkv_b"]
    else:
        cols = ["layers.*.attn.wq", "layers.*.attn.wk", "layers.*.attn.wv"]
    return [TPRule(pattern=c, style="colwise") for c in cols] + [
        TPRule(pattern="layers.*.attn.wo", style="rowwise", output_layouts=out)
    ]


def _moe_rules(model: ModelSpec) -> list[TPRule]:
    """A MoE layer under TP with sequence parallelism (expert TP 1, the runtime's ``runtime.expert_parallel``):
    the layer takes each TP rank's sequence shard as a local tensor, the router runs sequence-parallel (its weight
    replicated, its gradient summed over TP), the routed experts are whole on every rank (their tokens are the
    rank's own), and the shared expert is split like the dense MLP (Megatron-core: shared experts follow the
    dense TP)."""
    seq: TPLayout = "shard_seq"
    rules = [
        TPRule(pattern="layers.*.moe", style="prepare_input", input_layouts=[seq], desired_input_layouts=[seq]),
        TPRule(pattern="layers.*.moe.router", style="sequence_parallel"),
    ]
    if model.moe is not None and model.moe.shared_experts:
        rules += [
            TPRule(
                pattern="layers.*.moe.shared",
                style="prepare_input",
                input_layouts=[seq],
                desired_input_layouts=["replicate"],
            ),
            TPRule(pattern="layers.*.moe.shared.w1", style="colwise"),
            TPRule(pattern="layers.*.moe.shared.w3", style="colwise"),
            TPRule(pattern="layers.*.moe.shared.w2", style="rowwise", output_layouts=[seq]),
        ]
    return rules


def stage_ranks(parallel: ParallelConfig) -> list[int]:
    """Pipeline rank holding each model chunk, in chunk order (looped, or V-shaped for ZBV)."""
    pp, v = parallel.pp, parallel.virtual_stages
    if SCHEDULE_INFO[parallel.schedule].placement == "v":
        return [c if c < pp else 2 * pp - 1 - c for c in range(pp * v)]
    return [c % pp for c in range(pp * v)]


def even_stage_layers(num_layers: int, chunks: int) -> list[int]:
    """An even split of layers over chunks, the remainder going to the middle chunks (the first and
    last carry the embedding and the LM head)."""
    base, extra = divmod(num_layers, chunks)
    counts = [base] * chunks
    order = sorted(range(chunks), key=lambda c: (c in (0, chunks - 1), abs(c - (chunks - 1) / 2)))
    for c in order[:extra]:
        counts[c] += 1
    return counts
