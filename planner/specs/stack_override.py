"""A training stack given inline in a request (``training.stack``): a preset with some of its fields overridden."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator, model_validator

from planner.specs.common import Spec

if TYPE_CHECKING:
    from planner.specs.stacks import Stack

#: = planner.specs.stacks.STACKS
StackId = Literal[
    "meshplan",
    "megatron",
    "torchtitan",
    "deepspeed",
    "megatron-2020",
    "megatron-2021",
    "megatron-2022",
    "deepspeed-2021",
    "nemo-2407",
    "torchtitan-2404",
    "torchtitan-2408",
    "torchtitan-2412",
]


class StackOverride(Spec):
    """A training stack given inline: a preset (``base``) with some of its fields overridden
    (``planner.specs.stacks``; ``meshplan stacks`` lists the presets and their fields)."""

    base: StackId = Field(default="meshplan", description="The preset this stack starts from.")
    attention: Literal["flash", "unfused"] | None = Field(
        default=None, description="Attention kernel: flash (fused) or unfused (s×s scores in HBM)."
    )
    flash_kernel: Literal["fa2", "triton"] | None = Field(
        default=None,
        description="Which flash kernel: fa2 (FlashAttention-2) or triton (FlashAttention in Triton, 2022).",
    )
    dropout: bool | None = Field(default=None, description="Attention and hidden dropout (masks kept and written).")
    activations: Literal["zoo", "te", "titan"] | None = Field(
        default=None,
        description="Saved-activation formula: zoo (eager PyTorch), te (Transformer Engine) or titan (torchtitan).",
    )
    kernels: Literal["eager", "fused", "compiled"] | None = Field(
        default=None,
        description="Norm/SwiGLU/RoPE kernels: eager (one PyTorch op each), fused (TE/apex) or compiled "
        "(torch.compile per block).",
    )
    overlap_grad_reduce: bool | None = Field(
        default=None, description="Whether the DP gradient reduction overlaps the last backward."
    )
    overlap_param_gather: bool | None = Field(
        default=None,
        description="Whether ZeRO-1/2's parameter all-gather overlaps the next step's forwards (interleaved 1F1B).",
    )
    optimizer_dtype: Literal["fp32", "param", "remainders"] | None = Field(
        default=None,
        description="Adam's states under mixed precision: fp32 (fp32 moments and master weights), param (moments in "
        "the parameters' 16-bit dtype, no master copy: NeMo 24.07's apex DistributedFusedAdam with optim.dtype bf16) "
        "or remainders (fp32 moments, bf16 parameters with 16-bit remainders: apex store_param_remainders); "
        "only one its base preset runs (optimizer_dtypes).",
    )
    norm_kernel: Literal["eager", "fused"] | None = Field(
        default=None, description="Norm kernels alone (eager or fused); unset: as kernels."
    )
    pp_kept_outputs: bool | None = Field(
        default=None,
        description="Whether the pipeline runtime keeps every micro-batch's stage output (the logits on the last "
        "stage) and a gradient receive buffer per micro-batch until the step ends (torch.distributed.pipelining "
        "before pytorch#153383, torchtitan before return_outputs=False).",
    )
    interleaved_all_warmup: bool | None = Field(
        default=None,
        description="Whether interleaved 1F1B runs every forward first when the micro-batches equal pp (Megatron-LM "
        "v2 to Megatron-core 0.9; NeMo 24.07, MLPerf v3.1/v4.0) or warms up (v - 1)·pp + 2(pp - 1 - rank) forwards "
        "at most (Megatron-core 0.10 on, torch.distributed.pipelining).",
    )
    even_stages: bool | None = Field(
        default=None,
        description="Whether it splits the layers evenly only (num_layers // pp // v a chunk: Megatron-core before "
        "fa8bb592, 2024-09, so NeMo 24.07 and MLPerf v3.1/v4.0; NeMo r1.20's own GPT asserts it) or runs any cut.",
    )
    interleaved_min_pp: int | None = Field(
        default=None,
        ge=2,
        description="The fewest pipeline stages it interleaves: 3 where Megatron-core's parallel_state refuses "
        "interleaving at pp = 2 (before 3ee489d9, 2024-05: MLPerf v3.1/v4.0), 2 after.",
    )
    selective_ac: Literal["op"] | int | None = Field(
        default=None,
        description="What recompute 'selective' means with titan activations (torchtitan's selective_ac_option): "
        "'op' (op-level policy) or k (every k-th block fully recomputed).",
    )

    loss: Literal["fp32_logits", "upcast", "fused", "loss_parallel"] | None = Field(
        default=None,
        description="What the loss holds: fp32_logits (one fp32 copy), upcast (cross_entropy of logits.float(): "
        "three fp32 tensors at its backward), fused (a fused cross-entropy kernel over the 16-bit logits) or "
        "loss_parallel (upcast; with tp > 1 through DTensor's loss_parallel: four fp32 tensors at its backward).",
    )
    nccl: Literal["2.10", "2.23"] | None = Field(
        default=None,
        description="The NCCL release era whose tuner selects each collective's algorithm and protocol: 2.10 "
        "(NCCL 2.7-2.10, 2020-2021 stacks) or 2.23 (2.23 and later).",
    )
    grad_accumulation: Literal["megatron", "deepspeed", "fsdp1", "fsdp1_no_sync", "fsdp2", "fsdp2_deferred"] | None = (
        Field(
            default=None,
            description="How its data-parallel engine spreads gathers and gradient reductions over a step's micro-batches: "
            "megatron (once per step), deepspeed (ZeRO-2/3 reduce per micro-batch), fsdp1 (FSDP without no_sync: every "
            "micro-batch gathers and reduce-scatters), fsdp1_no_sync (the non-final micro-batches in no_sync(): one "
            "reduction, ZeRO-3 gradients held unsharded), fsdp2 (fully_shard with gradient sync on), fsdp2_deferred "
            "(set_requires_gradient_sync(False) until the last micro-batch below ZeRO-3).",
        )
    )

    reduce_dtype: Literal["param", "fp32", "fp32_bf16"] | None = Field(
        default=None,
        description="The dtype of its data-parallel gradient reduction: param (the training precision, e.g. FSDP "
        "MixedPrecision reduce_dtype=bf16: Composer's PURE), fp32 (reduce_dtype=float32: Composer's DEFAULT, "
        "torchtitan) or fp32_bf16.",
    )

    train_metrics: int | None = Field(
        default=None,
        ge=0,
        le=16,
        description="Cross-entropy metrics its trainer computes over the logits after every micro-batch's backward, "
        "under autocast in fp32 (Composer's train metrics: llm-foundry's MPT has 2).",
    )

    @model_validator(mode="after")
    def _optimizer_dtype(self) -> StackOverride:
        from planner.specs.stacks import STACKS

        offered = STACKS[self.base].optimizer_dtypes
        if self.optimizer_dtype is not None and self.optimizer_dtype not in offered:
            raise ValueError(
                f"optimizer_dtype {self.optimizer_dtype!r} is not run by the {self.base!r} preset (it runs "
                f"{', '.join(offered)}): base it on a preset that runs it (nemo-2407 runs remainders, fp32 and param)"
            )
        return self

    @field_validator("selective_ac", mode="before")
    @classmethod
    def _selective_ac(cls, v: object) -> object:
        ok = v is None or v == "op" or (isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 1000)
        if not ok:
            raise ValueError(
                f"must be 'op' or a whole number of blocks from 1 to 1000 (got {v!r}); set "
                'training.stack.selective_ac to "op" (op-level policy) or k (every k-th block fully recomputed)'
            )
        return v


def resolve(value: Any) -> Stack:
    """The stack of a request's ``training.stack``: a preset id, or an object (a ``StackOverride`` or
    dict) with ``base`` and overrides of ``OVERRIDABLE`` fields. Validation of ids and values is the
    spec's (``planner.specs.StackOverride``); this only applies what it accepted."""
    from planner.specs.stacks import DEFAULT_STACK, OVERRIDABLE, STACKS

    if value is None:
        return STACKS[DEFAULT_STACK]
    if isinstance(value, str):
        return STACKS[value]
    data = value if isinstance(value, dict) else value.model_dump(exclude_none=True)
    base = STACKS[data.get("base", DEFAULT_STACK)]
    changes = {k: data[k] for k in OVERRIDABLE if data.get(k) is not None}
    if not changes:
        return base
    label = ", ".join(f"{k}={v}" for k, v in changes.items())
    return base.model_copy(update={"id": f"{base.id}+{{{label}}}", **changes})
