"""Megatron-core's selective recomputation by module (``parallel.recompute = "layernorm+moe_act"``: Megatron's
``--recompute-granularity selective --recompute-modules layernorm moe_act``, as the Megatron-Bridge 26.x gpt-oss
recipes run it): what a block stops saving and what its backward reruns, beside recompute ``none``.

Read at NVIDIA/Megatron-LM core_v0.16.1 (the ``megatron`` preset's version; the same lines at core_v0.16.0):

* both modules use output-discarding checkpointing (transformer_config.py:411-423): ``CheckpointWithoutOutput``
  (tensor_parallel/random.py:621) runs the function without autograd, saves only its inputs, and once the next
  module has consumed (and saved) the output frees that output's storage (``discard_output_and_register_recompute``
  :724, ``output.untyped_storage().resize_(0)`` :742), rerunning the function in a hook on the later module's output
  gradient (``_recompute`` :664): the saved output costs no memory and the function runs once more in backward;
* ``layernorm`` (transformer_layer.py:382-438): the ``input_layernorm`` and the ``pre_mlp_layernorm`` are
  recomputed only where they are modules of their own (``not isinstance(..., IdentityOp)``, :384 and :432). The
  Transformer Engine layer spec fuses the input norm into ``linear_qkv`` (``column_parallel_layer_norm_linear``,
  models/gpt/gpt_layer_specs.py:279) except for multi-latent attention (``input_layernorm=backend.layer_norm()``,
  :248), and the pre-MLP norm into ``linear_fc1`` except on MoE layers (``backend.layer_norm() if num_experts else
  IdentityOp``, :265 and :291). So a MoE block drops its pre-MLP norm's output (what the router and the dispatch
  read: the ``mlp_input`` term of ``activations.te_block_saved_terms``, [T/sp, h]), an MLA block its input norm's
  output (``qkv_input`` of ``moe.mla_saved_terms``), a dense block with multi-head attention nothing; the norm's
  input (the residual stream) stays saved, now by the checkpoint;
* ``moe_act`` (moe/experts.py:588-591, :738-750): ``TEGroupedMLP``'s activation (``bias_act_func``: for gpt-oss the
  eager clamp and the fused weighted quick-GEGLU, ``expert_parallel.clamp_ops``) runs checkpointed on fc1's output;
  the checkpoint saves fc1's output (2f/etp a routed row, which the activation saved already) and fc2's saved input,
  the activation's output (f/etp a row), is freed; so are the tensors the activation saved inside (the clamps'
  input beside the fused kernel's: 2f/etp a row on a clamped SwiGLU). Megatron refuses it without grouped GEMM
  (transformer_config.py:1213-1216), which the planner's Megatron experts are.

Time added per block and micro-batch (backward): the norms' forward again — a memory-bound kernel reading and
writing [T/sp, h] (``ops.op_bytes``' norm bytes per element) — and the experts' activation forward again (its
``glu`` bytes per FFN element over the local routed rows, and the clamp's forward ops), each at the achieved HBM
bandwidth for its size (``gpu.hbm_time``, ``gpu.ops_time``) scaled by the memory residual, as the forward's own."""

from __future__ import annotations

from typing import NamedTuple

from planner.compose.context import Context
from planner.pricing.gpu import hbm_time, ops_time
from planner.specs.errors import MeshplanError
from planner.workload.activations import te_block_saved_terms
from planner.workload.expert_parallel import clamp_ops, expert_rows, routed_rows
from planner.workload.ops import op_bytes

#: The recompute mode (``planner.specs.config.Recompute``) and the Megatron modules it names, in flag order.
MODULES = "layernorm+moe_act"
MEGATRON_MODULES = ("layernorm", "moe_act")


class ModuleRecompute(NamedTuple):
    """Per block and micro-batch on one rank: saved bytes dropped (against recompute none), backward seconds added."""

    saved_less: float
    bwd_more: float
    norm_bytes: float  # of ``saved_less``: the norms' outputs
    act_bytes: float  # of ``saved_less``: the experts' activation tensors


def op_list_mode(recompute: str) -> str:
    """The recompute mode a block's dense op list and the experts' floor read: ``MODULES`` reruns only what
    ``module_recompute`` adds, on top of ``none``'s op list."""
    return "none" if recompute == MODULES else recompute


def module_recompute(ctx: Context, mbs: int, tp: int, sp: bool, ep: int, etp: int, moe: bool) -> ModuleRecompute:
    """``ModuleRecompute`` of one block (a MoE block with ``moe``) at (mbs, tp, sp, ep, etp) (module docstring)."""
    model, seq, elt = ctx.model, ctx.training.seq_len, ctx.elt
    r = ctx.residuals
    terms = te_block_saved_terms(model, mbs, seq, tp, sp, ctx.training.precision)
    norms = (["mlp_input"] if moe else []) + (["qkv_input"] if model.mla is not None else [])
    norm_bytes = float(sum(terms[k] for k in norms))
    T = mbs * seq // (tp if sp and tp > 1 else 1)
    bwd = r.memory_scale * len(norms) * hbm_time(ctx, T * model.hidden_size * op_bytes(ctx)[0])
    act_bytes = 0.0
    if moe and ctx.stack.moe_dispatch == "megatron" and model.moe is not None:
        x = model.moe
        full = mbs * seq
        T_in = full if etp > 1 else T
        f = x.expert_ffn_hidden_size // etp
        _, routed = routed_rows(model, T, T_in)
        q = 1.0 if ctx.fp8_recipe is not None else float(elt)  # fc2's saved input (``expert_work``)
        clamped = x.swiglu_limit is not None
        act_bytes = routed * (q * f + (elt * 2 * f if clamped else 0.0))
        rows = expert_rows(model, T, T_in, ep) * (x.num_experts // ep)
        rerun = hbm_time(ctx, op_bytes(ctx)[1] * rows * f)
        if clamped:
            rerun += ops_time(ctx, clamp_ops(rows, f, elt)[0])
        bwd += r.memory_scale * rerun
    return ModuleRecompute(norm_bytes + act_bytes, bwd, norm_bytes, act_bytes)


def searched_recompute(ctx: Context, modes: tuple[str, ...]) -> tuple[str, ...]:
    """The recompute modes the free search tries: ``modes``, and ``MODULES`` where the stack runs it and it differs
    from ``none`` — a mixture of experts (the pre-MLP norm, the experts' activation) or latent attention (the input
    norm); on a dense model with multi-head attention under the TE layer spec it recomputes nothing (module
    docstring), a copy of ``none`` not worth a class; nor under delayed FP8 scaling (``modules_fp8_error``)."""
    differs = ctx.model.moe is not None or ctx.model.mla is not None
    runs = MODULES in ctx.stack.recompute and modules_fp8_error(ctx, MODULES) is None
    return (*modes, MODULES) if differs and runs else modes


def modules_fp8_error(ctx: Context, recompute: str | None) -> MeshplanError | None:
    """Megatron-core refuses both modules under delayed FP8 scaling (core_v0.16.1 transformer_config.py:1241-1247:
    "Delayed scaling does not support moe_act and layernorm recompute for fp8"): so does a pin of ``MODULES``."""
    if recompute != MODULES or ctx.fp8_recipe != "delayed":
        return None
    return MeshplanError(
        "parallel.recompute",
        f"{MODULES!r} (Megatron-core's --recompute-modules {' '.join(MEGATRON_MODULES)}) does not run with delayed FP8 "
        "scaling: Megatron-core refuses it (transformer_config.py: 'Delayed scaling does not support moe_act and "
        "layernorm recompute for fp8')",
        "set training.fp8_recipe to current or mxfp8, or pin parallel.recompute to none, selective or full",
    )
