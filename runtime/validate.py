"""Check a Plan against the job before any process-group work.

Every check depends only on the plan and the world size, so every rank raises the same
``MeshplanError`` (naming the field and the fix) and no rank is left waiting in a collective.
"""

from __future__ import annotations

import fnmatch

from planner.errors import MeshplanError
from planner.layout import mesh_layout
from planner.specs import Plan


def num_microbatches(plan: Plan) -> int:
    p = plan.parallel
    return plan.training.global_batch_size // (p.dp * p.micro_batch_size)


def module_names(plan: Plan) -> list[str]:
    """The qualified module names of the plan's full model (without building it)."""
    m = plan.model
    names = ["embed", "embed.tok", "norm", "head"] + (["embed.pos"] if m.family == "gpt" else [])
    for i in range(m.num_layers):
        block = [f"layers.{i}"] + [f"layers.{i}.{s}" for s in (
            "attn_norm", "attn", "attn.wq", "attn.wk", "attn.wv", "attn.wo", "attn.core", "mlp_norm", "mlp",
            "mlp.w1", "mlp.w2")]
        if m.activation == "swiglu":
            block.append(f"layers.{i}.mlp.w3")
        names += block
    return names


def validate_plan(plan: Plan, world_size: int) -> None:
    """Raise ``MeshplanError`` for the first problem that would stop (or silently corrupt) the run."""
    p, m, t = plan.parallel, plan.model, plan.training
    if p.tp * p.pp * p.dp != world_size:
        raise MeshplanError(
            "parallel",
            f"tp × pp × dp = {p.tp} × {p.pp} × {p.dp} = {p.tp * p.pp * p.dp} but the job has {world_size} processes",
            f"launch {p.tp * p.pp * p.dp} processes (--nproc-per-node × --nnodes), or re-plan for {world_size} GPUs",
        )
    expected = mesh_layout(p)
    if plan.mesh.dim_names != expected.dim_names or plan.mesh.shape != expected.shape:
        raise MeshplanError(
            "mesh.shape",
            f"mesh {plan.mesh.dim_names}={plan.mesh.shape} does not match parallel (pp, dp, tp) = {expected.shape}",
            "use the mesh that `meshplan plan` wrote (planner.layout.mesh_layout)",
        )
    if sum(p.stage_layers) != m.num_layers:
        raise MeshplanError(
            "parallel.stage_layers",
            f"the chunks hold {sum(p.stage_layers)} layers ({p.stage_layers}) but model {m.name!r} has {m.num_layers}",
            f"give layer counts that sum to {m.num_layers}",
        )
    chunks = len(p.stage_layers)
    for c, n in enumerate(p.stage_layers):
        if n == 0 and 0 < c < chunks - 1:
            raise MeshplanError(
                "parallel.stage_layers",
                f"chunk {c} has no layers and carries neither the embedding nor the LM head",
                "give every middle chunk at least one layer",
            )
    if p.pp == 1 and p.virtual_stages > 1:
        raise MeshplanError(
            "parallel.virtual_stages",
            f"virtual_stages={p.virtual_stages} with pp=1: interleaving needs a pipeline",
            "set pp ≥ 2, or virtual_stages to 1 with schedule '1f1b'",
        )
    if m.tie_embeddings and p.pp > 1:
        raise MeshplanError(
            "model.tie_embeddings",
            "tied input/output embeddings need the embedding and the LM head on the same pipeline stage",
            "set tie_embeddings to false for pipeline-parallel plans, or use pp = 1",
        )
    if t.seq_len > m.max_seq_len:
        raise MeshplanError(
            "training.seq_len", f"seq_len={t.seq_len} exceeds the model's max_seq_len={m.max_seq_len}",
            f"use seq_len ≤ {m.max_seq_len}",
        )
    for field, value in (("num_attention_heads", m.num_attention_heads), ("num_kv_heads", m.num_kv_heads),
                         ("ffn_hidden_size", m.ffn_hidden_size)):
        if value % p.tp:
            raise MeshplanError(
                "parallel.tp", f"tp={p.tp} does not divide model.{field}={value}",
                f"choose a tp that divides {field}",
            )
    if p.sequence_parallel and t.seq_len % p.tp:
        raise MeshplanError(
            "training.seq_len", f"sequence parallelism splits seq_len={t.seq_len} over tp={p.tp} unevenly",
            "use a seq_len divisible by tp, or set sequence_parallel to false",
        )
    if t.global_batch_size % (p.dp * p.micro_batch_size):
        raise MeshplanError(
            "training.global_batch_size",
            f"global_batch_size={t.global_batch_size} is not a multiple of dp × micro_batch_size = {p.dp * p.micro_batch_size}",
            "use a global batch divisible by dp × micro_batch_size",
        )
    _validate_schedule(plan)
    _validate_tp_plan(plan)


def _validate_schedule(plan: Plan) -> None:
    p, n = plan.parallel, num_microbatches(plan)
    if p.pp == 1:
        return
    stages = p.pp * p.virtual_stages
    field = "parallel.micro_batch_size"
    if p.schedule == "1f1b" and n < p.pp:
        raise MeshplanError(
            field, f"schedule '1f1b' needs at least pp={p.pp} micro-batches per step, got {n}",
            "lower micro_batch_size (more micro-batches) or use schedule 'gpipe'",
        )
    if p.schedule in ("interleaved-1f1b", "interleaved-zero-bubble"):
        rounds = max(1, n // p.pp)
        if n % rounds:
            raise MeshplanError(
                field,
                f"schedule {p.schedule!r} needs the micro-batch count ({n}) to be a multiple of its rounds "
                f"(max(1, {n} // pp) = {rounds})",
                f"use a micro-batch count that is a multiple of pp={p.pp} (or at most pp)",
            )
    if stages > 1 and n < 1:
        raise MeshplanError(field, "no micro-batches", "increase global_batch_size")


def _validate_tp_plan(plan: Plan) -> None:
    p, m = plan.parallel, plan.model
    if p.tp == 1:
        return
    names = module_names(plan)
    for i, rule in enumerate(plan.tp_plan):
        if not any(fnmatch.fnmatchcase(name, rule.pattern) for name in names):
            raise MeshplanError(
                f"tp_plan.{i}.pattern", f"pattern {rule.pattern!r} matches no module of the model zoo",
                "use module names like 'layers.*.attn.wq' (see docs/runtime.md)",
            )
        if rule.pattern in ("embed.tok", "head") and rule.style in ("colwise", "rowwise") and m.vocab_size % p.tp:
            raise MeshplanError(
                f"tp_plan.{i}", f"vocabulary-parallel {rule.pattern!r} needs tp={p.tp} to divide vocab_size={m.vocab_size}",
                "drop the rule (keep it replicated) or choose a tp that divides the vocabulary",
            )
        if rule.style == "sequence_parallel" and not p.sequence_parallel:
            raise MeshplanError(
                f"tp_plan.{i}.style", f"rule {rule.pattern!r} is sequence_parallel but parallel.sequence_parallel is false",
                "regenerate tp_plan with planner.layout.tp_plan, or set sequence_parallel to true",
            )
