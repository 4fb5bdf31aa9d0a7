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

``megatron-2021`` — Megatron-LM v2.5 (tag v2.5, e269e20064, 2021-08-10), the code of the PTD-P paper's runs
(Narayanan et al., SC'21, arXiv 2104.04473: tensor + pipeline + data parallelism, interleaved 1F1B). Read at that tag:

* data parallelism: with pp > 1 or virtual stages ``setup_model_and_optimizer`` asserts ``--DDP-impl local``
  (``megatron/training.py``: "We only support local DDP with multiple micro-batches"); ``train_step`` calls
  ``allreduce_gradients`` once after ``forward_backward_func`` returns (one all-reduce per grad buffer,
  ``megatron/model/distributed.py``), nothing overlapped; no optimizer sharding: ZeRO-0 only (torch DDP at pp = 1
  overlaps its buckets, but only on the last micro-batch: ``no_sync`` around the others; not priced here);
* pipeline (``megatron/schedules.py``): ``forward_backward_pipelining_without_interleaving`` (1F1B) and
  ``forward_backward_pipelining_with_interleaving`` (``--num-layers-per-virtual-pipeline-stage``:
  ``megatron/arguments.py`` asserts pp > 2 ("interleaved schedule is not supported for pipelines with 2 stages":
  README) and ``num_layers`` divisible by the layers per virtual stage; ``get_forward_backward_func`` asserts the
  micro-batches divisible by pp); ``ParallelTransformer`` asserts ``num_layers % pp == 0`` and builds
  ``num_layers / pp / v`` layers per chunk: even stages only;
* p2p (``megatron/p2p_communication.py`` ``_communicate``, every schedule): ``batch_isend_irecv`` then ``wait`` on
  every request then ``torch.cuda.synchronize()``: blocking both ends. ``--scatter-gather-tensors-in-pipeline``
  (on unless ``--no-scatter-gather-tensors-in-pipeline``; default on since 72e4230bb5, 2021-02-16): the sender
  keeps its TP rank's 1/tp of the flattened tensor (``mpu.split_tensor_into_1d_equal_chunks``), the receiver
  all-gathers the chunks over the TP group after the synchronize (``mpu.gather_split_1d_tensor``:
  ``torch.distributed.all_gather``). Megatron-core core_v0.16.1 still parses the flag
  (``megatron/training/arguments.py``) but ``megatron/core/pipeline_parallel/p2p_communication.py`` never reads it;
* tied embeddings with pp > 1 (``megatron/model/module.py`` ``initialize_word_embeddings``; ``train_step``'s
  word-embedding all-reduce over the embedding group) and the clip's norm over the model-parallel group, as v2.0;
* recompute ``--checkpoint-activations`` (whole layers, ``--checkpoint-num-layers``) and
  ``--distribute-checkpointed-activations`` (the checkpointed inputs split over TP: ``mpu/random.py``; a memory
  saving this preset does not price); no sequence parallelism or selective recompute (2022);
* precisions: ``--fp16`` (gradients all-reduced in fp16 unless ``--accumulate-allreduce-grads-in-fp32``) and
  ``--bf16`` (b4bc51b1e7), which forces ``accumulate_allreduce_grads_in_fp32`` (fp32 main grads, all-reduced in
  fp32, local DDP: ``arguments.py``); kernels and model as v2.0 (fused scale-mask-softmax with fp16 or bf16 input,
  bias-GeLU, bias-dropout-add, the s×s scores through ``torch.baddbmm``/``bmm``, attention and hidden dropout 0.1;
  GPT with a tied output layer); its README was tested with NGC PyTorch 20.12 (NCCL 2.8.3).

``megatron-2022`` — Megatron-LM main at 52e636888c (2022-11-29), the last first-parent commit before FlashAttention
(d693034ecf, 2022-12-08): the code of Korthikanti et al. (MLSys'23, arXiv 2205.05198: sequence parallelism and
selective recompute) after the distributed optimizer (329fe5820f, 2022-02). Read at that commit:

* data parallelism: local DDP (``--DDP-impl local``, the default: ``arguments.py`` L795; ``training.py`` L377
  asserts it with pp > 1 or virtual stages) and ``--use-distributed-optimizer`` (L831; asserts local DDP, L174):
  ZeRO-0 and ZeRO-1. ``train_step`` (``training.py`` L391) calls ``optimizer.reduce_model_grads`` after
  ``forward_backward_func`` returns: ZeRO-0 all-reduces each grad buffer (``optimizer/optimizer.py`` L279,
  ``model/distributed.py`` L202), ZeRO-1 reduce-scatters it (``optimizer/distrib_optimizer.py`` L536,
  ``_reduce_scatter_base``) and all-gathers the updated parameters after the step (``gather_model_params``, L586):
  nothing overlapped with backward. With bf16 the fp32 main grads are the model's grads, a full buffer (README
  "Distributed Optimizer");
* pipeline (``megatron/schedules.py``): 1F1B and interleaved 1F1B as v2.5 (``--num-layers-per-virtual-pipeline-
  stage``: ``arguments.py`` L133-142 asserts pp > 2 and num_layers divisible; ``get_forward_backward_func`` L19-35
  the micro-batches divisible by pp); ``transformer.py`` ``_get_num_layers`` L771 asserts ``num_layers % pp == 0``
  (``--standalone-embedding-stage``, an embedding-only first stage, is not priced): even stages only;
* p2p (``megatron/p2p_communication.py`` ``_communicate`` L101-252): ``batch_isend_irecv``, ``wait`` on each request,
  ``torch.cuda.synchronize()`` (L227-231): blocking both ends, both schedules. Scatter-gather
  (``--no-scatter-gather-tensors-in-pipeline`` off by default, ``arguments.py`` L803) only ``not
  args.sequence_parallel`` (L149, L188, L234): without SP each TP rank sends its 1/tp and the receiver all-gathers;
  with SP the tensor is already (s/tp)·b·h (``schedules.py`` L276-280, L518-519) and is sent whole;
* sequence parallelism ``--sequence-parallel`` (L632; off at tp = 1, L315): its norms' gradients all-reduced over TP
  (``optimizer.py`` ``allreduce_layernorm_grads`` L256), tied embeddings' over the embedding group
  (``allreduce_word_embedding_grads`` L202) before the DP reduction;
* recompute ``--recompute-granularity full|selective`` (L553): full = whole layers, ``--recompute-method uniform``
  (``--recompute-num-layers`` 1) or ``block`` (``transformer.py`` ``_checkpointed_forward`` L898-939); selective =
  ``CoreAttention`` (the s×s scores, softmax, attention dropout and the PV bmm) under ``tensor_parallel.checkpoint``
  (``transformer.py`` L366, L377-393, L490);
* precisions: ``--fp16`` (dynamic loss scale) and ``--bf16``, which forces ``accumulate_allreduce_grads_in_fp32``
  (``arguments.py`` L151-160): fp32 gradients reduced in fp32; fp16 reduces fp16;
* kernels as v2.x: ``CoreAttention`` through the s×s scores (``transformer.py``: ``torch.baddbmm`` L245,
  ``FusedScaleMaskSoftmax``, ``torch.bmm`` L293), ``bias_gelu_impl``, ``bias_dropout_add_fused_train``, attention and
  hidden dropout 0.1 (``arguments.py`` L491-494). New beside them and not priced here (nor on ``megatron``): the async
  TP all-reduce / SP all-gather with the column-parallel backward and the fused fp32 weight-gradient accumulation
  (``core/tensor_parallel/layers.py`` ``LinearWithGradAccumulationAndAsyncCommunication``);
* the model: GPT (LayerNorm, GeLU, learned positions, MHA, biases, tied output layer); no GQA, SwiGLU, RMSNorm or
  RoPE yet (``SwitchMLP``, ``--num-experts``, is a top-1 router looping over whole experts on each rank: not the
  planner's MoE). NCCL: its README asks for "the latest release of NGC's PyTorch container" (22.0x: NCCL 2.11–2.15);
  NVIDIA/nccl v2.11.4-1 … v2.15.5-1 keep v2.10.3-1's A100 tuner constants (``src/graph/tuning.cc``: hwLat, the 1.9
  ring plateau, the 235 GB/s cap, LL128 × 0.7 with one rank a node) but for v2.12–v2.13's 28 µs network ring Simple
  step (9.6 before and from v2.14.3-1): the ``"2.10"`` era.

``deepspeed-2021`` — DeepSpeed v0.5.0 (microsoft/DeepSpeed tag v0.5.0, f28432441b, 2021-08-17), the release of 2021-08
(what the MT-NLG rows ran) (ZeRO-3's issuing is the same from v0.3.13, 2021-03, to v0.5.4; v0.5.5, 2021-11, changed
the fetch's gathers: c0eeb69df #1188, one synchronous launch of a module's parameters). Each claim read at that tag:

* ZeRO-3 fetches one parameter at a time, a device-wide sync around every fetch, one prefetch in flight, the
  recompute gathering again, one reduce-scatter per parameter gradient (``planner.compose.zero3_sequence``, which
  cites every rule at file:line; the kernels around each collective: ``planner.pricing.launches``); ZeRO-2 reduces
  each micro-batch's gradients in its backward, one ``dist.reduce`` per owner slice of a bucket
  (``planner.workload.zero2_reduce``), ZeRO-0/1 once at the accumulation boundary (``runtime/engine.py:1255-1266`` ``allreduce_gradients``); ``overlap_comm`` is forced off
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
    # m = pp: every forward first (v2.5 megatron/schedules.py:169-171, 52e636888c :295-297; v2.0 has no interleaving)
    interleaved_all_warmup=True,
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

MEGATRON_2021 = Stack(  # v2.0's kernels, model, DDP and NCCL era (above), with what v2.5 added
    **MEGATRON_2020.model_dump()
    | dict(
        id="megatron-2021",
        title="Megatron-LM v2.5 (2021, PTD-P: interleaved 1F1B, scatter-gather pipeline sends, fp16/bf16, local DDP)",
        # every transfer of both schedules blocks both ends (_communicate: wait + torch.cuda.synchronize())
        p2p_blocking=("1f1b", "interleaved-1f1b"),
        p2p_scatter_gather=True,  # --scatter-gather-tensors-in-pipeline, on by default
        grad_add="main_grad_if_bf16",  # fp32 main_grad hooks with --bf16 (model/distributed.py:168-177)
        source="NVIDIA/Megatron-LM v2.5 (e269e20064): megatron/model/transformer.py (ParallelAttention through the "
        "s×s scores, FusedScaleMaskSoftmax, bias_gelu_impl, bias_dropout_add_fused_train, attention and hidden "
        "dropout 0.1: megatron/arguments.py defaults), megatron/model/distributed.py (local DDP: allreduce_gradients "
        "after the step's micro-batches), megatron/p2p_communication.py (_communicate: batch_isend_irecv + wait + "
        "torch.cuda.synchronize; split_tensor_into_1d_equal_chunks before the send, gather_split_1d_tensor after "
        "the receive), megatron/training.py (word-embedding all-reduce)",
        version="Megatron-LM v2.5 (e269e20064, 2021-08-10)",
        data_parallel="ZeRO-0 only: megatron/model/distributed.py DistributedDataParallel (--DDP-impl local, "
        "required with pp > 1): the gradient buffers all-reduced once after the step's last backward; no optimizer "
        "sharding",
        schedules=("1f1b", "interleaved-1f1b"),
        interleaved_min_pp=3,  # megatron/arguments.py: 'pipeline-model-parallel size should be greater than 2'
        precisions=("fp16", "bf16", "fp32"),  # --bf16 forces fp32 gradient accumulation and all-reduce
        runs_source="NVIDIA/Megatron-LM v2.5 (e269e20064, 2021-08-10): megatron/arguments.py "
        "(--num-layers-per-virtual-pipeline-stage: pp > 2, num_layers divisible by it; --checkpoint-activations, "
        "--distribute-checkpointed-activations; --fp16, --bf16 (accumulate_allreduce_grads_in_fp32 forced); "
        "--DDP-impl local|torch; --no-scatter-gather-tensors-in-pipeline; no --sequence-parallel, "
        "--recompute-granularity or --use-distributed-optimizer), megatron/schedules.py (no pipelining, 1F1B, "
        "interleaved 1F1B: micro-batches divisible by pp), megatron/training.py (local DDP with pp > 1; "
        "train_step), megatron/model/transformer.py (num_layers divisible by pp, then by the virtual stages), "
        "megatron/model/gpt_model.py (GPT: LayerNorm, GeLU, learned positions, MHA, tied output layer)",
    )
)

MEGATRON_2022 = Stack(  # v2.5's kernels, model, p2p and NCCL era (above), with what 2022 added
    **MEGATRON_2021.model_dump()
    | dict(
        id="megatron-2022",
        title="Megatron-LM 2022 (52e636888c: sequence parallelism, selective recompute, distributed optimizer, "
        "unfused attention)",
        grad_add="main_grad_fused",  # main_grad hooks; fused wgrad accumulation on by default (arguments.py:634)
        source="NVIDIA/Megatron-LM 52e636888c: megatron/model/transformer.py (CoreAttention through the s×s scores: "
        "baddbmm, FusedScaleMaskSoftmax, bmm; bias_gelu_impl, bias_dropout_add_fused_train, attention and hidden "
        "dropout 0.1: megatron/arguments.py defaults), megatron/optimizer/optimizer.py and distrib_optimizer.py "
        "(reduce_model_grads after the step's micro-batches: all-reduce or reduce-scatter; gather_model_params "
        "after the step), megatron/p2p_communication.py (_communicate: batch_isend_irecv + wait + "
        "torch.cuda.synchronize; scatter-gather without --sequence-parallel only)",
        version="Megatron-LM main 52e636888c (2022-11-29)",
        zero_stages=(0, 1),
        pipeline_zero_stages=(0, 1),
        data_parallel="ZeRO-0: megatron/model/distributed.py DistributedDataParallel (--DDP-impl local): the grad "
        "buffers all-reduced once after the step's last backward; ZeRO-1: --use-distributed-optimizer (optimizer "
        "states and fp32 master weights sharded, the grad buffer reduce-scattered after the last backward, the "
        "parameters all-gathered after the step)",
        sequence_parallel=True,
        recompute=("none", "selective", "full"),
        runs_source="NVIDIA/Megatron-LM 52e636888c (2022-11-29): megatron/arguments.py (--sequence-parallel; "
        "--recompute-granularity full|selective, --recompute-method uniform|block; --use-distributed-optimizer "
        "with --DDP-impl local; --num-layers-per-virtual-pipeline-stage: pp > 2; --fp16, --bf16 "
        "(accumulate_allreduce_grads_in_fp32 forced); --no-scatter-gather-tensors-in-pipeline), megatron/schedules.py "
        "(no pipelining, 1F1B, interleaved 1F1B: micro-batches divisible by pp), megatron/training.py (local DDP "
        "with pp > 1; train_step: reduce_model_grads, step, gather_model_params), megatron/model/transformer.py "
        "(num_layers divisible by pp, then by the virtual stages; CoreAttention checkpointed under selective), "
        "megatron/model/gpt_model.py (GPT: LayerNorm, GeLU, learned positions, MHA, tied output layer)",
    )
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
    zero2_reduce="owner",  # ZeRO-2: dist.reduce per owner slice of each bucket (zero/stage2.py:924-939)
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

from planner.specs.stack_nemo import NEMO_2407  # noqa: E402  # NeMo 24.07: the megatron preset with apex's optimizer
from planner.specs.stack_titan import TITAN_STACKS  # noqa: E402  # torchtitan at its published runs' commits

ERA_STACKS: dict[str, Stack] = {
    s.id: s for s in (MEGATRON_2020, MEGATRON_2021, MEGATRON_2022, DEEPSPEED_2021, NEMO_2407, *TITAN_STACKS)
}
