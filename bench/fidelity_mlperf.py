"""The MLPerf Training GPT-3 175B rows of ``published_runs.json`` as their submissions ran them (issue 27).

NVIDIA's closed-division submissions on Eos (DGX H100): v3.1 (NeMo 23.09; mlcommons/training_results_v3.1 at
``V31``, NVIDIA/benchmarks/gpt3/implementations/pytorch, results under NVIDIA/results/<system>/gpt3) and v4.0 (NeMo
24.04; mlcommons/training_results_v4.0 at ``V40``, .../implementations/nemo). The rows state the architecture but
the vocabulary, and the figure a row carries (``trained_samples`` over run_start → run_stop) is not a training
throughput: the timed region holds an evaluation pass every ``val_check_interval`` steps (24 to 27 of them; 8.8 %
of the run at 64 nodes, 10 % at 1344) and, before the first step, the start of the data pipeline. v4.0 rows carry
no figure at all, though their logs are in the repository.

**The measured metric** (``training_throughput``): the MLLOG ``block_start`` / ``block_stop`` intervals. The
submission's callback opens a block at the first training batch of the epoch or after each evaluation and closes
it when validation starts (v3.1 custom_callbacks.py:127-133, 147-155, 165-172; v4.0 :337-345, :358-366, :380-385);
each ``block_stop`` carries ``epoch_count`` = the tokens of the block (val_check_interval × GBS × 2048,
custom_callbacks.py:119). Training-only throughput = Σ block tokens / Σ block durations over the three result
files of the row's system (result_0..2), per GPU. It keeps every cost of the training loop (the host's loop
between steps, the garbage collection every 100 steps, the one warm step at the run's start, < 0.3 % of the
first block at 1344 nodes) and leaves out evaluation, initialisation and checkpoint load. The v3.1 logs also
carry NeMo's per-step timer (``tracked_stats`` ``train_step_timing``, exp_manager log_step_timing, custom.yaml:35):
its median is 0.2 % (64 nodes) to 3 % (1344 nodes) shorter than the block figure's step, the loop's time between
timed steps (≈ 20 ms a step, plus ≈ 0.3 s per block); the block figure is used for all rows since v4.0 logs
do not carry the timer (LOG_METRICS=OFF in its 1344/1452 configs). The evaluation need not be priced.

Everything the rows leave out is filled from the submission's code at the commit and recorded in ``assumed``
(``mlperf_row``); what the megatron preset prices differently is recorded there too, with its direction.
"""

from __future__ import annotations

from typing import Any

V31 = "d06288b2bd675a9d88e0e6181f5bb5626b71ec19"
V40 = "6fe954378efe4a1a1bd665550b18ff8f26018def"
GROUPS = ("mlperf-3.1", "mlperf-4.0")

#: Per row: the result directory and, for result_0..2: (Σ block tokens, Σ block ms, run_start→run_stop ms), summed
#: from the MLLOG ``block_start``/``block_stop`` events (time_ms; tokens = each block_stop's ``epoch_count``) of
#: NVIDIA/results/<dir>/gpt3/result_<i>.txt at the row's commit. Every block_start pairs with the next block_stop
#: (same ``first_epoch_num``); every run ends with status "success".
BLOCKS: dict[str, tuple[str, tuple[tuple[int, int, int], ...]]] = {
    "mlperf_v3.1_nvidia_gpt3_64nodes": (
        "eos_n64_ngc23.09_nemo",
        ((1207959552, 3187509, 3494812), (1207959552, 3193473, 3501172), (1207959552, 3190125, 3498117)),
    ),
    "mlperf_v3.1_nvidia_gpt3_96nodes": (
        "eos_n96_ngc23.09_nemo",
        ((1258291200, 2221956, 2437632), (1258291200, 2221363, 2437583), (1258291200, 2219733, 2435750)),
    ),
    "mlperf_v3.1_nvidia_gpt3_512nodes": (
        "eos-dfw_n512_ngc23.09_nemo",
        ((1207959552, 469905, 513946), (1207959552, 470358, 514469), (1207959552, 471020, 515271)),
    ),
    "mlperf_v3.1_nvidia_gpt3_768nodes": (
        "eos-dfw_n768_ngc23.09_nemo",
        ((1258291200, 328343, 361046), (1258291200, 329048, 361895), (1258291200, 328858, 361645)),
    ),
    "mlperf_v3.1_nvidia_gpt3_1024nodes": (
        "eos-dfw_n1024_ngc23.09_nemo",
        ((1308622848, 257493, 291945), (1358954496, 266890, 303093), (1308622848, 257134, 291857)),
    ),
    "mlperf_v3.1_nvidia_gpt3_1280nodes": (
        "eos-dfw_n1280_ngc23.09_nemo",
        ((1205862400, 219492, 244219), (1205862400, 219325, 244193), (1205862400, 219529, 244394)),
    ),
    "mlperf_v3.1_nvidia_gpt3_1344nodes": (
        "eos-dfw_n1344_ngc23.09_nemo",
        ((1211105280, 211046, 234939), (1211105280, 210973, 235030), (1211105280, 212057, 236021)),
    ),
    "mlperf_v4.0_nvidia_gpt3_64nodes": (
        "eos_n64_ngc24.04_nemo",
        ((1245708288, 2878141, 3147895), (1193803776, 2778751, 3043678), (1193803776, 2778412, 3038246)),
    ),
    "mlperf_v4.0_nvidia_gpt3_1344nodes": (
        "eos-dfw_n1344_ngc24.04_nemo",
        ((1211105280, 202980, 222881), (1211105280, 202798, 222512), (1211105280, 202703, 222488)),
    ),
    "mlperf_v4.0_nvidia_gpt3_1452nodes": (
        "eos-dfw_n1452_ngc24.04_nemo",
        ((1231110144, 191316, 207070), (1231110144, 190899, 206357), (1231110144, 191124, 206655)),
    ),
}

#: The C4 SentencePiece model's size: "To find out the vocab size (value is 50257)" (mlcommons/training
#: large_language_model/megatron-lm/README.md §3 at 036483c2, the benchmark's reference; the submissions' tokenizer
#: is that model, c4_en_301_5Mexp2_spm.model: v3.1 implementations/pytorch/README.md:38-40), padded by NeMo to a
#: multiple of make_vocab_size_divisible_by × TP = 128 × 4 (NeMo examples/nlp/language_modeling/conf/
#: megatron_gpt_config.yaml ``make_vocab_size_divisible_by: 128``, not overridden in the submissions' custom.yaml;
#: ``_vocab_size_with_padding``: multiple = make_vocab_size_divisible_by * tensor_model_parallel_size).
VOCAB_TOKENIZER = 50257
VOCAB_MULTIPLE = 128


def padded_vocab(tp: int, vocab: int = VOCAB_TOKENIZER, divisible_by: int = VOCAB_MULTIPLE) -> int:
    multiple = divisible_by * tp
    return -(-vocab // multiple) * multiple


def training_throughput(run_id: str, num_gpus: int) -> float:
    """Tokens/s per GPU over the training blocks of the row's three result files (Σ tokens / Σ seconds / GPUs)."""
    _, files = BLOCKS[run_id]
    tokens = sum(f[0] for f in files)
    seconds = sum(f[1] for f in files) / 1e3
    return tokens / seconds / num_gpus


def whole_run_throughput(run_id: str, num_gpus: int, result: int = 0) -> float:
    """The row's published kind of figure: trained tokens over run_start → run_stop of one result file."""
    tokens, _, run_ms = BLOCKS[run_id][1][result]
    return tokens / (run_ms / 1e3) / num_gpus


_P31 = f"mlcommons/training_results_v3.1 {V31[:9]} NVIDIA/benchmarks/gpt3/implementations/pytorch/"
_P40 = f"mlcommons/training_results_v4.0 {V40[:9]} NVIDIA/benchmarks/gpt3/implementations/nemo/"

#: What every row of a round runs, with where its code says so (``mlperf_row`` adds the per-row config lines).
COMMON = {
    "mlperf-3.1": [
        f"submission: {_P31} (Dockerfile:63 TE 09ba842, :72 NeMo bd0b818 (r1.20), :104 Megatron-LM df72712); "
        "custom.yaml does not set mcore_gpt: NeMo's own GPT model with Transformer Engine layers "
        "(transformer_engine: True, custom.yaml:100), priced with the megatron preset (Megatron-core + TE)",
        "parallel.recompute: none (custom.yaml:94-96 activations_checkpoint_* null; no config sets ACT_CKPT_*)",
        "parallel.sequence_parallel: true (custom.yaml:97); parallel.tp_comm_overlap: true, userbuffers "
        "(ub_tp_comm_overlap = TP_COMM_OVERLAP=True, custom.yaml:107; conf/tp_overlap/h100tp4pp8mbs1.yaml: bulk "
        "dgrad/wgrad overlaps and ring-exchange all-gathers; config_common.sh:38-42 atomic-GEMM reduce-scatter)",
        "parallel.virtual_stages: 12, 1 layer per chunk (custom.yaml:62 INTERLEAVED_PIPELINE default 12, unset by "
        "the configs); overlap_p2p_comm: true (custom.yaml:76): the preset's interleaved schedule overlaps p2p",
        "parallel.zero_stage: 1 (config_common.sh:8 USE_DIST_OPTIMIZER=True → run_and_time.sh:116-117 "
        "optim=distributed_fused_adam: apex DistributedFusedAdam, optimizer state and fp32 master weights sharded "
        "over DP); stack.overlap_grad_reduce: true (conf/optim/distributed_fused_adam.yaml:3-4 overlap_grad_sync "
        "and overlap_param_sync True, bucket_cap_mb 100; stack.overlap_param_gather: true, cost model 52); gradients reduce-scattered in bf16 (:6 grad_sync_dtype: "
        "bf16: stack.reduce_dtype param, the grad buffer and its reduce-scatter in 2 bytes)",
        "precision: fp8, training.fp8_recipe: delayed (config_fp8.sh:2-6 FP8, FP8_HYBRID, FP8_AMAX_HISTORY=1024, "
        "FP8_AMAX_ALGO=max: TE DelayedScaling, HYBRID format; bf16 trainer precision, custom.yaml:12); amax reduced "
        "over TP only, asynchronously (config_common.sh:49-50 NVTE_DP_AMAX_REDUCE_INTERVAL=0, "
        "NVTE_ASYNC_AMAX_REDUCTION=1; TE 09ba842 fp8.py:329-341)",
        "attention: flash-attn 2.0.8 (Dockerfile:95-96), which TE 09ba842 DotProductAttention prefers when both it "
        "and cuDNN's fused attention are eligible (attention.py:1747: flash-attn checked first): the preset's "
        "FlashAttention-2 rates (planner.pricing.gpu.FLASH_CAUSAL_TFLOPS) are this kernel's",
        "TP overlap per GEMM (conf/tp_overlap/h100tp4pp8mbs1.yaml): ring exchange for qkv_fprop, fc1_fprop, "
        "proj_dgrad, fc2_dgrad (aggregate 1: two shards a GEMM, priced as one), pipeline (4 splits) for proj_fprop "
        "(24 comm SMs, set_sm_margin 1: the GEMM on 108 SMs; atomic GEMM, config_common.sh:39) and fc2_fprop (4 SMs), "
        "bulk for qkv/fc1 dgrad+wgrad; no multicast (config_common.sh:42 UB_SKIPMC=1). Priced as the userbuffers "
        "defaults (planner.workload.tp_overlap; chunk GEMMs at their own shapes, cost model 58); the SM margins are "
        "not priced",
        "model: GPT-3 175B as the row states, tied input/output embeddings (unified_checkpointing.py:156-158 "
        "'word_embeddings_for_head' reuses language_model.embedding.word_embeddings.weight), layernorm1p "
        "(custom.yaml:74, LayerNorm with a shifted weight: priced as LayerNorm), no dropout (custom.yaml:71-72)",
    ],
    "mlperf-4.0": [
        f"submission: {_P40} (Dockerfile:47 TE v1.6rc1, :55 NeMo v2.0.0.rc0.beta, :87 Megatron-core "
        "core_v0.7.0.beta); custom.yaml:39 mcore_gpt: True",
        "parallel.recompute: none (custom.yaml:102-104 activations_checkpoint_* null; no config sets ACT_CKPT_*)",
        "parallel.sequence_parallel: true (custom.yaml:105); parallel.tp_comm_overlap: true, userbuffers "
        "(TP_COMM_OVERLAP=True; config_common.sh:37-44 atomic-GEMM reduce-scatter and multicast AG/RS overlap)",
        "parallel.zero_stage: 1 (config_common.sh:8 USE_DIST_OPTIMIZER=True → run_and_time.sh:116-117 "
        "distributed_fused_adam); stack.overlap_grad_reduce: true (conf/optim/distributed_fused_adam.yaml "
        "overlap_grad_sync/overlap_param_sync True, grad_sync_dtype bf16: stack.reduce_dtype param; config_common.sh:69 "
        "BUCKET_CAP_MB=200)",
        "precision: fp8, training.fp8_recipe: delayed (config_fp8.sh:2-6: HYBRID, amax history 1024, max)",
        "NOT PRICED: cuDNN fused attention. TE v1.6rc1 DotProductAttention picks FusedAttention (cuDNN "
        "F16_arbitrary_seqlen) over flash-attn on sm90 (attention.py:2912-2917 'Select FusedAttention on sm90'); the "
        "preset prices FlashAttention-2's rates, so this round's attention is priced slower than it ran (TE's own "
        "notebook measures cuDNN 1.4–1.6× flash-attn fwd+bwd on H100, docs/examples/attention/attention.ipynb, with "
        "later cuDNN 9.3 / flash-attn 2.4.2)",
        "TP overlap per GEMM (conf/tp_overlap/h100tp4mbs{1,2}.yaml): ring exchange for the all-gathers and for "
        "fc2_fprop's reduce-scatter (FC2_FPROP_METHOD default ring_exchange), pipeline + atomic GEMM for proj_fprop, "
        "bulk for qkv/fc1 dgrad+wgrad, multicast AG/RS (config_common.sh:42-44 MC_TP_OVERLAP_AG/RS); priced as the "
        "userbuffers defaults (fc2_fprop as a 4-split pipeline)",
        "NOT PRICED: FP8 parameters (config_common.sh:74 FP8_PARAMS=True → custom.yaml:81 fp8_params): the "
        "distributed optimizer all-gathers 1-byte parameters, the preset 2-byte ones (the DP all-gather is "
        "overstated, mostly hidden under overlap_param_sync)",
        "model: GPT-3 175B as the row states, tied embeddings, layernorm1p (custom.yaml:76, priced as LayerNorm), "
        "no dropout (custom.yaml:73-74)",
    ],
}
#: Per-row config lines (the row's config file at the commit).
CONFIGS = {
    "mlperf_v3.1_nvidia_gpt3_64nodes": "config_DGXH100_64x8x192x4x8_mbs1.sh:5-6 TP 4 / PP 8, :19 MBS 1, :20 "
    "TP_COMM_OVERLAP=True (MINIBS=192 at :4 was overridden at run time: the log's GBS 2048 / GA 128)",
    "mlperf_v3.1_nvidia_gpt3_96nodes": "config_DGXH100_96x8x128x4x8_mbs1.sh (TP 4 / PP 8, MBS 1, TP_COMM_OVERLAP)",
    "mlperf_v3.1_nvidia_gpt3_512nodes": "config_DGXH100_512x8x16x4x8_mbs1.sh (TP 4 / PP 8, MBS 1, TP_COMM_OVERLAP)",
    "mlperf_v3.1_nvidia_gpt3_768nodes": "config_DGXH100_768x8x16x4x8_mbs1.sh (TP 4 / PP 8, MBS 1, TP_COMM_OVERLAP)",
    "mlperf_v3.1_nvidia_gpt3_1024nodes": "config_DGXH100_1024x8x16x4x8_mbs1.sh (TP 4 / PP 8, MBS 1, TP_COMM_OVERLAP)",
    "mlperf_v3.1_nvidia_gpt3_1280nodes": "config_DGXH100_1280x8x8x4x8_mbs1.sh (TP 4 / PP 8, MBS 1, TP_COMM_OVERLAP)",
    "mlperf_v3.1_nvidia_gpt3_1344nodes": "config_DGXH100_1344x8x8x4x8_mbs1.sh:5-6 TP 4 / PP 8, :19 MBS 1, :21 "
    "TP_COMM_OVERLAP=True",
    "mlperf_v4.0_nvidia_gpt3_64nodes": "config_DGXH100_64x8x128x4x8_mbs2.sh:5-6 TP 4 / PP 8, :23 MBS 2, :25 "
    "TP_COMM_OVERLAP=True, :38 INTERLEAVED_PIPELINE=4 (3 layers per chunk); MINIBS 144 at run time (log: GBS 2304 / "
    "GA 72); no CUDA graphs",
    "mlperf_v4.0_nvidia_gpt3_1344nodes": "config_DGXH100_1344x8x6x4x6_mbs1_cg.sh:5-6 TP 4 / PP 6, :23 MBS 1, :25 "
    "TP_COMM_OVERLAP=True, :36 INTERLEAVED_PIPELINE=8 (2 layers per chunk); NOT PRICED: :26 LAYER_CUDA_GRAPH=1 "
    "(custom.yaml:82 enable_cuda_graph, per-layer CUDA graphs: the host's launch time the preset prices is not spent)",
    "mlperf_v4.0_nvidia_gpt3_1452nodes": "config_DGXH100_1452x8x6x4x6_mbs1_cg.sh:5-6 TP 4 / PP 6, :23 MBS 1, :25 "
    "TP_COMM_OVERLAP=True, :36 INTERLEAVED_PIPELINE=8 (2 layers per chunk); NOT PRICED: :26 LAYER_CUDA_GRAPH=1 "
    "(per-layer CUDA graphs)",
}


def mlperf_row(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with the vocabulary, the training-only throughput and the submission's settings filled, each in
    ``assumed``; other rows unchanged."""
    if row["id"] not in BLOCKS or row["source_group"] not in GROUPS or row.get("filled_by") == "fidelity_mlperf":
        return row
    n, par = row["cluster"]["num_gpus"], row["parallel"]
    vocab = padded_vocab(par["tp"])
    tps = training_throughput(row["id"], n)
    where, files = BLOCKS[row["id"]]
    commit = V31 if row["source_group"] == "mlperf-3.1" else V40
    repo = "training_results_v3.1" if commit == V31 else "training_results_v4.0"
    secs = [f"{f[1] / 1e3:.1f}" for f in files]
    measured = {
        **row["measured"],
        "metric": "tokens_per_s_per_gpu",
        "tokens_per_s_per_gpu": round(tps, 1),
        "tflops_accounting": "megatron-model",
    }
    assumed = [
        f"measured.tokens_per_s_per_gpu: {tps:.1f}, training only: Σ MLLOG block_start→block_stop of "
        f"mlcommons/{repo} {commit[:9]} NVIDIA/results/{where}/gpt3/result_0..2.txt ({sum(f[0] for f in files)} "
        f"tokens in {' + '.join(secs)} s, {n} GPUs; evaluation, init and checkpoint load left out; the whole-run "
        f"figure of result_0 is {whole_run_throughput(row['id'], n):.1f})",
        "measured.tflops_accounting: megatron-model (no recompute; used only for the efficiency rank)",
        f"model.vocab: {vocab} (the C4 SentencePiece model's 50257 (mlcommons/training large_language_model/"
        f"megatron-lm/README.md) padded to a multiple of 128 × TP {par['tp']}: NeMo make_vocab_size_divisible_by 128)",
        *COMMON[row["source_group"]],
        f"config: {CONFIGS[row['id']]}",
    ]
    return {
        **row,
        "model": {**row["model"], "vocab": vocab},
        "measured": measured,
        "parallel": {**par, "tp_comm_overlap": True},
        "fp8_recipe": "delayed",
        "filled_by": "fidelity_mlperf",
        "assumed": list(row["assumed"]) + assumed,
    }


def stack(row: dict[str, Any]) -> dict[str, Any] | None:
    """The stack an MLPerf row runs (``None``: not an MLPerf row): the megatron preset with the DP gradient
    reduce-scatter and the parameter all-gather overlapped (apex DistributedFusedAdam overlap_grad_sync /
    overlap_param_sync, conf/optim/distributed_fused_adam.yaml:3-4 in both rounds) and its gradients accumulated and
    reduce-scattered in bf16 (``reduce_dtype: param``: the same file's grad_sync_dtype bf16, apex's contiguous grad
    buffer in that dtype), where the preset keeps Megatron-core's fp32 main grads under FP8 (cost model 54), and
    interleaved 1F1B running every forward first when the micro-batches equal pp (``interleaved_all_warmup``, cost
    model 68), as the Megatron-core of both rounds does where the preset's core_v0.16.1 does not: v3.1 Dockerfile:104
    Megatron-LM df7271285d megatron/core/pipeline_parallel/schedules.py:497-499, v4.0 Dockerfile:87 core_v0.7.0.beta
    (3c0f3ef38c) :528-530 (and v4.0 custom_callbacks.py:136-138 ``get_microbatch_schedule``, the same rule): the
    v3.1 1280/1344-node rows (pp 8, 8 micro-batches) and v4.0 1344/1452-node rows (pp 6, 6) run it. Both split the
    layers evenly only (``even_stages``, cost model 71): v3.1's NeMo bd0b818 GPT asserts num_layers divisible by pp,
    then by v (nemo/collections/nlp/modules/common/megatron/transformer.py:1140-1149, 1224-1228); v4.0's
    core_v0.7.0.beta builds num_layers // pp // v layers a chunk (megatron/core/transformer/transformer_block.py:32-53;
    uneven stages came with fa8bb592, 2024-09), where the preset's core_v0.16.1 runs any layout. Neither interleaves on
    two stages (``interleaved_min_pp`` 3): megatron/core/parallel_state.py raises "pipeline-model-parallel size should
    be greater than 2 with interleaved schedule" at df7271285d (:150-153) and core_v0.7.0.beta (:446-450), until
    3ee489d9 (2024-05-31)."""
    if row["source_group"] not in GROUPS or row["stack"] != "megatron":
        return None
    over = {"overlap_grad_reduce": True, "overlap_param_gather": True, "reduce_dtype": "param"}
    return {"base": "megatron", **over, "interleaved_all_warmup": True, "even_stages": True, "interleaved_min_pp": 3}
