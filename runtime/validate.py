"""Check a Plan against the job before any process-group work.

Every check depends only on the plan and the world size, so every rank raises the same
``MeshplanError`` (naming the field and the fix) and no rank is left waiting in a collective.
"""

from __future__ import annotations

import fnmatch

from planner.specs import Plan, rules
from planner.specs.errors import MeshplanError
from planner.specs.layout import mesh_layout
from planner.specs.stack_rules import precision_error, unbuilt_parts
from planner.specs.stacks import STACKS
from runtime import fp8


def num_microbatches(plan: Plan) -> int:
    p = plan.parallel
    return plan.training.global_batch_size // (p.dp * p.micro_batch_size)


def module_names(plan: Plan) -> list[str]:
    """The qualified module names of the plan's full model (without building it)."""
    m = plan.model
    names = ["embed", "embed.tok", "norm", "head"] + (["embed.pos"] if m.family == "gpt" else [])
    for i in range(m.num_layers):
        if m.mla is None:
            attn = ["attn.wq", "attn.wk", "attn.wv"]
        else:  # runtime.models.mla.LatentAttention
            q = ["attn.wq_a", "attn.q_norm", "attn.wq_b"] if m.mla.q_lora_rank is not None else ["attn.wq"]
            attn = [*q, "attn.wkv_a", "attn.kv_norm", "attn.wkv_b"]
        block = [f"layers.{i}"] + [
            f"layers.{i}.{s}" for s in ("attn_norm", "attn", *attn, "attn.wo", "attn.core", "mlp_norm")
        ]
        if m.qk_norm is not None:
            block += [f"layers.{i}.attn.q_norm", f"layers.{i}.attn.k_norm"]
        if m.is_moe_layer(i):
            block += [f"layers.{i}.moe", f"layers.{i}.moe.router", f"layers.{i}.moe.experts"]
            if m.moe is not None and m.moe.shared_experts:
                block += [f"layers.{i}.moe.shared"] + [f"layers.{i}.moe.shared.w{j}" for j in (1, 2, 3)]
        else:
            block += [f"layers.{i}.mlp", f"layers.{i}.mlp.w1", f"layers.{i}.mlp.w2"]
            if m.activation == "swiglu":
                block.append(f"layers.{i}.mlp.w3")
        names += block
    return names


def validate_plan(plan: Plan, world_size: int) -> None:
    """Raise ``MeshplanError`` for the first problem that would stop (or silently corrupt) the run:
    the job's shape, then the configuration's rules (``planner.specs.rules.runnable``, shared with the
    planner and the exporters), then what only this runtime cannot do."""
    p, m = plan.parallel, plan.model
    wrong_size = rules.degrees_product(
        p.tp,
        p.pp,
        p.dp,
        world_size,
        "the job has",
        "processes",
        f"launch {p.num_gpus} processes (--nproc-per-node × --nnodes), or re-plan for {world_size} GPUs",
        cp=p.cp,
    )
    if wrong_size is not None:  # the launch, not one degree, is at fault: reported on the whole triple
        raise rules.with_field(wrong_size, "parallel")
    expected = mesh_layout(p)
    if plan.mesh.dim_names != expected.dim_names or plan.mesh.shape != expected.shape:
        raise MeshplanError(
            "mesh.shape",
            f"mesh {plan.mesh.dim_names}={plan.mesh.shape} does not match parallel "
            f"({', '.join(expected.dim_names)}) = {expected.shape}",
            "use the mesh that `meshplan plan` wrote (planner.specs.layout.mesh_layout)",
        )
    rules.check(rules.runnable(m, plan.training, p), rules.cp_runnable(p.cp, p.cp_comm))
    fp8.check(plan)  # torchao's recipes run; Transformer Engine / Blackwell ones are refused by name
    rules.check(precision_error(STACKS["meshplan"], plan.training.precision))  # no fp16: no loss scaler
    _validate_attention(plan)
    _validate_experts(plan)
    if m.tie_embeddings and p.pp > 1:
        raise MeshplanError(
            "model.tie_embeddings",
            "tied input/output embeddings need the embedding and the LM head on the same pipeline stage",
            "set tie_embeddings to false for pipeline-parallel plans, or use pp = 1",
        )
    _validate_tp_plan(plan)


def _validate_attention(plan: Plan) -> None:
    """The model's parts the zoo builds (the ``meshplan`` stack's ``unbuilt`` list, as data: no PyTorch import),
    latent attention without context parallelism (``Stack.cp_with_mla``: the exchanges stack K and V of one
    width), and attention sinks without context parallelism (the sink key of ``runtime.models.transformer.with_sink_key``
    must go first in the whole sequence, which no CP exchange does)."""
    m, p = plan.model, plan.parallel
    for part in unbuilt_parts(STACKS["meshplan"], m):
        raise MeshplanError(
            f"model.{part}",
            f"the bundled runtime's model zoo (runtime.models) does not build model.{part}, so {m.name!r} cannot run",
            f"use a model without {part}, or export the plan to megatron or torchtitan",
        )
    if m.mla is not None and m.mla.v_head_dim > m.mla.qk_head_dim:  # runtime.models.transformer.check_buildable
        raise MeshplanError(
            "model.mla.v_head_dim",
            f"the bundled runtime pads latent attention's values to the query/key head width ({m.mla.qk_head_dim}); "
            f"v_head_dim={m.mla.v_head_dim} of {m.name!r} is wider",
            f"set model.mla.v_head_dim to at most {m.mla.qk_head_dim}, or export the plan to megatron",
        )
    if m.mla is not None and p.cp > 1:
        raise MeshplanError(
            "parallel.cp",
            f"the bundled runtime runs latent attention (model.mla of {m.name!r}) without context parallelism only, "
            f"not cp={p.cp}: its CP exchanges carry K and V of one head width, and latent attention's values are "
            "narrower than its queries and keys",
            "set parallel.cp to 1 (plan with --cp 1), or export the plan to megatron",
        )
    if m.attention_sinks and p.cp > 1:
        raise MeshplanError(
            "parallel.cp",
            f"the bundled runtime runs attention sinks (model.attention_sinks of {m.name!r}) without context "
            f"parallelism only, not cp={p.cp}",
            "set parallel.cp to 1 (plan with --cp 1)",
        )


def _validate_experts(plan: Plan) -> None:
    """A mixture of experts as the bundled runtime runs it (``runtime.models.moe``, ``runtime.expert_parallel``):
    buildable, EP carved out of dp, experts whole on a rank (etp 1), tokens sequence-split under TP; dense models:
    ep = etp = 1."""
    from planner.specs import ep_rules

    p, m = plan.parallel, plan.model
    if m.moe is None:
        rules.check(ep_rules.ep_fits_model(m, p.ep, p.etp))
        return
    from runtime.models.transformer import check_buildable  # imports PyTorch: a mixture of experts only

    check_buildable(m)
    if p.etp != 1:
        raise MeshplanError(
            "parallel.etp",
            f"the bundled runtime runs each expert whole on a rank (etp = 1), not etp={p.etp}: its TP ranks hold their "
            "own sequence-parallel tokens and act as expert-data-parallel replicas (torchtitan's choice since it "
            "removed ETP)",
            "set parallel.etp to 1 (with sequence_parallel when tp > 1), or export to megatron for etp = tp",
        )
    rules.check(
        ep_rules.ep_fits_model(m, p.ep, p.etp),
        ep_rules.ep_divides_dp(p.ep, p.dp),
        ep_rules.expert_tokens_split(m, p.tp, p.ep, p.etp, p.sequence_parallel),
    )


def _validate_tp_plan(plan: Plan) -> None:
    p, m = plan.parallel, plan.model
    if p.tp == 1:
        return
    names = module_names(plan)
    for i, rule in enumerate(plan.tp_plan):
        if not any(fnmatch.fnmatchcase(name, rule.pattern) for name in names):
            raise MeshplanError(
                f"tp_plan.{i}.pattern",
                f"pattern {rule.pattern!r} matches no module of the model zoo",
                "use module names like 'layers.*.attn.wq' (see docs/runtime.md)",
            )
        if rule.pattern in ("embed.tok", "head") and rule.style in ("colwise", "rowwise"):
            rules.check(rules.tp_divides_vocab(m, p.tp, f"tp_plan.{i}"))
        if rule.style == "sequence_parallel" and not p.sequence_parallel:
            raise MeshplanError(
                f"tp_plan.{i}.style",
                f"rule {rule.pattern!r} is sequence_parallel but parallel.sequence_parallel is false",
                "regenerate tp_plan with planner.specs.layout.tp_plan, or set sequence_parallel to true",
            )
