"""``nemo-2407``: NeMo 24.07 — NeMo 1.0 (Hydra) ``MegatronGPTModel`` of NeMo r2.0.0rc1 (tag 579983fb) on Megatron-core
338af514, Transformer Engine 7d576ed2 (1.8.0.dev0) and apex 810ffae (the pins of NeMo r2.0.0rc1 ``Dockerfile.ci:35-38``),
as NVIDIA/NeMo-Framework-Launcher 24.07 (8325688d) runs it (``launcher_scripts/conf/training/<family>/<size>.yaml``
with ``optim.name: distributed_fused_adam``). The published NeMo 24.07 performance rows ran it. It prices as the
``megatron`` preset (the same Megatron-core transformer with TE layers, DDP hooks, 1F1B / interleaved schedules, its
residual rows: ``pricing.residuals.RESIDUAL_LINEAGE``) except where that release differs:

* the optimizer is apex's ``DistributedFusedAdam`` (NeMo ``nemo/core/optim/distributed_adam.py``
  ``MegatronDistributedFusedAdam``), not Megatron-core's distributed optimizer: its state dtype is ``optim.dtype``
  (NeMo ``megatron_base_model.py:784-806``: fp32 by default, with ``store_param_remainders`` under bf16 parameters;
  ``store_params=False`` where ``optim.dtype`` is the model's bf16). So it runs ``optimizer_dtype`` "remainders"
  (its default, cost model 54: ``compose.memory.remainder_state_bytes``), "fp32" (``store_params``: fp8_params or
  fp16) and "param" (``compose.memory.param_dtype_state_bytes``; launcher 24.07 ``nemotron/nemotron_340b.yaml:161-162``
  sets ``grad_sync_dtype: bf16``, ``dtype: bf16``). Megatron-core core_v0.16.1's precision-aware optimizer
  (``--exp-avg-dtype``, ``--main-params-dtype fp32|fp16``: ``megatron/training/arguments.py:2840-2848``) always
  keeps main parameters, so the ``megatron`` preset does not run "param";
* its gradients live in apex's contiguous grad buffer (``contiguous_grad_buffer``, TE's ``main_grad`` a view of it:
  ``distributed_adam.py:487-494``) in ``optim.grad_sync_dtype`` (apex: default = ``dtype``), which the launcher's
  FP8 example scripts set to bf16 (``examples/training/gpt/h100/*_fp8_*.sh``, ``llama/h100/*_fp8.sh``:
  ``+training.model.optim.grad_sync_dtype=bf16``): ``reduce_dtype`` "param" in those requests;
* FP8: TE ``DelayedScaling`` only (NeMo ``megatron_gpt_model.py:195-207``): no current-scaling or MXFP8 recipe;
* context parallelism: the ring (p2p) only (neither Megatron-core 338af514 nor TE 7d576ed2 has ``cp_comm_type``);
* mixtures of experts as that Megatron-core builds them (``etp`` = tp, ``unbuilt``): every layer MoE, a softmax
  router without bias or groups, no shared experts (``transformer_config.py`` has no
  ``moe_shared_expert_intermediate_size``, ``moe_layer_freq``, ``moe_router_score_function``,
  ``moe_router_num_groups``; ``moe/router.py:65`` a bias-free linear), no biases in the grouped expert GEMMs
  (``moe/experts.py:46-49`` asserts ``add_bias_linear`` off; ``SequentialMLP`` is not priced), no MLA
  (``multi_latent_attention``), no attention sinks or clamped SwiGLU (gpt-oss); expert TP is the layer's TP
  (``moe_extended_tp`` the only other mode, not priced): Mixtral, Qwen3-MoE and OLMoE build; DeepSeek-V3, gpt-oss and
  Llama 4 do not;
* stage cuts: the even split only (``even_stages``): Megatron-core 338af514 gives every pipeline stage
  ``num_layers // pp`` layers and every virtual chunk ``// v`` of those (``transformer_block.py:48-79``,
  ``transformer_layer.py:133-157``); the ``megatron`` preset's ``--pipeline-model-parallel-layout`` is 2025's.
"""

from __future__ import annotations

from planner.specs.stacks import STACKS, Stack

NEMO_2407 = Stack(
    **STACKS["megatron"].model_dump()
    | dict(
        id="nemo-2407",
        title="NeMo 24.07 (NeMo 1.0 MegatronGPTModel on Megatron-core 338af514 + TE 1.8, apex DistributedFusedAdam)",
        version="NeMo r2.0.0rc1 (24.07 container): Megatron-core 338af514, Transformer Engine 7d576ed2, apex 810ffae",
        source="NVIDIA/NeMo r2.0.0rc1 (579983fb) nemo/core/optim/distributed_adam.py, nemo/collections/nlp/models/"
        "language_modeling/megatron_base_model.py:775-806 (distributed_fused_adam: contiguous grad buffer, optim.dtype, "
        "store_params / store_param_remainders), megatron_gpt_model.py:195-207 (DelayedScaling); apex 810ffae "
        "apex/contrib/optimizers/distributed_fused_adam.py:440-465, 1075-1096, 1806-1870; the megatron preset's TE "
        "and Megatron-core sources otherwise",
        data_parallel="ZeRO-0: Megatron-style DDP (optim fused_adam); ZeRO-1: optim.name distributed_fused_adam (apex "
        "DistributedFusedAdam: optimizer state sharded over DP, the whole grad buffer reduce-scattered, the "
        "parameters all-gathered)",
        cp_comms=("p2p",),
        cp_window_comms=(),
        # no --recompute-modules: Megatron-core 338af514 (2024-07-23) predates it (3b141a24, 2025-04-05: core_v0.13.0)
        recompute=("none", "selective", "full"),
        fp8_recipes=("delayed",),
        # interleaved 1F1B, m = pp: every forward first (Megatron-core 338af514 pipeline_parallel/schedules.py:599-601)
        interleaved_all_warmup=True,
        # the even split and that core's MoE only: the module docstring gives the sources
        even_stages=True,
        etp=("tp",),
        unbuilt=(
            "mla",
            "attention_sinks",
            "moe.shared_experts",
            "moe.first_dense_layers",
            "moe.moe_layer_freq!=1",
            "moe.router=sigmoid",
            "moe.router_groups",
            "moe.expert_bias",
            "moe.router_bias",
            "moe.swiglu_limit",
        ),
        # optim.dtype fp32 over bf16 parameters: store_param_remainders (megatron_base_model.py:800-802), the default;
        # fp32 master weights with fp8_params or fp16 (:796-804); optim.dtype bf16: "param"
        optimizer_dtype="remainders",
        optimizer_dtypes=("remainders", "fp32", "param"),
        runs_source="NVIDIA/NeMo r2.0.0rc1 (579983fb): megatron_base_model.py:775-806 (optim.dtype, grad_sync_dtype, "
        "store_params), megatron_gpt_model.py:195-207 (fp8: DelayedScaling only); Megatron-core 338af514 and TE "
        "7d576ed2 (no cp_comm_type: ring attention only); Megatron-core 338af514 "
        "transformer/transformer_block.py:48-79 (num_layers // pp, then // the virtual stages, layers a chunk: the even "
        "split only); NeMo-Framework-Launcher 24.07 (8325688d) "
        "launcher_scripts/conf/training/*/*.yaml (optim distributed_fused_adam) and examples/training/*/h100/*.sh",
    )
)
