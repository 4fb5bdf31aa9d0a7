"""torchtitan at the commits of its published runs (issue 27 §1): what each ran, so that a plan priced for one uses
only that. Read at each commit (pytorch/torchtitan; CM = torchtitan/config_manager.py, PL =
torchtitan/parallelisms/parallelize_llama.py, PU = parallelisms/pipelining_utils.py, PPL = parallelisms/pipeline_llama.py).
Pricing fields are the ``torchtitan`` preset's (its kernels, FSDP2 engine, activations); what differs is what they run.

``torchtitan-2404`` — 1ea476e9 (2024-04-24), the code of docs/performance.md's A100 tables:

* no pipeline parallelism: PL:139-140 ``raise NotImplementedError("PP not implemented yet.")``;
* no gradient accumulation: train.py runs one batch, one forward and backward, one optimizer step a step (``loss.backward()``
  at :293, ``optimizer.step()`` :301; ``training.batch_size`` is the local batch): micro-batch × dp = the global batch;
* data parallelism: ``fully_shard`` on every block and the root, resharded after forward but for the last block
  (PL:216-239): ZeRO-3 only (no DDP, no replicate mesh); ``MixedPrecisionPolicy(param_dtype=torch.bfloat16,
  reduce_dtype=torch.float32)`` fixed: bf16 only;
* tensor parallelism: sequence parallelism on every TP block (``SequenceParallel()`` norms, PL:159-169), loss parallel;
  ``norm_type = "fused_rmsnorm"`` refuses TP (PL:142-146: "fused_rmsnorm not yet compatible with TP");
* FP8: ``training.fp8_linear = "dynamic"`` (float8_experimental ``Float8DynamicLinear``: tensorwise, float8_linear.py),
  gathered by FSDP in bf16; no context parallelism, no async TP, Llama only (models/llama/model.py: untied output).

``torchtitan-2408`` — 9515a140 (2024-08-22), the 405B table's commit (docs/performance.md):

* pipeline parallelism (``experimental.pipeline_parallel_schedule``: 1f1b, gpipe, interleaved_1f1b,
  flexible_interleaved_1f1b, CM:275-287); cuts by ``pipeline_parallel_split_points``, any layers (PPL:93-101, PU:56-61:
  stages a multiple of pp, looped), so uneven and interleaved at pp = 2; micro-batches default to pp (PPL:83-85);
* still no accumulation without a pipeline (train.py:260-309); FSDP2 resharded after forward without PP, kept with PP
  (PL:310-323): ZeRO-3 at pp = 1, ZeRO-2 with PP; ``data_parallel_type = "ddp"`` runs on a one-dimensional mesh only
  (PL:91-92: "DDP has not supported > 1D parallelism"), not offered; no HSDP;
* SP on every TP block (PL:117-121, 159-169); async TP (``enable_async_tensor_parallel``, with compile: PL:50-54);
  float8 tensorwise with FP8 FSDP gathers (``enable_fsdp_float8_all_gather``; delayed scaling too, not priced here);
  ``mixed_precision_param`` bfloat16 or float32 (CM:311-320); no CP (README: "Coming soon"), no MoE.

``torchtitan-2412`` — 9dec370 (2024-12-26), the code of benchmarks/llama3_h100_202412_torchtitan.md:

* as 2408, and: schedules by torch's ``get_schedule_class`` (1F1B, GPipe, Interleaved1F1B, InterleavedZeroBubble:
  CM:317-329; V-shaped stages not wired, PPL:108 ``style="loop"``); split points generated when not given, the
  remainder to the middle stages (PU:37-51), or any given;
* context parallelism (``experimental.context_parallel_degree``, ``context_parallel_rotate_method`` allgather (default)
  or alltoall: CM:358-377); still no accumulation without a pipeline (train.py:266-323); SP on every TP block
  (PL:133-185: no ``enable_sequence_parallel``); FSDP2 as 2408 (PL:325-339), HSDP over ``dp_replicate``; no MoE.
"""

from __future__ import annotations

from planner.specs.stacks import STACKS, Stack

#: What none of them builds: Llama only, untied (models/llama/model.py at each commit)
_LLAMA_ONLY: tuple[str, ...] = ("family=gpt", "norm=layernorm", "activation=gelu", "tie_embeddings=True", "moe")
_LLAMA_ONLY += ("mla", "qk_norm", "qkv_bias", "attention_out_bias", "attention_sinks", "sliding_window")

TORCHTITAN_2404 = Stack(
    **STACKS["torchtitan"].model_dump()
    | dict(
        id="torchtitan-2404",
        title="torchtitan 1ea476e9 (2024-04: FSDP2 ZeRO-3 and TP only, no pipeline, one micro-batch a step)",
        version="torchtitan 1ea476e9 (2024-04-24)",
        zero_stages=(3,),
        pipeline_zero_stages=(),
        data_parallel="ZeRO-3 only: fully_shard on every block (resharded after forward but the last) and the root",
        pipeline_parallel=False,
        accumulation=False,
        tp_with_fused_norm=False,
        tp_without_sp=False,
        schedules=("1f1b",),  # one stage
        cp_comms=(),
        precisions=("bf16",),
        fp8_recipes=("tensorwise",),
        fp8_all_gather=(),
        tp_overlap=None,
        moe=False,
        expert_parallel=False,
        etp=(),
        unbuilt=_LLAMA_ONLY,
        runs_source="pytorch/torchtitan 1ea476e9: torchtitan/parallelisms/parallelize_llama.py:139-146 (no PP; no TP "
        "with fused_rmsnorm), :159-169 (SequenceParallel norms), :216-239 (fully_shard, bf16/fp32 policy); train.py "
        ":277-301 (one forward/backward a step); torchtitan/float8_linear.py (dynamic only)",
    )
)

TORCHTITAN_2408 = Stack(
    **TORCHTITAN_2404.model_dump()
    | dict(
        id="torchtitan-2408",
        title="torchtitan 9515a140 (2024-08: + pipelines, async TP, FP8 FSDP gathers; no accumulation at pp = 1)",
        version="torchtitan 9515a140 (2024-08-22)",
        pipeline_zero_stages=(2,),
        data_parallel="ZeRO-3 at pp = 1 (fully_shard resharded after forward but the last block); ZeRO-2 with pp > 1 "
        "(reshard_after_forward=False); DDP on a one-dimensional mesh only, not offered",
        pipeline_parallel=True,
        tp_with_fused_norm=True,
        schedules=("gpipe", "1f1b", "interleaved-1f1b"),
        precisions=("bf16", "fp32"),
        fp8_all_gather=("tensorwise",),
        tp_overlap="async_tp",
        pp_kept_outputs=True,  # the torch of its era keeps every micro-batch's outputs (before pytorch#153383)
        runs_source="pytorch/torchtitan 9515a140: torchtitan/config_manager.py:259-299 (schedules, split points, "
        "micro-batches), :311-320 (mixed_precision_param); parallelisms/pipeline_llama.py:83-105, "
        "pipelining_utils.py:17-61; parallelize_llama.py:50-54 (async TP with compile), :91-92 (DDP 1-D only), "
        ":117-169 (SP), :310-323 (reshard policy); train.py:260-309 (one forward/backward without PP); float8.py:51-55",
    )
)

TORCHTITAN_2412 = Stack(
    **TORCHTITAN_2408.model_dump()
    | dict(
        id="torchtitan-2412",
        title="torchtitan 9dec370 (2024-12: + context parallelism, interleaved zero-bubble; no accumulation at pp = 1)",
        version="torchtitan 9dec370 (2024-12-26)",
        schedules=("gpipe", "1f1b", "interleaved-1f1b", "interleaved-zero-bubble"),
        cp_comms=("p2p", "all_gather"),
        runs_source="pytorch/torchtitan 9dec370: torchtitan/config_manager.py:292-352 (pipelines), :358-377 (context "
        "parallelism), :378-387 (mixed_precision_param); parallelisms/pipelining_utils.py:18-119, pipeline_llama.py:"
        "67-108; parallelize_llama.py:54-58 (async TP), :79-114 (FSDP/HSDP/DDP), :133-185 (SP), :325-339 (reshard); "
        "train.py:266-323 (one forward/backward without PP)",
    )
)

TITAN_STACKS = (TORCHTITAN_2404, TORCHTITAN_2408, TORCHTITAN_2412)
