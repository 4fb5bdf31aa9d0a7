"""Shared by every schema module: the base model, the schema version, literal types and bounds."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

#: 2: ``mesh`` without rank groups, the GPU only in ``cluster.gpu`` (a full GpuSpec), one memory-per-stage
#: list, ``inputs`` (cost inputs and cost-model version). Schema-1 plans are read and upgraded.
SCHEMA_VERSION = 2

Family = Literal["gpt", "llama"]
Activation = Literal["gelu", "swiglu"]
Norm = Literal["layernorm", "rmsnorm"]
#: ``fp8``: BF16 mixed precision with the transformer blocks' linears in FP8 (``training.fp8_recipe``;
#: ``planner.specs.fp8``): tensors, weights and activations stay 16-bit, only those GEMMs' operands are FP8.
Precision = Literal["bf16", "fp16", "fp32", "fp8"]
#: FP8 scaling recipes: torchao's ``tensorwise`` / ``rowwise`` (dynamic scales per tensor / per row),
#: Transformer Engine's ``delayed`` (DelayedScaling: amax history) / ``current`` (Float8CurrentScaling),
#: ``mxfp8`` (MXFP8BlockScaling, 1×32 blocks with E8M0 scales: Blackwell tensor cores).
Fp8Recipe = Literal["tensorwise", "rowwise", "delayed", "current", "mxfp8"]
Optimizer = Literal["adam", "sgd"]
#: how a stack's data-parallel engine spreads DP collectives over a step's micro-batches (``workload.accumulation``)
GradAccumulation = Literal["megatron", "deepspeed", "fsdp1", "fsdp1_no_sync", "fsdp2", "fsdp2_deferred"]
#: how a stack adds each micro-batch's weight gradients into the step's (``workload.accumulation.add_bytes``)
GradAdd = Literal["autograd", "main_grad_if_bf16", "main_grad_fused"]
#: Adam's states under mixed precision (``compose.memory.state_bytes``, ``optimizer_step_bytes``): "fp32" (fp32 moments
#: and master weights, K = 12); "param" (moments in the parameters' 16-bit dtype, no master copy: NeMo's apex
#: ``DistributedFusedAdam`` with ``optim.dtype`` = the model's dtype, ``planner.specs.stack_nemo``); "remainders" (fp32
#: moments, the bf16 parameter and its 16-bit remainder instead of an fp32 master copy, K = 2 + 4 × moments: apex with
#: ``store_param_remainders``, NeMo's choice for optim.dtype fp32 over bf16 parameters; cost model 54)
OptimizerDtype = Literal["fp32", "param", "remainders"]
LayerKind = Literal["embedding", "transformer_block", "lm_head"]

#: Bytes of a tensor element of the training precision; FP8 training keeps BF16 tensors (its FP8 GEMM
#: operands are priced per linear: ``planner.workload.fp8``).
BYTES_PER_ELEMENT: dict[str, int] = {"bf16": 2, "fp16": 2, "fp32": 4, "fp8": 2}

# Sane upper bounds: far above any real model or cluster, low enough to refuse nonsense early.
MAX_HIDDEN = 131_072
MAX_VOCAB = 4_194_304
MAX_SEQ_LEN = 16_777_216
MAX_GPUS_PER_NODE = 64


class Spec(BaseModel):
    """Base: unknown fields are errors (a typo must not silently fall back to a default)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
