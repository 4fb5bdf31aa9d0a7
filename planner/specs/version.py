"""The cost model's version: which formulas priced a plan.

``COST_MODEL_VERSION`` is recorded in every Plan and PlanResponse, and the service's store keys its answers by it, so an
answer priced by an older cost model is never served as current. Bump it in the same change as anything that alters a
number the planner reports for the same inputs (a formula in ``cost``, ``memory``, ``comm``, ``simulate`` or
``analytic``, a default efficiency, a reserve, a tie-break that picks another plan); ``tests/test_plan_reproducible.py``
holds fingerprints of reference estimates per version and fails when the numbers move without a bump.
"""

from __future__ import annotations

#: 1: the first versioned model (schema 2 plans). 0 in a plan means "before versioning" (schema 1).
#: 2: equal step times rank by peak memory, then simplicity (same estimates; another plan may win).
#: 3: memory headroom (options.memory_headroom, default 5 % of the GPU's memory: other plans may win, ``fits``
#:    may change); ZeRO-3's exposed per-layer gathers counted as DP communication in the breakdown, not compute.
#: 4: per-op compute (GEMM wave/tile quantization over SMs, attention by kernel, achieved HBM by size) and training
#:    stacks (training.stack: attention kernel, dropout, activation formula, DP grad overlap).
#: 5: collectives by nccl-tests bus bandwidth by size and NCCL's latency model, hierarchical multi-node, NVLS; compute
#:    slowed under overlapped communication; optimizer step at achieved HBM; torchtitan's own activations/FSDP2
#:    buffers/loss peak, compiled kernels; the bundled runtime's lean kernels (fused RMSNorm, GQA without repeated K/V);
#:    residual constants (built-in per stack and GPU generation, or the request's calibration); V100.
#: 6: the bundled runtime's (``meshplan`` stack's) states as FSDP2's mixed-precision policy holds them (fp32 parameters
#:    and gradients, bf16 copies unsharded below ZeRO-3), its loss's three fp32 logit tensors and fp32 gradient
#:    reduction (measured on an H200); ZeRO-3 gradients reduce-scattered per micro-batch.
#: 7: a host's (CPU "GPU") step-end collectives as the runtime issues them: the SP norms' Partial gradients
#:    reduced once per step (was: per tensor in the clip), the gradient clip's partial-norm all-reduce.
#: 8: a host's pipeline-schedule actions: the run's measured host work per forward and backward of every chunk of
#:    a pipelined plan (``HostDispatch.pp_action_us``).
#: 9: the search enumerates only what the request's training stack runs (``Stack.zero_stages``, ``schedules``,
#:    ``sequence_parallel``, ``recompute``, ``pp_with_tied_embeddings``: issue 27): no cost changes, but
#:    another plan may win (e.g. no ZeRO-2/3 for ``megatron``, no pp > 1 on tied embeddings for ``meshplan``).
#: 10: the collectives a configuration issues are the stack's (``Stack.tp_collectives``, ``dp_collectives``,
#:    ``step_reductions``; ``planner.workload.collectives``), on every device: the bundled runtime's pattern (an
#:    input-gradient all-reduce per column-parallel linear, one DP collective per FSDP2-wrapped module, its step-end
#:    reductions) was priced only on a host with measured dispatch, Megatron's everywhere else; sequence
#:    parallelism's all-gathers and reduce-scatters are priced as the separate calls they are (each its own
#:    latency), no longer as one all-reduce of the same bytes.
#: 11: FP8 training (``training.precision: "fp8"``, ``training.fp8_recipe``; ``planner.specs.fp8``,
#:    ``planner.workload.fp8``): a block's linears at the FP8 peak × a measured FP8 GEMM ceiling with FP8
#:    operand bytes, casts/transposes/amax passes as memory-bound ops, FP8 FSDP weight all-gathers (torchtitan
#:    tensorwise), cached FP8 weights and scaling state in memory. Every bf16/fp16 number as in 10.
#: 12: pipeline sends that block both ends where the stack synchronises on them (``Stack.p2p_blocking``: Megatron's
#:    non-interleaved 1F1B, ``batch_p2p_sync``) are on the sending and receiving actions, not an asynchronous lag.
#: 13: DP gradients on the wire in the dtype the stack reduces in (``Stack.reduce_dtype``,
#:    ``workload.collectives.grad_bytes``): fp32 under FSDP2's ``reduce_dtype=float32`` (torchtitan, the bundled
#:    runtime) and Megatron-core under bf16 (``accumulate_allreduce_grads_in_fp32``); was the training dtype.
#: 14: context parallelism priced and searched (issue 24): ``parallel.cp`` / ``cp_comm`` are part of a class; a CP
#:    class is its layers at the local s / cp tokens with cp× the local attention square, its DP/ZeRO group over
#:    dp × cp, and the exchange's exposed time (the ring's steps beyond the attention blocks they overlap; all-gathers
#:    and all-to-alls blocking); all-to-all priced (bus (n − 1)/n); ``TimeBreakdown.cp_comm_s``. Requests below
#:    16,384 tokens whose classes without CP fit are unchanged.
#: 15: overlapped tensor parallelism (``parallel.tp_comm_overlap``; ``planner.workload.tp_overlap``,
#:    ``planner.pricing.tp_overlap``): a block's SP all-gathers and reduce-scatters pipelined with their GEMMs as the
#:    stack does (Transformer Engine userbuffers: ring / pipeline / bulk, all 8; torchtitan async TP: the 4 forward
#:    and the 2 backward all-gathers), GEMMs slowed by σ while overlapped; searched with SP where the stack runs it.
#:    Off unless chosen: every plan without it as in 14.
#: 16: DeepSpeed ZeRO-3 as it issues its collectives (``Stack.zero3_fetch``, ``zero3_reduce_bucket``): one
#:    all-gather per linear module over the persistence threshold at every fetch (forward and backward), each with
#:    its own ring latency, and the gradients' reduce-scatters in 5e8-element buckets; was one per layer.
#: 17: mixture-of-experts models whose blocks are all MoE are priced, with expert parallelism (``parallel.ep``,
#:    ``etp``; issue 23): the router, grouped expert GEMMs by their per-expert shape, shared experts, permutes, the
#:    token all-to-all over the EP group (``TimeBreakdown.ep_comm_s``), expert states sharded and their gradients
#:    synced over expert-DP; dense plans' numbers as in 16 (their breakdown gains ep_comm_s = 0).
#: 18: the end of a Megatron step as Megatron-core issues it (issue 27 §2; core_v0.16.1): ``finalize_model_grads``
#:    reductions after the DP sync (SP norms' gradients over TP, tied embeddings' between the first and last stage,
#:    the gradient norm; ``Stack.finalize_grads``), its DDP gradients in one bucket without ``overlap_grad_reduce``
#:    and DeepSpeed's in ``reduce_bucket_size`` buckets (``workload.collectives.grad_bucket``; both were Megatron's
#:    overlapped default of max(40M, 1M·dp) parameters); the fabric above a scalable unit
#:    (``ClusterSpec.oversubscription``, ``scalable_unit_nodes``; unset: non-blocking, as before); a stack whose
#:    loss is a fused cross-entropy over the 16-bit logits (``Stack.loss = "fused"``, overridable) holds the logits
#:    and their gradient, one kernel each way.
#: 19: the 500 W H100 (``h100-sxm-96gb-hbm2e``, torchtitan's benchmark GPUs) at its measured GEMM rates (Meta's
#:    FBGEMM on "H100 500W": BF16 585.2, FP8 row-wise 1,125.5 TFLOPS at 8192³) instead of datasheet rates
#:    interpolated in board power: its GEMMs and attention 17.5 % slower (BF16 peak 731.5, was 886.8).
#: 20: a MoE plan's memory per stage itemises the routed experts' weights, gradients and optimizer states
#:    (``StageMemory.expert_*_gib``), each part split in its own bytes per parameter (the experts' ZeRO shards span
#:    expert-DP, not dp): weights / gradients / optimizer of MoE plans move, totals, times and choices do not.
#: 21: a stack's flash kernel (``Stack.flash_kernel``, overridable): ``"triton"`` prices attention at the published
#:    rates of FlashAttention in Triton (FA2 paper Fig. 4 on A100; FlashAttention v1's on H100), llm-foundry's
#:    benchmark default until 2024-04 (the MPT dev-set rows); the default ``"fa2"`` is unchanged.
#: 22: collectives across nodes as NCCL's tuner selects them (``planner.pricing.nccl``): algorithm × protocol (ring, tree,
#:    NVLS-tree, PAT × LL, LL128, Simple) by size and ranks, at the stack's NCCL era (``Stack.nccl``: 2.10 or 2.23).
#: 23: the data-parallel collectives per micro-batch or once per step as each stack's engine issues them (issue 27 §2,
#:    ``Stack.grad_accumulation``, ``workload.accumulation``): FSDP without no_sync reduces (and, ZeRO-2, gathers) in
#:    every micro-batch, the bundled runtime gathers its ZeRO-1/2 units in every forward, FSDP2 under a pipeline
#:    schedule reduces ZeRO-3 gradients once per step and holds them whole in fp32 meanwhile.
#: 24: the ``megatron-2020`` preset (Megatron-LM v2.0) prices the 2020–2021 Megatron runs, so the built-in residual rows
#:    fitted on them are its rows (``("megatron-2020", *)``, the same constants); today's ``megatron`` has no row.
#: 25: the "zoo" activations (meshplan, deepspeed stacks) price QK-norm inputs and attention sinks' padded copies;
#:    projection QK-norms and sinks split with their heads under TP (every stack); gpt-oss's expert and router biases.
#: 26: latent attention (model.mla) priced on the meshplan stack as runtime.models.mla keeps it (the "zoo" activations'
#:    ``mla_zoo_saved_terms``; was refused there), never with context parallelism (``Stack.cp_with_mla``).
#: 27: FSDP2's copies on the compute stream (``workload.accumulation.fsdp2_copy_bytes``; torchtitan, the bundled runtime on a
#:    GPU): each all-gather's copy-out of the gathered parameters and each reduce-scatter's copy-in of the gradients
#:    into the reduce-dtype buffer, per micro-batch where the collective runs per micro-batch, at achieved HBM bandwidth.
#: 28: DeepSpeed's pipeline sends block both ends (``Stack.p2p_blocking`` on the ``deepspeed`` preset: PipelineEngine's
#:    ``p2p.send``/``recv`` are a blocking ``dist.broadcast`` at v0.5.0 and blocking ``dist.send``/``recv`` since).
#: 29: sliding-window attention (``ModelSpec.sliding_window``: gpt-oss, Mistral 7B v0.1): a windowed block's attention
#:    at its share of the causal pairs (FLOPs, flash time at the band's rate), windowed and full blocks priced by kind.
#: 30: the bundled runtime's latent attention as it runs (``Stack.mla_pad_v``, the meshplan stack): P·V at v padded to
#:    the q/k width, v's pad and the sliced output's copy; its TP backward all-reduces the up projections' input
#:    gradients at the latents' widths (was: the hidden size each, down projections included) and the rotary key's.
#: 31: scatter-gather pipeline sends (``Stack.p2p_scatter_gather``; the ``megatron-2021`` preset, Megatron-LM v2.5
#:    ``--scatter-gather-tensors-in-pipeline``): with tp > 1 and no SP a boundary's lag is the send of act / tp over
#:    each rank's own link + the receiving stage's TP all-gather of act; only megatron-2021 and megatron-2022 (added
#:    later without a pricing change; it scatters without SP only) set it. megatron-2021 (and megatron-2022) take
#:    megatron-2020's built-in residual rows (``residuals.RESIDUAL_LINEAGE``: the v2.0 code it continues).
#: 32: the ``deepspeed-2021`` preset (DeepSpeed v0.5.0, ``planner.specs.stack_eras``): ZeRO-3 as that release issues it
#:    (``Stack.zero3_fetch = "param"``, ``planner.compose.zero3_sequence``): one all-gather per parameter with a device
#:    sync around each fetch, one prefetch in flight, re-gathered in the recompute unless kept within the reuse
#:    distance, one reduce-scatter per parameter gradient behind a host-synced bucket; ZeRO-1's gradients all-reduced
#:    (``Stack.zero1_sync``). Other presets' numbers as in 31.
#: 33: padding to capacity (``MoeSpec.pad_to_capacity``, Megatron-core core_v0.16.1 ``--moe-pad-expert-input-to-capacity``:
#:    ``moe_utils.get_capacity``, ``token_dispatcher.MoEAlltoAllTokenDispatcher.preprocess``): every expert's grouped
#:    GEMMs at C = ⌈T·k/E·cf⌉ rows per source rank, the all-to-all at C·E rows per rank, permutes and saved activations
#:    at the padded rows, whatever the load; refused on torchtitan (dropless).
#: 34: torchao rowwise FP8 scales both backward GEMMs' outputs after the GEMM (``RecipeFacts.rescale_bytes``: its
#:    slow-accumulation backward GEMMs run as cuBLAS tensorwise with unit scales, then ``output *= a_inv * b_inv``,
#:    torchao float8_ops.py ``addmm_float8_unwrapped`` v0.10.0–v0.18.0): 4 bytes per element of each input and weight
#:    gradient on the compute stream.
#: 35: the ``deepspeed-2021`` preset's ZeRO-3 with the small kernels around each fetch and collective
#:    (``planner.pricing.launches``, ``compose.zero3_sequence``; issue 27 §2): PyTorch's list all-gather copies each
#:    of the dp slices out of its flat buffer and the list reduce-scatter each into one (ProcessGroupNCCL, v1.9 era),
#:    each its own launch; each gather's zero-fill and shard copy (partition_parameters.py:838-861), each gradient's
#:    ``div_`` (stage3.py:1985-1986), each fetched module's parameter norms formatted into a debug message through
#:    ``.item()`` (stage3.py:452-457); every kernel after its launch, so after each host wait the device idles for a
#:    launch. Its ZeRO-2 reduces each bucket with one ``dist.reduce`` per owner slice (stage2.py:853-939,
#:    ``Stack.zero2_reduce``, ``workload.zero2_reduce``) at NCCL's ring-reduce price (``pricing.nccl``: nRanks steps,
#:    algBw = busBw), on the compute stream (``overlap_comm`` off at stage 2). Other presets' numbers as in 34.
#: 36: Megatron-core's alltoall dispatcher and grouped experts as they run (``Stack.moe_dispatch = "megatron"``, the
#:    megatron preset; core_v0.16.1 ``token_dispatcher.py`` / ``experts.py``, ``workload.expert_parallel``): the sort
#:    of the received rows by local expert and its inverse (E/ep > 1), the probabilities' all-to-all and the token
#:    counts' all-gather on the compute stream, gpt-oss's per-expert fc2 bias loop (``TEGroupedMLP._apply_bias``),
#:    and the saved tensors per routed row without a combine copy (the probabilities ride in the fused activation),
#:    beside the TE dense MLP's 3·f (was 4·f) it replaces, the experts' GEMM inputs at 1 byte under FP8 (TE v2.9
#:    ``GroupedLinear`` saves them quantized, columnwise only). Other stacks unchanged.
#: 37: the gradient-accumulation pass (``Stack.grad_add``, ``workload.accumulation.add_bytes``, ``pricing.grad_add``):
#:    each micro-batch's weight gradients added into the step's on the compute stream at achieved HBM bandwidth —
#:    autograd's in-place ``grad += new`` from the second micro-batch (Megatron-LM v2.0, DeepSpeed ZeRO-0/1), fp32
#:    ``main_grad.add_`` hooks (Megatron-LM v2.5 under bf16; DeepSpeed's BF16_Optimizer at ZeRO-0), hooks + the fused
#:    weight-gradient GEMM reading and writing its fp32 C (Megatron-LM 52e636888c, Megatron-core 0.16.1), the 1/dp
#:    shard accumulated where gradients are reduced every micro-batch, FSDP2's unsharded fp32 accumulation with sync
#:    deferred; the main-grad buffer's zeroing once per step.
#: 38: the built-in residual row (torchtitan, ampere) refitted (``bench/fit_residuals.py``) on its runs priced on the
#:    network they ran on (``bench/bench_fidelity.py`` ``CLUSTER_NETWORK``: torchtitan's 2024-04 A100 tables on AWS
#:    P4de, 4 × 100 Gb/s EFA per node, not a DGX's 8 × 200 Gb/s): 1.222 → 1.098, the pooled (torchtitan, *) row
#:    1.177 → 1.144 (torchtitan on a GPU generation without its own row). No formula changed; other rows as in 37.
#: 39: built-in residual rows for today's Megatron-core (``("megatron", "hopper")`` and ``("megatron", "*")``, compute
#:    scale 1.016), fitted on the six Megatron-Bridge Llama 3 70B DGX-H100 rows now expressed with their recipes'
#:    settings (``bench/bench_fidelity.py`` ``BRIDGE_RECIPES``); was identity. No formula changed; others as in 38.
#: 40: Transformer Engine keeps FP8 linears' inputs quantized (the ``te`` activation formula under FP8,
#:    ``workload.activations.te_block_saved_terms``; TE v2.9 layernorm_linear.py / linear.py): the norm outputs the QKV
#:    and fc1 GEMMs read and fc2's input at 1 byte, the proj's input a 1-byte copy beside the 16-bit attention output.
#:    Memory only; other stacks and precisions unchanged.
#: 41: FP8 in a MoE block (``pricing.expert_parallel.fp8_flags`` / ``fp8_cast_seconds``, ``workload.fp8.
#:    grouped_cast_ops``): the dense MLP a MoE MLP replaces is taken away at the precision the block priced it (FP8
#:    GEMMs and their casts; was 16-bit GEMMs, no casts), shared experts in FP8 with their casts; on the megatron stack
#:    the grouped experts run TE's FP8 ``GroupedLinear`` (core_v0.15 experts.py:837-840, 881-887, 977-978; TE v2.9
#:    grouped_linear.py, cast.cpp:103-150, quantizer.cpp:497-536, fp8_padding.py:113-139): FP8 GEMMs, every expert's
#:    slice of both linears' inputs and output gradients quantized (current scaling: amax, scale and cast kernels per
#:    expert), the rows padded to 16 and unpadded. 16-bit runs unchanged.
#: 42: torchtitan's TP collectives as its 2025-06 code issues them: under FP8 tensorwise the block's sequence-parallel
#:    all-gathers move FP8 (1 byte) and their casts run on the local shard before the gather (torchao
#:    ``Float8ColwiseParallel``/``Float8RowwiseParallel``/``PrepareFloat8ModuleInput`` at 6243040, torchtitan
#:    ``apply_tp`` at 820504e; ``workload.fp8.fp8_tp_gather``), blocking and async-TP alike; under op-level selective
#:    checkpointing the backward reruns the forward's two all-gathers (``_save_list`` keeps reduce-scatters, not
#:    all-gathers; ``workload.collectives.rerun_sp_gathers``). The (torchtitan, hopper) residual refitted 1.157 →
#:    1.178, (torchtitan, *) 1.143 → 1.159. Other stacks unchanged.
#: 43: FSDP1's passes over each unit's unsharded gradient where it reduces per micro-batch (``fsdp1``/``fsdp1_no_sync``
#:    engines, ``workload.accumulation.fsdp1_reduce_bytes``; torch FSDP1 ``_flat_param.py`` split views,
#:    ``_runtime_utils.py`` ``_post_backward_hook``/``_reduce_grad``): autograd's split-backward cat into the flat
#:    gradient, the cast to an fp32 reduce dtype, the in-place pre-divide, on the compute timeline; ``reduce_dtype``
#:    overridable on a stack (Composer's PURE: bf16); a trainer's metrics over the logits after every micro-batch's
#:    backward (``Stack.train_metrics``, ``workload.ops.metric_bytes``: Composer's two cross-entropy train metrics of
#:    llm-foundry's MPT, an fp32 cast and log_softmax each under autocast). Only llm-foundry's MPT rows move.
#: 44: DeepSpeed's pipeline sends partitioned over TP (``Stack.p2p_scatter_gather`` on the ``deepspeed`` preset): with
#:    tp > 1 PipelineEngine sends each rank's 1/tp of an activation and of its gradient (``PartitionedTensor``) and the
#:    receiver all-gathers it over the TP group (``pipe_partitioned`` / ``grad_partitioned`` default True, DeepSpeed
#:    38327e07f6 runtime/config.py:467-468, runtime/pipe/engine.py:144-145, 719-727, 743-757, 826-845, 1062-1075; since
#:    v0.5.4, e2fdd254e "Big science related changes"): was each rank sending the whole tensor. ``deepspeed-2021``
#:    (v0.5.0: activations partitioned, gradients whole) unchanged.
#: 45: torchtitan's context parallelism as torch's experimental ``context_parallel`` runs it (``all_gather``; torch
#:    ``distributed/tensor/experimental/_attention.py`` of late 2024: ``_AllGatherRotater``, ``_SDPAMerger``,
#:    ``_templated_ring_attention_backward``; ``workload.context_parallel.torch_ring_passes``): K and V gathered at the
#:    query heads (torchtitan's ``repeat_kv`` before SDPA), one all-gather of cat(K, V) beside the first block (forward
#:    and backward), dK/dV passed along a ring in fp32 after every block (the last exposed), no reduce-scatter; the
#:    merge of each block's output in fp32 and the fp32 dQ/dK/dV accumulation as memory-bound passes. (torchtitan, *)
#:    residuals refitted. Other stacks and torchtitan without CP unchanged.
#: 46: the built-in residual rows refitted (``bench/fit_residuals.py``) with torchtitan's six 405B / 512 H100 pipelined
#:    rows of its 2024-12 benchmark now expressed (``bench/bench_fidelity.py`` ``titan_pp_row``: the local batch split
#:    into pp micro-batches, ``generate_split_points``' stages and cut, FSDP not resharded after forward under PP, as
#:    pytorch/torchtitan 9dec370 builds them): (torchtitan, hopper) 1.171 → 1.178, (torchtitan, *)
#:    1.153 → 1.162. No formula changed.
#: 47: FSDP2 under ``torch.distributed.pipelining`` holds the stage's gradients unsharded in its reduce dtype across
#:    the step's micro-batches (``workload.accumulation.accumulated_grad_bytes``, ``DpSchedule.whole_grads``,
#:    ``compose.memory.state_bytes``): the stage turns gradient sync off on every backward but the last (torch 2.13.0
#:    ``pipelining/stage.py:844-847``, ``perform_reduce_grad`` :1164-1190; the 2024 form
#:    ``set_requires_gradient_sync(last_backward)`` the same) and FSDP2's ``post_backward`` upcasts each unsharded
#:    ``.grad`` to the reduce dtype and accumulates it (``_fsdp_param_group.py:605-611``, ``_fsdp_param.py:802-819``):
#:    4 bytes per parameter of the stage with torchtitan's fp32 reduce dtype, at ZeRO-2 (torchtitan's default under PP)
#:    as at ZeRO-3 (was: ZeRO-2 sharded 2/dp; ZeRO-3 whole at 2 bytes). Memory only (the per-micro-batch
#:    reduce-scatters were already priced as one per step); the bundled runtime's ``fsdp2`` layout unchanged.
#: 48: GEMM time by shape on sm_90 (H100, H200) from XLA's measured table (openxla/xla
#:    ``xla/service/gpu/model/matmul_interpolator_data.h`` default perf table, key ``sm_90``, ``bf16xbf16->bf16``,
#:    read at ROCm/xla ea2c45f2ca; ``pricing.gemm_table``): a 16-bit GEMM runs at the lower of the tile-schedule bound
#:    (ceiling × ``wave_efficiency``) and the measured fraction of peak, interpolated in log M, N, K; K past the grid by a
#:    fixed-plus-linear tile time, M/N past it at the same M·N with the larger side at 4,096. Small-K and narrow
#:    (high-TP) GEMMs slow down; other GPUs and FP8 GEMMs unchanged. Residuals refitted.
#: 49: gpt-oss as Megatron-core runs it (issue 23): the experts' clamped SwiGLU (``MoeSpec.swiglu_limit``) is clamped
#:    outside the fused activation on the megatron stack (``workload.expert_parallel.clamp_ops``: Megatron-LM
#:    ``fused_bias_geglu.py:424-431`` ``weighted_bias_quick_geglu_impl`` at every commit Megatron-Bridge v0.2.0–v0.4.2
#:    pins): the eager chunk, two clamps and cat over fc1's output (8·f·β a routed row forward, 11·f·β + 8·f backward
#:    from PyTorch's ``clamp_backward``/``split_backward``) at achieved HBM bandwidth, and fc1's output saved beside
#:    the cat's (+2·f·β a row); FlashAttention-2's H100 head-dim-64 causal rates (``gpu.FLASH_CAUSAL_TFLOPS``
#:    ``("h100", 64)``: panel (c) of flash-attention's ``assets/flash2_h100_fwd_bwd_benchmark.png``; head dim 64 on
#:    H100/H200 was priced at the head-dim-128 rates). Residuals refitted: unchanged (no fitted row has either).
#: 50: an FP8 GEMM on sm_90 (H100, H200) takes at least the measured time of the 16-bit GEMM of half its depth
#:    (``pricing.gpu.fp8_table_seconds``): Hopper's FP8 warpgroup MMA covers k32 where the 16-bit one covers k16 in
#:    the same instruction (PTX ISA ``wgmma.mma_async`` shapes), an FP8 K step loads the bytes of half as deep a 16-bit
#:    one and the epilogue writes the same 16-bit output, so M×N×K in FP8 is the tile work of M×N×(K/2) in 16 bits,
#:    priced by cost model 48's table. Was: the FP8 ceiling × waves at any shape. Large GEMMs unchanged (the ceiling
#:    binds); small-K FP8 GEMMs (TP-sharded ``wo``/``w2``, narrow layers' data gradients) slow down. Residuals refitted.
#: 51: whole gradients (``DpSchedule.whole_grads``: FSDP2 under ``torch.distributed.pipelining``, FSDP1 under
#:    ``no_sync``) counted at a peak only once their chunk's first backward of the step has run (FSDP2's
#:    ``to_accumulated_grad_if_needed`` creates them, torch 2.13.0 ``_fsdp_param_group.py:606-611``,
#:    ``_fsdp_param.py:802-819``; ``compose.grad_peaks``, ``memory.pending_grads``): each rank priced at its order's
#:    activation peaks and the states right after each chunk's first backward, with the gradients of the chunks done
#:    there (was: every rank's gradients at every peak). Memory screens kept lower bounds. Torchtitan's pipelined rows
#:    and plans with whole gradients move. And Megatron's gradients in its ``main_grad`` buffer (stacks whose
#:    ``grad_add`` hooks add into it: ``memory.state_bytes(main_grads)``), in the dtype it reduces in — fp32 under bf16
#:    (core_v0.16.1 ``training/arguments.py:711-724``, ``core/distributed/distributed_data_parallel.py:147``) — and
#:    whole under the distributed optimizer (its ``dist_optimizer.md``: 18 bytes per parameter, 6 + 12/d distributed;
#:    was 16 and 4 + 12/d).
#: 52: interleaved 1F1B on a megatron preset that overlaps the DP sync chunk by chunk (``compose.step_end``): (1) with
#:    ``overlap_grad_reduce`` each model chunk's gradient sync is launched after the chunk's last backward
#:    (NVIDIA/Megatron-LM df72712 megatron/core/pipeline_parallel/schedules.py:534-544, :619-628, :917-926), so a rank's
#:    sync hides under the backward after its first chunk's launch, all but its chunk 0's (``chunk_sync_terms``); was:
#:    the whole sync against the rank's last chunk backward. (2) New overridable ``Stack.overlap_param_gather``
#:    (off in the presets, as Megatron-LM's ``--overlap-param-gather``): the ZeRO-1/2 parameter all-gather chunk by
#:    chunk under the next step's forwards (:510-513, :552-563; NeMo r1.20 ``sync_overlap_parameters`` → apex
#:    ``overlap_param_sync``), only chunk 0's holding the first forward (``param_gather_parts``); was: all exposed.
#:    MLPerf v3.1 GPT-3 175B (PP 8 × VP 12, both on): exposed DP sync 0.29 → 0.08 s a step. Residuals refitted.
#: 53: (1) new overridable ``Stack.optimizer_dtype`` ("fp32" | "param"; offered per preset in ``optimizer_dtypes``):
#:    "param" = Adam's moments in the parameters' 16-bit dtype and no master copy, as NeMo r2.0.0rc1's apex
#:    ``DistributedFusedAdam`` holds them with ``optim.dtype`` = the model's (``megatron_base_model.py:784-806``
#:    ``store_params=False``; apex 810ffae ``distributed_fused_adam.py:440-465``), plus apex's reduce-scattered gradient
#:    shard (``:1806-1870``): K = 2e + the gradient dtype (``memory.param_dtype_state_bytes``; bf16: 6 against 12) and
#:    an optimizer step of 14 + 2 HBM bytes a parameter (was 28 + 4). Run by the new ``nemo-2407`` preset (NeMo 24.07:
#:    the megatron preset on Megatron-core 338af514 / TE 7d576ed2, DelayedScaling only, ring CP only;
#:    ``planner.specs.stack_nemo``), not by ``megatron`` (core_v0.16.1's precision-aware optimizer keeps main params).
#:    (2) New ``Stack.fp8_sp_gather``: Transformer Engine's sequence-parallel all-gathers run in FP8 under its FP8
#:    recipes (the norm output quantized before the gather, the row-parallel output gradient cast on the shard: TE
#:    7d576ed2 ``layernorm_linear.py:125-154``, ``base.py:632-652``; v2.9 ``layernorm_linear.py:246-265``,
#:    ``base.py:1162-1192``), 1 byte an element (``workload.fp8.fp8_tp_gather``); the reduce-scatters stay bf16. Set on
#:    ``megatron`` and ``nemo-2407``; was: 2 bytes (torchtitan tensorwise alone had it). FP8 megatron plans with SP move.
#: 54: (1) Megatron-family presets (``megatron``, ``megatron-2020/2021/2022``, ``nemo-2407``) build the vocabulary
#:    padded to a multiple of 128 × TP, split over TP (Megatron-LM core_v0.16.1 ``megatron/training/tokenizer/
#:    tokenizer.py:117-130`` ``_vocab_size_with_padding``, ``arguments.py:1678``; NeMo r2.0.0rc1
#:    ``megatron_base_model.py:582-598``): embedding and LM head FLOPs, weights, states, logits and the tied embedding's
#:    all-reduce of V_pad / t rows (``planner.specs.vocab``); was: V / t when t divides V, else V on every TP rank.
#:    (2) FP8 (bf16 mixed precision) on ``reduce_dtype="fp32_bf16"`` keeps fp32 main grads and reduces them in fp32
#:    (core_v0.16.1 ``arguments.py:711-724``, ``training.py:1295``), as bf16 does; was: 2 bytes. The MLPerf rows
#:    (apex grad_sync_dtype bf16) say ``reduce_dtype: param``. (3) apex ``DistributedFusedAdam``: new
#:    ``optimizer_dtype="remainders"`` (the ``nemo-2407`` default: fp32 moments + 16-bit remainders of the bf16
#:    parameters, K = 10 for Adam, apex 810ffae ``distributed_fused_adam.py:446-452``, NeMo ``megatron_base_model.py:
#:    800-802``; was 12); the reduce-scattered gradient shard leaves K ("param": 2e, was 2e + the gradient dtype): it
#:    lives from the last backward to the step (``:1806-1872``, freed by ``zero_grad`` ``:1461-1465`` at the top of
#:    NeMo's ``training_step``, ``megatron_gpt_model.py:804``), not at an activation peak.
#: 55: torch's experimental ring attention's buffers in memory (torchtitan CP, ``torch_ring`` stacks, all-gather
#:    rotation: torchtitan 9dec370's default, ``config_manager.py:364-377``): inside one attention backward
#:    (``_templated_ring_attention_backward``, torch ``distributed/tensor/experimental/_attention.py``) a rank holds the
#:    all-gathered cat(K, V) of every CP rank (``_AllGatherRotater``), contiguous K and V, fp32 dQ/dK/dV accumulators
#:    and the fp32 dK/dV being sent and received, and the block's 16-bit gradients: cp·2n·β + 5n·β + 28n bytes for n
#:    elements of the rank's queries (``workload.context_parallel.torch_ring_buffer_bytes``), counted as a buffer
#:    (``SharedTerms.cp_tmp``) against the loss's tensors, never with them (``memory.rank_buffers``: the larger of
#:    the two; the loss's live outside the blocks). Was: nothing. Memory only; no time changes. torchtitan 2024-12
#:    Table 6 (Llama 3.1 405B, 32 K tokens a CP rank): cp 2/4/8 predicted 67.3 → 70.3/70.9/71.9 GiB (published
#:    75.9/77.1/84.9); the 8B CP rows peak at the loss and stay.
#: 56: the split accumulator of the backward FP8 GEMMs on sm_90 (``pricing.fp8_accum``): torchao and Transformer
#:    Engine run the forward FP8 GEMM with fast accumulation and the input- and weight-gradient GEMMs with the split
#:    accumulator (torchao ``float8/config.py:110, 174`` at 6243040; TE ``pytorch/module/base.py:56-58`` at v2.9),
#:    measured 1.1×–1.2× slower (pytorch/ao issue 2377, H100): the backward FP8 GEMMs' compute time × 1.15 on
#:    H100/H200. Was: all three FP8 GEMMs at the fast rate. Physics-only errors (+ = priced faster): MLPerf v3.1
#:    GPT-3 175B +24.6…+26.6 % → +16.6…+20.0 %; torchtitan async-TP 70B tensorwise +9.4/+4.2 → +5.6/+0.3 %,
#:    rowwise +21.8/+30.5 → +18.3/+26.4 %; NeMo 24.07/24.12 and Megatron-Bridge FP8 rows down 4–7 points.
#: 57: torchtitan's compiled ring attention waits for each of its collectives where it issues it
#:    (``compose.context_parallel.waits_at_issue``): traced by torch.compile (torchtitan 9dec370 compiles each block
#:    whole, ``fullgraph=True``), torch's functional collectives return ``wait_tensor(result)`` at once (torch
#:    ``distributed/_functional_collectives.py`` ``_maybe_wrap_tensor``) and Inductor moves a wait only with
#:    ``reorder_for_compute_comm_overlap`` (False by default, ``_inductor/config.py``; torchtitan does not set it), so
#:    the all-gather of cat(K, V) and every fp32 dK/dV send run exposed, no longer beside the attention blocks. Was:
#:    overlapped as in eager (``AsyncCollectiveTensor`` waits at first use). Physics-only errors (+ = priced faster):
#:    torchtitan 2024-12 Table 6 (405B, CP across nodes) cp 2/4/8 +14.5/+11.1/+20.8 % → +6.5/−2.9/+4.7 %; Table 2
#:    (8B, one node) cp 2/4/8 −7.3/+23.0/+27.8 % → −8.6/+20.2/+24.3 %.
#: 58: Transformer Engine userbuffers' GEMM chunks priced at their own shapes (``pricing.tp_overlap.chunk_seconds``):
#:    TE runs each chunk of an overlapped pair as its own GEMM — ring exchange one of tokens/tp rows per step
#:    (``comm_gemm_overlap.h`` ``split_overlap_ag``, TE 09ba842 :865-883, the MLPerf v3.1 GPT-3 pin; its fused QKV and
#:    FC1 weights one GEMM), the pipeline method one of 1/num_splits of the output columns (``split_overlap_rs``
#:    :327-331) — each priced by ``gpu.gemm_time`` at that shape (its tiles' waves, the sm_90 table); was: the whole
#:    GEMM ÷ n, "no wave quantization of chunks". GPT-3 175B at TP 4, micro-batch 1: the QKV chunk 512 × 9216 × 12288
#:    fills 3 waves of 132 SMs at 0.73 (the whole GEMM 9 at 0.97). The chunks' slowness is compute in the breakdown.
#:    torchtitan's async TP unchanged (its per-weight shard mms of GQA K/V want split-K, not priced). Physics-only
#:    errors (+ = priced faster): MLPerf v3.1 GPT-3 175B +16.6…+20.0 % → +13.9…+17.8 %, v4.0 +3.4/+13.7/+13.9 % →
#:    +2.0/+12.2/+12.4 %; NeMo 24.07/24.12 Llama 2/3 70B (userbuffers on) 1.1–1.3 points down.
#: 59: left free, interleaved-1F1B classes are searched over every v with pp·v ≤ L and every uneven cut, as a
#:    pinned schedule searches them (issue 26; ``search.uneven``: a shared deterministic CP-SAT budget, the classes it
#:    leaves unproven ranked at their best cut found and named in the ``scope:`` note with their bound's gap). No
#:    price changes, but another plan may win (was: interleaved only at Megatron's uniform split, L divisible by pp·v;
#:    Llama 3 405B on 16,384 H100, gbs 2,048: 12.365 → 8.713 s).
#: 60: the memory passes around torchtitan's sequence-parallel collectives (``workload.sp_copies``): the residual
#:    stream is ``[b, s, h]`` sharded on dim 1 (``Shard(1)``, torchtitan ``models/llama3/parallelize_llama.py`` at
#:    820504e) and NCCL gathers/scatters dim 0, so torch's functional collectives copy the whole tensor once per
#:    collective (``all_gather_tensor``: ``torch.cat(torch.chunk(res, group_size, dim=0), dim=gather_dim)``, a view
#:    only when b = 1 via ``_maybe_view_chunk_cat``; ``reduce_scatter_tensor``: ``torch.cat(torch.chunk(self,
#:    group_size, dim=scatter_dim))``): per dense block and micro-batch with b > 1, 4 copies forward and 4 backward
#:    (+ the 2 rerun all-gathers' under op-level SAC, + the forward's under full AC), read + write at the achieved
#:    HBM rate. Async TP's fused pairs copy no layout but copy their local shard twice (all-gather) or sum the tp
#:    partials in one kernel (reduce-scatter; torch ``distributed/_symmetric_memory/__init__.py``). Was: nothing.
#:    Physics-only errors (+ = priced faster), torchtitan async-TP benchmark 2025-06: 8B bf16 vanilla/async
#:    +11.7/+10.4 → +2.0/+3.9 %, float8 tensorwise +21.0/+16.0 → +11.6/+9.6 %, rowwise +30.8/+30.5 → +19.5/+23.0 %;
#:    70B bf16 +4.6/+8.2 → −2.5/+4.1 %, tensorwise +5.6/+0.3 → −1.8/−4.1 %, rowwise +18.3/+26.4 → +9.2/+21.1 %;
#:    torchtitan 2024-12 Table 4 (70B 2D / async TP) +3.1/+8.0 → −4.1/+3.2 %; 2408 405B none/Float8/Float8+async
#:    +7.6/−4.4/−2.3 → +3.2/−8.7/−5.0 %; torchtitan rows' physics MAPE 9.9 → 7.9 %. Other stacks unchanged.
#: 61: YaRN RoPE as Megatron-core runs it (issue 23; ``workload.rope``; new ``ModelSpec.rope_attention_factor``, read
#:    from a gpt_oss config's ``rope_scaling``, gpt-oss: 1 + 0.1·ln 32): an attention factor ≠ 1 leaves TE's fused
#:    RoPE for the eager ``_apply_rotary_pos_emb_bshd`` (Megatron-LM ``rope_utils.py:92-126, 279-284`` at 0d8e0714,
#:    the same at every commit Megatron-Bridge v0.2.0–v0.4.2 pins): 12β an element of q and k forward in 6 kernels a
#:    tensor plus the fp32 cos/sin tables (was: the fused 2β, one kernel), on stacks with Megatron's MoE dispatch.
#:    Physics-only errors (+ = priced faster), Megatron-Bridge GPT OSS 120B DGX-H100: 25.11 +22.8 → +19.0 %, 26.02
#:    +24.0 → +20.1 %, 26.02.01 +24.2 → +20.3 %, 26.04 +27.9 → +23.9 %, 26.04.01 +27.6 → +23.6 %. Others unchanged.
#: 62: Megatron-core's selective recomputation by module, a new ``parallel.recompute`` value ``layernorm+moe_act``
#:    (``--recompute-granularity selective --recompute-modules layernorm moe_act``; ``compose.recompute_modules``,
#:    read at core_v0.16.1: ``CheckpointWithoutOutput`` tensor_parallel/random.py:621-742, transformer_layer.py:382-438,
#:    gpt_layer_specs.py:248/265/279/291, moe/experts.py:588-591, 738-750): a MoE block stops saving its pre-MLP
#:    norm's output, fc2's input and (gpt-oss's clamp) the clamps' copy of fc1's output, an MLA block its input norm's
#:    output; backward reruns those norms and the experts' activation (+ clamp) as memory-bound kernels. Offered by the
#:    megatron preset only (--recompute-modules since Megatron-core 3b141a24, core_v0.13.0; not nemo-2407's 338af514),
#:    searched on MoE / MLA models, refused under delayed FP8 as Megatron-core does. Existing modes unchanged. The
#:    Megatron-Bridge 26.x GPT OSS 120B DGX-H100 rows now priced with it (were: none): peak 74.6 → 64.1 GiB, step
#:    11.90 → 12.17 s; physics-only errors (+ = priced faster) 26.02 +20.1 → +17.4 %, 26.02.01 +20.3 → +17.5 %,
#:    26.04 +23.9 → +21.1 %, 26.04.01 +23.6 → +20.8 %; 25.11 (no granularity: none) unchanged.
#: 63: the attention core under context parallelism at the kernels it runs (issues 24/27; ``pricing.gpu.attention_time``,
#:    ``cp_block_ratio``): after the local causal square, each of the cp − 1 load-balanced blocks is a 2c × c or c × 2c
#:    rectangle with no mask (torch ``_templated_ring_attention``/``_is_causal_behavior``: ``NOT_IS_CAUSAL``; TE
#:    ``AttnFuncWithCPAndKVP2P``: half the KV or half the queries), priced at FlashAttention-2's full-square rate of side
#:    c = s/2cp (``FLASH_FULL_TFLOPS``: panels (a)/(b) of flash-attention's ``flash2_{a100,h100}_fwd_bwd_benchmark.png``)
#:    — was the causal rate of the local square; the causal rate beyond the figures' 16K grows as its masked diagonal
#:    shrinks (``causal_tail``: 1/R = 1/F + (1/C₀ − 1/F)·16K/L) — was clamped at 16K's; compiled torch ring attention
#:    drops the cat(K, V) the all-gather rotater never reads (``torch_ring_passes``: one, was cp − 1, each way).
#:    Physics-only errors (+ = priced faster), torchtitan 2024-12 Table 2 (8B) cp 1/2/4/8 +4.1/−8.6/+20.2/+24.3 →
#:    +5.1/−7.0/+22.8/+27.3 %, Table 6 (405B) +4.5/+5.5/−3.4/+4.4 → +5.1/+6.7/−2.0/+6.2 %.
#: 64: torchtitan's rowwise FP8 as its 2025-06 code runs it (issues 24, 27). (a) Async TP fuses no all-gather whose
#:    gathered 16-bit tensor feeds an FP8 cast (``workload.fp8.fp8_cast_after_gather``, ``workload.tp_overlap``):
#:    Inductor's ``micro_pipeline_tp`` ``_find_consumer_matmuls`` takes only an mm / ``_scaled_mm`` (or reshape → mm →
#:    reshape) that reads the gathered tensor itself, and rowwise's plain ``ColwiseParallel`` gathers bf16 and casts
#:    after (torchao ``float8_linear.py:87-97, 144-154`` at 6243040); pytorch/pytorch issue 149990: the matmul →
#:    reduce-scatters fuse, the all-gather → matmuls do not. Under rowwise the 2 forward reduce-scatter pairs stay,
#:    the 2 forward and 2 backward all-gathers run blocking with their layout copies (was: all 6 pairs fused).
#:    (b) torchtitan's op-level SAC reruns the FP8 casts of the mms it recomputes (wk, wo, w3; ``fp8.sac_rerun_cast_ops``,
#:    in ``layer_times.selective_share``): amax + cast under rowwise (``aten.amax``, not in ``_save_list``), the cast
#:    alone under tensorwise (``aten.max`` kept; torchao ``float8_utils.py:64-69``; torchtitan
#:    ``parallelize_llama.py:218-227`` at 820504e). Was: the rerun priced the even mms and the norms, not their casts.
#:    Errors with the shipped residuals (+ = priced faster), 2025-06 async-TP benchmark: 8B rowwise vanilla/async
#:    +16.0/+19.5 → +13.4/+9.6 %, 70B rowwise async +16.5 → +5.9 % (vanilla, full AC, unchanged +5.3 %), 8B
#:    tensorwise +7.4/+5.5 → +7.1/+5.1 %; torchao README 8B rowwise/tensorwise +7.7/+2.6 → +6.5/+1.7 %.
#: 65: a Composer trainer's per-batch sync of its train metrics over all ranks (``pricing.metric_sync``; issue 27 §2):
#:    Composer v0.16.4/v0.17.2 ``_train_loop`` calls ``metric.compute()`` of each train metric after every batch, and
#:    torchmetrics 1.0.3 gathers every state over the WORLD group (a barrier, world-size ``zeros_like`` fills, a list
#:    all-gather whose post hook copies each rank's slice out): per state a 1-byte all-reduce, 2 × world launches and
#:    the ring all-gather, exposed (the device is idle between batches). 2 metrics × 2 scalar states on llm-foundry's
#:    MPT: 0.4 ms at 8 GPUs, 4.3 ms at 128, 16.7 ms at 512. Only ``train_metrics`` stacks (the MPT rows) move.
#: 66: torchtitan's cross-entropy under TP as DTensor's ``loss_parallel`` runs it (``Stack.loss = "loss_parallel"``,
#:    ``memory.loss_buffer_bytes``): torch 2.6.0 ``distributed/tensor/parallel/loss.py:364-411`` (the same at 2.13.0
#:    :470-518) holds the saved log-softmax output, ``zeros_like`` of it and the two temporaries of
#:    ``(grad_input + exp(x)) * grad_output`` in its backward: 16 bytes per [T, V/t] logit (was 12, aten's fused
#:    kernels' three fp32 tensors; unchanged with tp = 1). Memory only: torchtitan 2412 Llama 3.1 70B 2D 71.9 GiB
#:    published, 63.8 → 72.0 predicted (−11.3 → +0.1 %), 2D + async TP 67.6: −5.6 → +6.5 %, 405B interleaved 72.7:
#:    −5.9 → −3.1 % (its LM head's rank); no step time moves. And ``Stack.pp_kept_outputs`` (``compose.pp_kept``, off in
#:    every preset; bench sets it on the 2024-12 torchtitan PP rows): torch.distributed.pipelining before
#:    pytorch#153383 keeps every micro-batch's stage output (the logits on the last stage) and one gradient receive
#:    buffer per micro-batch (torch 2.6.0 ``stage.py:703``, :293-302, :1462-1480): 405B 1F1B −18.4 → −13.7 %, Table 6
#:    CP 1/2/4/8 −10.6/−7.3/−8.1/−15.3 → −5.5/−4.6/−5.4/−12.8 %, interleaved −3.1 → +11.1 % (the planner's interleaved
#:    order is Megatron's, all forwards first at m = pp; torch's warms up fewer: docs/planner.md).
#: 67: interleaved 1F1B's warm-up as torch.distributed.pipelining runs it (``Stack.interleaved_all_warmup`` false on
#:    torchtitan; ``compose.pp_order``): torch 2.13.0 ``_get_warmup_ops``, (v − 1)·pp + 2(pp − 1 − i) forwards at rank i,
#:    capped at m·v. Memory only; torchtitan 2412 405B interleaved (pp 8, v 2, m 8): 72.7 GiB, 80.8 → 77.5 predicted.
#: 68: ``Stack.interleaved_all_warmup`` per preset by the Megatron-core it runs (issue 27 §1/§2; ``compose.pp_order``
#:    cites each at file:line): false (the default) on ``megatron`` (core_v0.16.1 schedules.py:738-795: no m = pp rule
#:    since core_r0.10.0, torch's count) and the Megatron-Bridge rows; true on megatron-2021/2022, nemo-2407 (core
#:    338af514) and the MLPerf v3.1/v4.0 rows (override field); false on meshplan (its runtime builds torch 2.13's
#:    ScheduleInterleaved1F1B). Memory only; no bench_fidelity row moves.
#: 69: stacks without published runs take their generation's pooled residual row (docs/validation.md "Cost model 69").
#: 70: sm_90 GEMMs at a training step's sustained clock, 1.062 × the table's isolated time (``gemm_table.IN_STEP_SLOWDOWN``,
#:    measured on our H200); residuals refitted (hopper 1.078 → 1.032); ``row_key`` takes the generation's pooled row
#:    before the stack's (megatron on A100: 1.087, not its Hopper-only 1.031); docs/validation.md "Cost model 70".
#: 71: no price moves; nemo-2407 / MLPerf answers change (even stages, 338af514 MoE): docs/planner.md, stop 56.
#: 72: no price moves; torchtitan's async TP only under compiled kernels (``stack_rules.overlaps_tp``): answers change.
#: 73, 74: no price moves; small interleaved classes settled by branch and bound on their graph's LP (``graph_bb``);
#:    74: with rounded incumbents, a tie with the answer settling a class (a cut of equal step may be answered).
COST_MODEL_VERSION = 74
