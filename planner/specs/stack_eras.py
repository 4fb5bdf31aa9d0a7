"""Presets of older releases of a training stack (issue 27 §1), for the published runs of their era: what that release
ran and how it issued its work, so that a plan priced for it uses only what it could run. Registered in
``planner.specs.stacks.STACKS``.

``megatron-2020`` — Megatron-LM v2.0 (NVIDIA/Megatron-LM tag v2.0, be473a5bd2, 2021-01-12), the code of the 2020
README tables (5281919, 2020-09-11: pp = 1) and of the GPT-3 175B example (152aab30, 2021-01-11). Each claim is
read at that tag:

* data parallelism: ``megatron/model/distributed.py`` ``DistributedDataParallel`` (``--DDP-impl local``, the
  default): ``train_step`` (``megatron/training.py``) all-reduces the flattened gradients once per dtype after the
  last micro-batch's backward (``allreduce_params``), nothing overlapped; no optimizer sharding (the distributed
  optimizer arrived in 2022, 329fe5820f): ZeRO-0 only;
* pipeline: ``forward_backward_pipelining`` (1F1B with warm-up and cool-down); every transfer is a
  ``batch_isend_irecv`` then ``wait`` (``communicate``): blocking both ends; no interleaving
  (``--num-layers-per-virtual-pipeline-stage`` came with dcef906978, 2021-02-13, after v2.0);
  ``ParallelTransformer`` asserts ``num_layers % pipeline_model_parallel_size == 0``: even stages only;
* tied embeddings with pp > 1: the word embedding lives on the first and the last stage, its gradient all-reduced
  over the embedding group after the DP all-reduce (``train_step``: "All-reduce word_embeddings' grad across first
  and last stages"); the clip's norm all-reduced over the model-parallel group (``optimizer/clip_grads.py``);
* no sequence parallelism (``--sequence-parallel``: 2022), recompute ``--checkpoint-activations`` (whole layers,
  ``--checkpoint-num-layers``) only: no selective recompute (``--recompute-granularity``: 2022);
* FP16 with dynamic loss scaling (``--fp16``; ``--loss-scale`` unset = dynamic), gradients all-reduced in fp16
  (``--fp32-allreduce`` off); no ``--bf16`` (b4bc51b1e7, 2021-03-08);
* kernels: apex fused LayerNorm, fused scale-mask-softmax, bias-GeLU and bias-dropout-add
  (``--no-*-fusion`` to turn off; ``megatron/model/fused_softmax.py``, ``fused_bias_gelu.py``), attention through
  the s×s scores with attention and hidden dropout 0.1;
* the model: GPT only (``megatron/model/gpt_model.py``, ``transformer.py``): LayerNorm, GeLU, learned positions,
  multi-head attention, biases, output layer = the word embedding (``parallel_lm_logits(...,
  word_embeddings_weight())``).

``deepspeed-2021`` — DeepSpeed v0.5.0 (microsoft/DeepSpeed tag v0.5.0, f28432441b, 2021-08-17), the release of 2021-08
(what the MT-NLG rows ran) (ZeRO-3's issuing is the same from v0.3.13, 2021-03, to v0.5.4; v0.5.5, 2021-11, changed
the fetch's gathers: c0eeb69df #1188, one synchronous launch of a module's parameters). Each claim read at that tag:

* ZeRO-3 fetches one parameter at a time, a device-wide sync around every fetch, one prefetch in flight, the
  recompute gathering again, one reduce-scatter per parameter gradient (``planner.compose.zero3_sequence``, which
  cites every rule at file:line); ZeRO-2 reduces each micro-batch's gradients in its backward, ZeRO-0/1 once at the
  accumulation boundary (``runtime/engine.py:1255-1266`` ``allreduce_gradients``); ``overlap_comm`` is forced off
  for ZeRO-1 and under a ``PipelineModule`` (engine.py:999-1014);
* the pipeline: ``PipelineEngine`` (``runtime/pipe/engine.py:56``: "ZeRO-2 and ZeRO-3 are incompatible with pipeline
  parallelism"), ``TrainSchedule`` (1F1B-style, schedule.py), send/recv as blocking broadcasts in 2-rank groups
  (``runtime/pipe/p2p.py``), tied layers across stages (``TiedLayerSpec``, pipe/module.py:73),
  ``activation_checkpoint_interval`` (whole layers);
* precision: ``fp16`` (dynamic loss scaling) or fp32 — no ``bf16`` before v0.5.5 (engine.py has no bfloat16 at
  v0.5.0); no sequence parallelism, no context parallelism (Ulysses: 2023), no FP8;
* the model code of its 2021 runs (Megatron-DeepSpeed's GPT, forked from Megatron-LM v2.x): unfused attention
  through the s×s scores, dropout 0.1, apex fused kernels, fused ``query_key_value`` — priced like
  ``megatron-2020``'s; models that code does not build are refused. ``deepspeed/moe`` (top-1/2 gating with
  capacity) exists at v0.5.0 but is not priced by this preset.
"""

from __future__ import annotations

from planner.specs.stacks import Stack

MEGATRON_2020 = Stack(
    id="megatron-2020",
    title="Megatron-LM v2.0 (2020–2021: GPT, unfused attention with dropout, apex fused kernels, local DDP, FP16)",
    attention="unfused",
    dropout=True,
    activations="te",  # apex FusedLayerNorm keeps its input as TE's does (Korthikanti et al.'s 34·s·b·h + 5·a·s²·b)
    kernels="fused",
    overlap_grad_reduce=False,
    reduce_dtype="fp32_bf16",  # the 16-bit type under fp16 (--fp32-allreduce off)
    p2p_blocking=("1f1b",),
    finalize_grads="megatron",  # tied embeddings between first and last stage; the clip's norm
    grad_accumulation="megatron",
    nccl="2.10",  # NGC PyTorch 20.12–21.03 (NCCL 2.8); the 2.10 tuner's constants (planner.pricing.nccl: 2.7–2.10)
    source="NVIDIA/Megatron-LM v2.0 (be473a5bd2): megatron/model/transformer.py (ParallelSelfAttention through the "
    "s×s scores, FusedScaleMaskSoftmax, bias_gelu_impl, bias_dropout_add_fused_train, attention and hidden dropout "
    "0.1: megatron/arguments.py defaults), megatron/model/distributed.py (local DDP: allreduce_params after "
    "backward), megatron/training.py (communicate: batch_isend_irecv + wait; word-embedding all-reduce)",
    version="Megatron-LM v2.0 (be473a5bd2, 2021-01-12)",
    zero_stages=(0,),
    pipeline_zero_stages=(0,),
    data_parallel="ZeRO-0 only: megatron/model/distributed.py DistributedDataParallel (--DDP-impl local): the "
    "flattened gradients all-reduced once per dtype after the step's last backward; no optimizer sharding",
    schedules=("1f1b",),
    sequence_parallel=False,
    recompute=("none", "full"),
    pp_with_tied_embeddings=True,
    even_stages=True,
    cp_comms=(),
    precisions=("fp16", "fp32"),  # --fp16 or fp32: no --bf16 before b4bc51b1e7 (2021-03-08)
    unbuilt=(
        "family=llama",
        "norm=rmsnorm",
        "activation=swiglu",
        "tie_embeddings=False",
        "moe",
        "mla",
        "qk_norm",
        "attention_sinks",
    ),
    runs_source="NVIDIA/Megatron-LM v2.0 (be473a5bd2, 2021-01-12): megatron/arguments.py (--checkpoint-activations, "
    "--checkpoint-num-layers; --fp16, --loss-scale; --DDP-impl local; no --sequence-parallel, "
    "--recompute-granularity, --use-distributed-optimizer, --num-layers-per-virtual-pipeline-stage or --bf16), "
    "megatron/training.py (forward_backward_no_pipelining, forward_backward_pipelining: 1F1B only; train_step), "
    "megatron/model/transformer.py (num_layers divisible by the pipeline size), megatron/model/gpt_model.py "
    "(GPT: LayerNorm, GeLU, learned positions, MHA, tied output layer)",
)

DEEPSPEED_2021 = Stack(
    id="deepspeed-2021",
    title="DeepSpeed v0.5.0 (2021: ZeRO with fp16, per-parameter ZeRO-3 fetches, PipelineModule; Megatron GPT code)",
    attention="unfused",
    dropout=True,
    activations="te",  # Megatron-DeepSpeed's transformer keeps apex FusedLayerNorm's input as megatron-2020 does
    kernels="fused",
    overlap_grad_reduce=False,  # ZeRO-0/1 reduce once at the accumulation boundary (engine.py:1260-1266)
    zero3_fetch="param",  # one all_gather per parameter, device syncs (planner.compose.zero3_sequence)
    zero3_reduce_bucket=500_000_000,  # reduce_bucket_size default (zero/constants.py:68)
    grad_accumulation="deepspeed",  # ZeRO-2/3 reduce every micro-batch (engine.py:1255-1258)
    zero1_sync="all_reduce",  # ZeRO-1: dist.all_reduce per 5e8-element bucket (zero/stage2.py:1292-1378)
    p2p_blocking=("1f1b",),  # runtime/pipe/p2p.py: dist.broadcast in a 2-rank group, async_op forced False
    nccl="2.10",  # the 2021 NGC PyTorch containers: NCCL 2.8–2.10 (planner.pricing.nccl)
    source="microsoft/DeepSpeed v0.5.0 (f28432441b): runtime/zero/stage3.py (PartitionedParameterCoordinator, "
    "FP16_DeepSpeedZeroOptimizer_Stage3), runtime/zero/partition_parameters.py (_allgather_param, "
    "_reduce_scatter_gradients), runtime/zero/constants.py (defaults), runtime/engine.py (allreduce_gradients, "
    "_configure_zero_optimizer); the GPT of Megatron-DeepSpeed (megatron/model/transformer.py, 2021)",
    version="DeepSpeed v0.5.0 (f28432441b, 2021-08-17)",
    zero_stages=(0, 1, 2, 3),
    pipeline_zero_stages=(0, 1),
    data_parallel="zero_optimization.stage 0–3 (ZeRO-1 optimizer states, ZeRO-2 + gradients, ZeRO-3 + parameters "
    "fetched per parameter with a device sync around each fetch); PipelineEngine only with stage 0 or 1",
    schedules=("1f1b",),
    sequence_parallel=False,
    recompute=("none", "full"),
    pp_with_tied_embeddings=True,
    cp_comms=(),
    precisions=("fp16", "fp32"),  # no bf16 before v0.5.5
    unbuilt=MEGATRON_2020.unbuilt,  # Megatron-DeepSpeed's 2021 GPT: what megatron-2020 builds
    runs_source="microsoft/DeepSpeed v0.5.0 (f28432441b): runtime/pipe/engine.py:56 ('ZeRO-2 and ZeRO-3 are "
    "incompatible with pipeline parallelism'), runtime/pipe/schedule.py (TrainSchedule: 1F1B-style only), "
    "runtime/pipe/module.py:73 (TiedLayerSpec), runtime/activation_checkpointing (whole-layer checkpoints), "
    "runtime/engine.py (fp16 / fp32 only: no bf16 before v0.5.5), no deepspeed/sequence (Ulysses: 2023)",
)

ERA_STACKS: dict[str, Stack] = {MEGATRON_2020.id: MEGATRON_2020, DEEPSPEED_2021.id: DEEPSPEED_2021}
