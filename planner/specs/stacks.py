"""Training stacks as data (issue 11 §2): what the software that runs a plan fuses, overlaps and keeps.

A request's ``training.stack`` is a preset id (``STACKS``) or an inline ``{base: <preset id>, ...overrides}``
(``planner.specs.StackOverride``); ``resolve`` turns either into one ``Stack``. Each pricing field feeds ONE place of
the cost model: the table of which field is read where is docs/planner.md, "Training stacks" (each field's comment
below names its reader too).

What a stack RUNS (issue 27 §1) is data beside what it costs: ``version`` (the release the preset describes),
``zero_stages`` and ``pipeline_zero_stages`` (the data-parallel sharding it runs, without and with pipeline parallelism;
``data_parallel`` names its modes), ``pipeline_parallel``, ``accumulation``, ``schedules``, ``sequence_parallel``,
``recompute``, ``pp_with_tied_embeddings``, ``even_stages``, ``precisions``, ``cp_comms``, FP8, MoE and ``unbuilt``.
The search enumerates only configurations the request's stack runs and a pin outside them is an error naming the
stack, the field and what the stack offers (``planner.specs.stack_rules``). An inline stack
(``StackOverride``) inherits them from its base: overriding kernels does not change what the software runs.
``meshplan`` is exactly what ``runtime/`` runs (``runtime/parallelize.py`` ``apply_dp``/``apply_recompute``,
``runtime/job.py`` schedules, ``validate.py``). Sources: ``source``, ``runs_source``, docs/planner.md "Training stacks".
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from planner.specs.common import Fp8Recipe, GradAccumulation, GradAdd, OptimizerDtype
from planner.specs.config import RUNNABLE_CP_COMMS, RUNNABLE_SCHEDULES, CpComm, Recompute, Schedule

Attention = Literal["flash", "unfused"]
ActivationFormula = Literal["zoo", "te", "titan"]
SelectiveAc = Literal["op"] | int  # torchtitan's ``selective_ac_option``: "op" or k (every k-th block recomputed)
Kernels = Literal["eager", "fused", "compiled"]
NormKernel = Literal["eager", "fused"]
ReduceDtype = Literal["param", "fp32", "fp32_bf16"]
ParamLayout = Literal["master", "fsdp2"]
LossKind = Literal["fp32_logits", "upcast", "fused", "loss_parallel"]
#: The fields an inline stack may override (all but ``id``, ``title`` and ``source``).
OVERRIDABLE: tuple[str, ...] = ("attention", "flash_kernel", "dropout", "activations", "kernels", "overlap_grad_reduce")
OVERRIDABLE += ("selective_ac", "norm_kernel", "loss", "nccl", "grad_accumulation", "reduce_dtype", "train_metrics")
OVERRIDABLE += ("overlap_param_gather", "optimizer_dtype", "pp_kept_outputs", "interleaved_all_warmup")
OVERRIDABLE += ("even_stages", "interleaved_min_pp")


class Stack(BaseModel):
    """One training stack (``meshplan stacks``, ``GET /v1/catalog/stacks``)."""

    model_config = ConfigDict(frozen=True)

    id: str
    title: str
    attention: Attention
    dropout: bool
    flash_kernel: Literal["fa2", "triton"] = "fa2"
    activations: ActivationFormula
    kernels: Kernels
    overlap_grad_reduce: bool
    overlap_param_gather: bool = False  # ZeRO-1/2's all-gather under the next forwards (``compose.step_end``)
    source: str
    selective_ac: SelectiveAc = "op"
    norm_kernel: NormKernel | None = None
    #: dtype of the DP gradient reduction: "param" (the training precision) or "fp32" (FSDP2's
    #: ``MixedPrecisionPolicy(reduce_dtype=torch.float32)``, torchtitan's default)
    reduce_dtype: ReduceDtype = "param"
    #: where the fp32 master weights live under mixed precision (``memory.state_bytes``)
    param_layout: ParamLayout = "master"
    loss: LossKind = "fp32_logits"  # what the loss holds at its backward (``memory.loss_buffer_bytes``)
    pp_kept_outputs: bool = False  # pipelining keeps each micro-batch's outputs to the step's end (``compose.pp_kept``)
    interleaved_all_warmup: bool = False  # interleaved 1F1B: every forward first at m = pp (``pp_order``, per preset)
    tp_collectives: Literal["megatron", "per_linear"] = "megatron"
    dp_collectives: Literal["buckets", "modules"] = "buckets"
    step_reductions: bool = False
    #: the reductions of Megatron-core's ``finalize_model_grads`` (``workload.collectives.megatron_finalize``)
    finalize_grads: Literal["none", "megatron"] = "none"
    #: schedules whose pipeline send/recv block both ends (``compose.cost``: on the action, not an async lag)
    p2p_blocking: tuple[Schedule, ...] = ()
    #: each TP rank sends its 1/tp of a pipeline send, the receiver all-gathers it over TP (no SP, tp > 1:
    #: Megatron-LM v2.5 ``--scatter-gather-tensors-in-pipeline``; ``compose.cost.boundary_lags``)
    p2p_scatter_gather: bool = False
    #: ZeRO-3's parameter fetches: one per layer, or one per module (linear) over the persistence threshold, and
    #: its gradient reduce-scatters in buckets of so many elements (``workload.collectives.zero3_comms``); "param":
    #: DeepSpeed v0.5.0's one gather per parameter, a device sync around each fetch (``compose.zero3_sequence``)
    zero3_fetch: Literal["layer", "module", "param"] = "layer"
    zero3_reduce_bucket: int | None = None
    #: ZeRO-1's gradient sync: reduce-scatter, or DeepSpeed v0.5.0's all-reduce of each bucket (stage2.py
    #: ``buffered_reduce_fallback`` → ``allreduce_bucket``, contiguous gradients off at stage 1: ``compose.terms``)
    zero1_sync: Literal["reduce_scatter", "all_reduce"] = "reduce_scatter"
    #: ZeRO-2's gradient sync: reduce-scatter, or DeepSpeed v0.5.0's ``dist.reduce`` per owner slice (``workload.zero2_reduce``)
    zero2_reduce: Literal["reduce_scatter", "owner"] = "reduce_scatter"
    #: the NCCL release whose tuner picks each collective's algorithm × protocol across nodes (``pricing.nccl``)
    nccl: Literal["2.10", "2.23"] = "2.23"
    #: per micro-batch or once per step: its gathers and gradient reductions (``workload.accumulation.dp_schedule``)
    grad_accumulation: GradAccumulation = "megatron"
    grad_add: GradAdd = "autograd"  # the per-micro-batch gradient add (``workload.accumulation.add_bytes``)
    train_metrics: int = 0  # cross-entropy metrics over the logits per micro-batch (``workload.ops.metric_bytes``)
    optimizer_dtype: OptimizerDtype = "fp32"  # Adam's states (``specs.common.OptimizerDtype``, ``optimizer_dtypes``)
    # ---- what the stack runs (issue 27 §1): the search enumerates only these; a pin outside is an error
    version: str = Field(description="The release of the software this preset describes.")
    #: ZeRO stages over a data-parallel group (dp·cp) of 2 or more; one rank shards nothing: ZeRO-0 on every stack
    zero_stages: tuple[int, ...] = Field(description="ZeRO stages (parallel.zero_stage) it runs with pp = 1.")
    pipeline_zero_stages: tuple[int, ...] = Field(description="ZeRO stages it runs with pp > 1.")
    data_parallel: str = Field(description="What each ZeRO stage is in this stack.")
    schedules: tuple[Schedule, ...] = Field(description="Pipeline schedules it runs (GET /v1/catalog/schedules ids).")
    sequence_parallel: bool = Field(description="Whether it runs sequence parallelism (with tp > 1).")
    tp_without_sp: bool = Field(default=True, description="Whether it runs tp > 1 without sequence parallelism.")
    recompute: tuple[Recompute, ...] = Field(description="Activation recomputation it runs (parallel.recompute).")
    pp_with_tied_embeddings: bool = Field(description="Whether it runs pp > 1 on a model with tied embeddings.")
    even_stages: bool = Field(default=False, description="Whether it splits the layers evenly only (L % (pp·v) = 0).")
    interleaved_min_pp: int = Field(default=2, description="The fewest pipeline stages it interleaves (virtual pp).")
    pipeline_parallel: bool = Field(default=True, description="Whether it runs pipeline parallelism (pp > 1).")
    accumulation: bool = Field(default=True, description="Whether it runs several micro-batches a step at pp = 1.")
    tp_with_fused_norm: bool = Field(default=True, description="Whether it runs tp > 1 with its fused norm kernel.")
    #: Context-parallel exchanges it runs (``parallel.cp_comm`` with cp > 1; empty: no CP).
    cp_comms: tuple[CpComm, ...] = Field(description="Context-parallel exchanges it runs (parallel.cp_comm, cp > 1).")
    #: Whether its CP exchanges run a model with attention sinks (``model.attention_sinks``, gpt-oss) / latent
    #: attention (``model.mla``, DeepSeek-V3: values narrower than queries and keys); those it runs with windows.
    cp_with_attention_sinks: bool = Field(default=True, description="Whether it runs CP with attention sinks.")
    cp_with_mla: bool = Field(default=True, description="Whether it runs CP with latent attention (model.mla).")
    cp_window_comms: tuple[CpComm, ...] = Field(default=(), description="CP exchanges it runs with sliding windows.")
    #: Whether its latent attention pads v to the q/k head width for a one-width kernel and slices the output back
    #: (``runtime.models.mla``): P·V at the q/k width (``ops.attention_core_flops``), the pad and slice copies.
    mla_pad_v: bool = Field(default=False, description="Whether latent attention runs P·V at v padded to q/k's width.")
    #: Whether its attention skips the key blocks outside a sliding window (FA2 ``window_size``); false: a full square.
    window_kernel: bool = Field(default=True, description="Whether its attention skips blocks outside a window.")
    #: FP8 recipes it runs (``training.fp8_recipe`` with precision ``fp8``; the first is its default; empty:
    #: no FP8) and those whose FSDP weight all-gather it runs in FP8 (``planner.specs.fp8``).
    #: Precisions it runs besides FP8 (``fp8_recipes``): no fp16 without a loss scaler (``stack_rules.precision_error``).
    precisions: tuple[Literal["bf16", "fp16", "fp32"], ...] = Field(
        default=("bf16", "fp16", "fp32"), description="Training precisions it runs besides FP8 (training.precision)."
    )
    fp8_recipes: tuple[Fp8Recipe, ...] = ()
    fp8_all_gather: tuple[Fp8Recipe, ...] = ()
    fp8_sp_gather: tuple[Fp8Recipe, ...] = ()  # SP all-gathers in FP8 (``workload.fp8.fp8_tp_gather``)
    #: TP overlap (``parallel.tp_comm_overlap``): TE userbuffers (--tp-comm-overlap), torchtitan's async TP; None: not.
    tp_overlap: Literal["userbuffers", "async_tp"] | None = None
    #: Mixture-of-experts models (a MoE block), expert parallelism (parallel.ep > 1) and the expert tensor
    #: parallelism (parallel.etp: "one" = 1, "tp" = tp) it runs (``planner.specs.ep_rules.stack_runs_moe``).
    moe: bool = Field(default=False, description="Whether it runs mixture-of-experts models.")
    expert_parallel: bool = Field(default=False, description="Whether it runs expert parallelism (parallel.ep > 1).")
    etp: tuple[Literal["one", "tp"], ...] = Field(
        default=(), description="Expert tensor parallelism it runs with tp > 1: 'one' (etp 1), 'tp' (etp = tp)."
    )
    #: Its MoE token dispatch (``workload.expert_parallel``): "megatron" = core_v0.16.1 ``MoEAlltoAllTokenDispatcher``
    #: (rows sorted by local expert and back; probabilities in the fused expert activation, no combine copy saved).
    moe_dispatch: Literal["generic", "megatron"] = Field(
        default="generic", description="Its MoE token dispatcher's copies and saved tensors (generic, megatron)."
    )
    optimizer_dtypes: tuple[OptimizerDtype, ...] = Field(default=("fp32",), description="Its optimizer_dtype values.")
    #: Model parts it does not build (``ModelSpec`` fields, dotted): refused at planning (``request.check_priced``)
    unbuilt: tuple[str, ...] = Field(default=(), description="Model parts (ModelSpec fields) it does not build.")
    runs_source: str = Field(description="Where the capabilities come from (files at the version).")

    @property
    def norm_fused(self) -> bool:
        """Whether the norms run as one fused kernel (``norm_kernel``; unset: as ``kernels``)."""
        return (self.norm_kernel or self.kernels) != "eager"

    def _selective_words(self) -> str:
        if self.activations != "titan":
            return ""
        every = "per op" if self.selective_ac == "op" else f"every {self.selective_ac} blocks"
        return f"selective AC {every}, "

    def describe(self) -> str:
        """One line for explanations: which stack a plan was priced for."""
        return (
            f"{self.id} ({self.attention} attention{', dropout' if self.dropout else ''}, "
            f"{ACTIVATION_NAMES[self.activations]} activations, {self.kernels} kernels"
            f"{', fused norms' if self.norm_kernel == 'fused' and self.kernels == 'eager' else ''}, "
            f"{self._selective_words()}"
            f"DP grad reduce {'overlapped with' if self.overlap_grad_reduce else 'after'} backward)"
        )


ACTIVATION_NAMES = {"zoo": "meshplan runtime", "te": "Transformer Engine", "titan": "torchtitan"}

STACKS: dict[str, Stack] = {
    s.id: s
    for s in [
        Stack(
            id="meshplan",
            title="meshplan's bundled runtime (runtime/: PyTorch, fused RMSNorm, GQA flash SDPA, FSDP2-style DP)",
            attention="flash",
            dropout=False,
            activations="zoo",
            kernels="eager",
            norm_kernel="fused",
            overlap_grad_reduce=True,
            reduce_dtype="fp32",
            param_layout="fsdp2",
            loss="upcast",
            tp_collectives="per_linear",
            dp_collectives="modules",
            step_reductions=True,
            grad_accumulation="fsdp2_deferred",  # runtime/job.py defer_gradient_sync below ZeRO-3
            source="runtime/parallelize.py: DP (and, on CUDA, one process too) through FSDP2 replicate/fully_shard with "
            "MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32): fp32 parameters and gradients, bf16 copies "
            "kept unsharded from forward to backward below ZeRO-3; runtime/job.py loss_fn: cross_entropy(logits.float()) "
            "(both measured on an H200: docs/validation.md 'On a GPU'); "
            "runtime/models/transformer.py: F.scaled_dot_product_attention (flash) with enable_gqa, K/V kept "
            "at the KV-head count; RMSNorm through F.rms_norm's fused kernel (aten._fused_rms_norm, "
            "pytorch/pytorch#153666), keeping input + fp32 1/rms; nn.LayerNorm; RoPE and SwiGLU as eager PyTorch "
            "ops; no dropout; --compile (torch.compile per block) is off by default and not priced "
            "(planner/analytic.py docstring; measured by tests/test_analytic_agreement.py)",
            version="meshplan 0.1 runtime (runtime/, PyTorch 2.13)",
            zero_stages=(0, 1, 2, 3),
            pipeline_zero_stages=(0, 1, 2, 3),
            data_parallel="ZeRO-0: FSDP2 replicate; ZeRO-1/2: fully_shard(reshard_after_forward=False) (gradients and "
            "optimizer states sharded); ZeRO-3: fully_shard (parameters resharded after forward)",
            schedules=RUNNABLE_SCHEDULES,  # type: ignore[arg-type]  # the runtime runs every runnable schedule
            sequence_parallel=True,
            recompute=("none", "selective", "full"),
            pp_with_tied_embeddings=False,
            cp_comms=RUNNABLE_CP_COMMS,  # type: ignore[arg-type]  # runtime/context_parallel.py: all four exchanges
            cp_with_attention_sinks=False,  # transformer.py with_sink_key: the sink key leads the whole sequence
            cp_with_mla=False,  # context_parallel.py stacks K and V of one width (runtime/validate.py refuses it)
            mla_pad_v=True,  # runtime/models/mla.py: F.pad(v) to nope + rope for SDPA's kernels, output sliced back
            cp_window_comms=RUNNABLE_CP_COMMS,  # type: ignore[arg-type]  # context_parallel.sees: every exchange
            window_kernel=False,  # SDPA with banded_causal_mask: a masked kernel computes every block
            # runtime/fp8.py: torchao float8 (convert_to_float8_training, Float8LinearConfig.from_recipe_name) on the
            # blocks' linears; FSDP2 all-gathers weights in their own precision (no enable_fsdp_float8_all_gather:
            # gloo has no float8 collectives, the CUDA path is unmeasured): fp8_all_gather stays empty.
            # tests/test_stack_property.py holds these equal to runtime.fp8.RECIPES.
            fp8_recipes=("tensorwise", "rowwise"),
            precisions=("bf16", "fp32"),  # parallelize.mixed_precision: bf16 params; no loss scaler for fp16
            # runtime/models/moe.py (router, grouped-GEMM experts, shared expert, dropless or capacity dropping) and
            # runtime/expert_parallel.py (EP carved from dp, all-to-all dispatch); experts whole on a rank (etp 1)
            moe=True,
            expert_parallel=True,
            etp=("one",),
            # runtime/models/transformer.py check_buildable: the zoo builds every ModelSpec part (qk_norm,
            # attention_out_bias, attention_sinks, mla: tests/test_runtime_attention_parts.py, test_runtime_mla.py;
            # capacity dropping (padded to capacity or not), the experts' biases and clamped SwiGLU: runtime/models/moe.py)
            unbuilt=(),
            runs_source="runtime/models/moe.py (MoE block: top-k router, torch._grouped_mm experts, shared expert, "
            "aux loss or expert bias, dropless or capacity-factor dropping by probability), runtime/expert_parallel.py (EP over (pp, edp, ep) carved from dp, "
            "all_to_all_single dispatch, experts FSDP2 over expert-DP; etp 1 only: TP ranks hold their own "
            "sequence-parallel tokens), runtime/validate.py _validate_experts; runtime/fp8.py (torchao float8); "
            "runtime/parallelize.py apply_dp (zero_stage 0 → replicate, 1–2 → fully_shard without "
            "resharding after forward, 3 → fully_shard), apply_recompute (none; selective = the attention core; full "
            "= each block), apply_tp (SequenceParallel rules of the plan's tp_plan); runtime/job.py build_schedule "
            "(every planner.specs.config.SCHEDULES entry with a torch.distributed.pipelining class); "
            "runtime/validate.py validate_plan (refuses tie_embeddings with pp > 1: the embedding and the LM head "
            "must share a stage); runtime/fp8.py apply_fp8 (torchao 0.18 float8 recipes tensorwise and rowwise; "
            "FP8 all-gather off)",
        ),
        Stack(
            id="megatron",
            title="Megatron-core + Transformer Engine (NeMo, Megatron-Bridge, Megatron-LM)",
            attention="flash",
            dropout=False,
            activations="te",
            kernels="fused",
            overlap_grad_reduce=False,
            # bf16: main grads fp32, all-reduced / reduce-scattered in fp32 unless --grad-reduce-in-bf16
            # (megatron/training/arguments.py accumulate_allreduce_grads_in_fp32); fp16: 16-bit
            reduce_dtype="fp32_bf16",
            # non-interleaved 1F1B: overlap_p2p_comm forced False, batched isend/irecv then wait then
            # torch.cuda.synchronize() (batch_p2p_sync) per transfer: megatron/core/pipeline_parallel/
            # p2p_communication.py, megatron/training/arguments.py; interleaved overlaps them (default on)
            p2p_blocking=("1f1b",),
            # SP norms' gradients over TP, tied embeddings' between first and last stage, the grad-norm
            # all-reduce (megatron/core/distributed/finalize_model_grads.py)
            finalize_grads="megatron",
            grad_add="main_grad_fused",  # DDP main_grad hooks; TE fuse_wgrad_accumulation (gradient_accumulation_fusion)
            source="TransformerEngine pytorch/module/layernorm_linear.py, layernorm_mlp.py (tensors saved); "
            "Megatron-LM megatron/training/arguments.py (--overlap-grad-reduce off unless set); "
            "Korthikanti et al. MLSys'23 §4 (34·s·b·h with dropout masks)",
            version="Megatron-core 0.16.1 (DDP, distributed optimizer)",
            zero_stages=(0, 1),
            pipeline_zero_stages=(0, 1),
            data_parallel="ZeRO-0: DistributedDataParallel (gradients all-reduced); ZeRO-1: "
            "--use-distributed-optimizer (optimizer states and fp32 master weights sharded, gradients "
            "reduce-scattered into a full buffer). Megatron-FSDP (--use-megatron-fsdp "
            "--data-parallel-sharding-strategy optim_grads[_params]) is another data-parallel engine that this "
            "preset does not price",
            schedules=("1f1b", "interleaved-1f1b"),
            sequence_parallel=True,
            recompute=("none", "selective", "full", "layernorm+moe_act"),  # --recompute-modules: core 3b141a24
            pp_with_tied_embeddings=True,
            cp_comms=("p2p", "all_gather", "a2a", "a2a+p2p"),
            cp_window_comms=("all_gather", "a2a"),  # TE attn_forward_func_with_cp: the ring refuses a window
            # --fp8-format hybrid --fp8-recipe delayed (default) | tensorwise (TE Float8CurrentScaling) | mxfp8
            # | blockwise (megatron/training/arguments.py); FP8 parameters (--fp8-param-gather) are opt-in
            fp8_recipes=("delayed", "current", "mxfp8"),
            fp8_sp_gather=("delayed", "current", "mxfp8"),  # TE v2.9 gathers quantized (planner.workload.fp8)
            tp_overlap="userbuffers",  # --tp-comm-overlap (needs --sequence-parallel: arguments.py)
            moe=True,
            expert_parallel=True,
            etp=("one", "tp"),
            moe_dispatch="megatron",
            runs_source="NVIDIA/Megatron-LM core_v0.16.1 (MoE: megatron/core/transformer/moe/README.md "
            "--num-experts, --expert-model-parallel-size, --expert-tensor-parallel-size (default = TP), "
            "--moe-grouped-gemm, --moe-token-dispatcher-type alltoall; EP folded out of DP); (--context-parallel-size, --cp-comm-type p2p|all_gather|a2a|a2a+p2p "
            "with --hierarchical-context-parallel-sizes: megatron/core/transformer/transformer_config.py cp_comm_type): "
            "megatron/training/arguments.py (--use-distributed-optimizer; "
            "--use-megatron-fsdp and --data-parallel-sharding-strategy are the separate Megatron-FSDP path; "
            "--recompute-granularity full|selective; --sequence-parallel; --num-virtual-stages-per-pipeline-rank, "
            "interleaving with pp = 2 allowed since p2p overlap is on unless --no-overlap-p2p-communication); "
            "megatron/core/pipeline_parallel/schedules.py get_forward_backward_func (no pipelining, 1F1B "
            "without interleaving, interleaved 1F1B: no GPipe, no zero-bubble); "
            "megatron/core/distributed/finalize_model_grads.py _allreduce_word_embedding_grads (tied embeddings "
            "kept in sync across the first and last pipeline stages)",
        ),
        Stack(
            id="torchtitan",
            title="torchtitan (FSDP2, DTensor TP, SDPA)",
            attention="flash",
            dropout=False,
            activations="titan",
            kernels="eager",
            overlap_grad_reduce=True,
            reduce_dtype="fp32",
            loss="loss_parallel",  # upcast; with tp > 1 DTensor's loss_parallel (disable_loss_parallel False)
            grad_accumulation="fsdp2",  # train.py's accumulation loop keeps gradient sync on (v0.1.0–v0.2.2)
            source="pytorch/torchtitan torchtitan/models/llama/model.py, models/norms.py (composite RMSNorm, complex "
            "RoPE in fp32, repeat_kv before SDPA flash, no dropout) and parallelisms/parallelize_llama.py "
            "(op-level selective AC _save_list, FSDP2 reduce_dtype float32) at 9dec370; FSDP2 reduce-scatters "
            "gradients during backward (torchtitan docs/fsdp.md)",
            version="torchtitan 0.3.0",
            zero_stages=(0, 2, 3),
            pipeline_zero_stages=(0, 2, 3),
            data_parallel="ZeRO-0: data_parallel_replicate_degree = dp, shard degree 1 (FSDP2 over a replicate mesh); "
            "ZeRO-2: FSDP2 fully_shard, fsdp_reshard_after_forward 'never'; ZeRO-3: fully_shard resharded after "
            "forward ('always'; 'default' is 'always' without PP, 'never' with PP). No optimizer-state-only "
            "sharding (ZeRO-1); HSDP (replicate × shard) is not in the planner's space",
            schedules=RUNNABLE_SCHEDULES,  # type: ignore[arg-type]  # GPipe, 1F1B, Interleaved1F1B, zero-bubble
            sequence_parallel=True,
            recompute=("none", "selective", "full"),
            pp_with_tied_embeddings=False,
            cp_comms=("p2p", "all_gather"),
            # [model] converters = ["float8"], [float8] recipe_name tensorwise (default) | rowwise; ["mx"] for MXFP8
            # (torchtitan docs/float8.md, components/quantization/); FP8 FSDP all-gather only with tensorwise
            # (enable_fsdp_float8_all_gather; torchao: rowwise keeps the gathers in high precision)
            fp8_recipes=("tensorwise", "rowwise", "mxfp8"),
            precisions=("bf16", "fp32"),  # config/configs.py mixed_precision_param: bfloat16 | float32; no loss scaler
            fp8_all_gather=("tensorwise",),
            tp_overlap="async_tp",  # [parallelism] enable_async_tensor_parallel, with [compile] (torch.compile)
            moe=True,
            expert_parallel=True,
            etp=("one", "tp"),
            # dropless only (0.2.2 and 0.3.0 models/moe/moe.py: no capacity factor, rows padded only to the
            # grouped GEMM's alignment): no token dropping, no padding to capacity
            unbuilt=("moe.capacity_factor", "moe.pad_to_capacity"),
            runs_source="torchtitan expert parallelism as of v0.2.2 (parallelism.expert_parallel_degree, "
            "expert_tensor_parallel_degree 1 or = TP; sparse mesh [pp, dp_replicate, efsdp, ep, etp]; "
            "torchtitan/distributed/expert_parallel.py all_to_all_single dispatch, torch._grouped_mm); "
            "torchtitan 0.3.0 (wheel source; parallelism.context_parallel_degree with "
            "context_parallel_rotate_method 'alltoall' = ring KV rotation, 'allgather' = all-gathered KV): torchtitan/distributed/fsdp.py "
            "(get_fsdp_reshard_after_forward_policy: always / never / default), models/llama3/parallelize.py (FSDP "
            "over ['dp_replicate', 'fsdp'] meshes), distributed/pipeline_parallel.py (get_schedule_class: "
            "torch.distributed.pipelining's GPipe, 1F1B, Interleaved1F1B, InterleavedZeroBubble, ZBVZeroBubble), "
            "distributed/activation_checkpoint.py (SelectiveAC, FullAC), config/configs.py "
            "(enable_sequence_parallel), models/common/decoder.py ('Weight tying is not supported with Pipeline "
            "Parallel.')",
        ),
        Stack(
            id="deepspeed",
            title="DeepSpeed (ZeRO, PipelineModule, AutoTP)",
            attention="flash",
            dropout=False,
            activations="zoo",
            kernels="eager",
            overlap_grad_reduce=False,
            # ZeRO-3 fetches each submodule's own parameters (fetch_sub_module, named_parameters(recurse=False)) as one
            # all_gather_coalesced, forward and again in backward; parameters under stage3_param_persistence_threshold
            # (1e5) stay whole; gradients reduce_scatter_coalesced per reduce_bucket_size (5e8) elements
            # (deepspeed/runtime/zero/partitioned_param_coordinator.py, config.py, stage3.py)
            zero3_fetch="module",
            zero3_reduce_bucket=500_000_000,
            grad_accumulation="deepspeed",
            # PipelineEngine's sends block both ends (pipe/p2p.py: v0.5.0 2-rank dist.broadcast, later send/recv) and,
            # tp > 1, carry 1/tp of each activation and gradient, all-gathered on arrival (docs/planner.md, PP)
            p2p_blocking=("1f1b",),
            p2p_scatter_gather=True,
            source="DeepSpeed config docs: zero_optimization.overlap_comm defaults to false",
            version="DeepSpeed 0.19.8",
            zero_stages=(0, 1, 2, 3),
            pipeline_zero_stages=(0, 1),
            data_parallel="zero_optimization.stage 0–3 (ZeRO-1 optimizer states, ZeRO-2 + gradients, ZeRO-3 + "
            "parameters); PipelineEngine only with stage 0 or 1",
            schedules=("1f1b",),
            sequence_parallel=False,
            recompute=("none", "full"),
            pp_with_tied_embeddings=True,
            cp_comms=("a2a",),
            cp_window_comms=("a2a",),  # Ulysses DistributedAttention wraps the local attention, mask and all
            runs_source="DeepSpeed 0.19.8 (deepspeed/sequence/layer.py DistributedAttention: Ulysses all-to-all only) (sdist source): deepspeed/runtime/pipe/engine.py ('ZeRO-2 and ZeRO-3 are "
            "incompatible with pipeline parallelism'), runtime/pipe/schedule.py (TrainSchedule, 1F1B-style: no "
            "GPipe, no interleaving), runtime/pipe/module.py (TiedLayerSpec: tied weights across stages; "
            "activation_checkpoint_interval: whole layers), runtime/engine.py _configure_tensor_parallel_states "
            "('AutoTP + ZeRO stage 3 is supported for both inference and training', since 0.19.4: #8168); Megatron-style sequence parallelism and "
            "attention-only (selective) recomputation are model code (Megatron-DeepSpeed), not DeepSpeed",
        ),
    ]
}
DEFAULT_STACK = "meshplan"

from planner.specs.stack_eras import ERA_STACKS  # noqa: E402  # presets of older releases (Megatron-LM v2.0, v2.5; DeepSpeed v0.5.0)

STACKS.update(ERA_STACKS)
from planner.specs.stack_override import resolve as resolve  # noqa: E402  # the request's stack as a Stack
