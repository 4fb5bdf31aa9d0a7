"""Training stacks as data (issue 11 §2): what the software that runs a plan fuses, overlaps and keeps.

A request's ``training.stack`` is a preset id (``STACKS``) or an inline ``{base: <preset id>, ...overrides}``
(``planner.specs.StackOverride``); ``resolve`` turns either into one ``Stack``. Each field feeds ONE
place of the cost model:

=========================  =====================================================================
field                      read by
=========================  =====================================================================
``attention``              ``gpu.attention_time`` (flash at published FlashAttention-2 rates;
                           unfused: the two batched GEMMs + the s×s scores through HBM) and
                           ``activations.saved_activation_bytes`` (unfused keeps the s×s probabilities)
``dropout``                ``kernels`` (mask traffic) and ``activations`` (1-byte masks kept)
``kernels``                ``ops.op_bytes``: HBM bytes of norms, SwiGLU and RoPE — ``"eager"``
                           (one PyTorch kernel per op, fp32 upcasts), ``"fused"`` (TE/apex kernels) or
                           ``"compiled"`` (``torch.compile`` per block: Inductor fuses each chain of
                           elementwise ops, residual adds into the next norm)
``norm_kernel``            the norms alone (``"eager"`` / ``"fused"``; unset: as ``kernels``), e.g.
                           torchtitan's Triton ``fused_rmsnorm`` in an otherwise eager block: ``op_bytes``
                           and the titan activation formula
``activations``            ``activations.saved_activation_bytes``: ``"zoo"`` = the bundled runtime's
                           PyTorch tensors (fused RMSNorm, GQA SDPA; pinned by tests/test_analytic_agreement.py);
                           ``"te"`` = Megatron-core + Transformer Engine's fused kernels;
                           ``"titan"`` = torchtitan's eager Llama block (op-level selective AC)
``selective_ac``           what ``recompute: selective`` means for ``"titan"`` activations (torchtitan's
                           ``selective_ac_option``): ``"op"`` = op-level policy; an int k = every k-th
                           block fully recomputed, the others keep everything (``activations`` and
                           ``compute``)
``overlap_grad_reduce``    ``terms.end_terms``: the DP gradient sync runs under the last backward
``reduce_dtype``           ``memory.zero3_buffer_bytes``: the fp32 reduce-scatter input of FSDP2
                           (torchtitan ``mixed_precision_reduce = "float32"``)
``param_layout``           ``memory.state_bytes`` under mixed precision: ``"master"`` = 16-bit weights and
                           gradients, fp32 master weights in the optimizer (Megatron, DeepSpeed; ZeRO's
                           2 + 2 + 12 bytes); ``"fsdp2"`` = FSDP2's ``MixedPrecisionPolicy``: fp32
                           parameters and gradients, a bf16 copy of the parameters unsharded from
                           forward to backward unless resharded (ZeRO-3)
``loss``                   ``memory.loss_buffer_bytes``: ``"fp32_logits"`` = one fp32 [T, V/t] tensor;
                           ``"upcast"`` = ``cross_entropy(logits.float(), …)`` (torchtitan, the bundled
                           runtime): three fp32 tensors at the loss's backward
=========================  =====================================================================

Sources per preset are in ``source`` (and docs/planner.md, "Training stacks").
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

Attention = Literal["flash", "unfused"]
ActivationFormula = Literal["zoo", "te", "titan"]
#: torchtitan's ``selective_ac_option``: "op" or k (every k-th block fully recomputed).
SelectiveAc = Literal["op"] | int
Kernels = Literal["eager", "fused", "compiled"]
NormKernel = Literal["eager", "fused"]
ReduceDtype = Literal["param", "fp32"]
ParamLayout = Literal["master", "fsdp2"]
LossKind = Literal["fp32_logits", "upcast"]

#: The fields an inline stack may override (all but ``id``, ``title`` and ``source``).
OVERRIDABLE = (
    "attention",
    "dropout",
    "activations",
    "kernels",
    "overlap_grad_reduce",
    "selective_ac",
    "norm_kernel",
)


class Stack(BaseModel):
    """One training stack (``meshplan stacks``, ``GET /v1/catalog/stacks``)."""

    model_config = ConfigDict(frozen=True)

    id: str
    title: str
    attention: Attention
    dropout: bool
    activations: ActivationFormula
    kernels: Kernels
    overlap_grad_reduce: bool
    source: str
    selective_ac: SelectiveAc = "op"
    norm_kernel: NormKernel | None = None
    #: dtype of the DP gradient reduction: "param" (the training precision) or "fp32" (FSDP2's
    #: ``MixedPrecisionPolicy(reduce_dtype=torch.float32)``, torchtitan's default)
    reduce_dtype: ReduceDtype = "param"
    #: where the fp32 master weights live under mixed precision (``memory.state_bytes``)
    param_layout: ParamLayout = "master"
    #: what the loss holds at its backward (``memory.loss_buffer_bytes``)
    loss: LossKind = "fp32_logits"

    @property
    def norm_fused(self) -> bool:
        """Whether the norms run as one fused kernel (``norm_kernel``; unset: as ``kernels``)."""
        return (self.norm_kernel or self.kernels) != "eager"

    def _selective_words(self) -> str:
        if self.activations != "titan":
            return ""
        if self.selective_ac == "op":
            return "selective AC per op, "
        return f"selective AC every {self.selective_ac} blocks, "

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
            source="runtime/parallelize.py: DP (and, on CUDA, one process too) through FSDP2 replicate/fully_shard with "
            "MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32): fp32 parameters and gradients, bf16 copies "
            "kept unsharded from forward to backward below ZeRO-3; runtime/job.py loss_fn: cross_entropy(logits.float()) "
            "(both measured on an H200: docs/validation.md 'On a GPU'); "
            "runtime/models/transformer.py: F.scaled_dot_product_attention (flash) with enable_gqa, K/V kept "
            "at the KV-head count; RMSNorm through F.rms_norm's fused kernel (aten._fused_rms_norm, "
            "pytorch/pytorch#153666), keeping input + fp32 1/rms; nn.LayerNorm; RoPE and SwiGLU as eager PyTorch "
            "ops; no dropout; --compile (torch.compile per block) is off by default and not priced "
            "(planner/analytic.py docstring; measured by tests/test_analytic_agreement.py)",
        ),
        Stack(
            id="megatron",
            title="Megatron-core + Transformer Engine (NeMo, Megatron-Bridge, Megatron-LM)",
            attention="flash",
            dropout=False,
            activations="te",
            kernels="fused",
            overlap_grad_reduce=False,
            source="TransformerEngine pytorch/module/layernorm_linear.py, layernorm_mlp.py (tensors saved); "
            "Megatron-LM megatron/training/arguments.py (--overlap-grad-reduce off unless set); "
            "Korthikanti et al. MLSys'23 §4 (34·s·b·h with dropout masks)",
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
            loss="upcast",
            source="pytorch/torchtitan torchtitan/models/llama/model.py, models/norms.py (composite RMSNorm, complex "
            "RoPE in fp32, repeat_kv before SDPA flash, no dropout) and parallelisms/parallelize_llama.py "
            "(op-level selective AC _save_list, FSDP2 reduce_dtype float32) at 9dec370; FSDP2 reduce-scatters "
            "gradients during backward (torchtitan docs/fsdp.md)",
        ),
        Stack(
            id="deepspeed",
            title="DeepSpeed (ZeRO, Megatron-DeepSpeed models)",
            attention="flash",
            dropout=False,
            activations="zoo",
            kernels="eager",
            overlap_grad_reduce=False,
            source="DeepSpeed config docs: zero_optimization.overlap_comm defaults to false",
        ),
    ]
}
DEFAULT_STACK = "meshplan"


def resolve(value: Any) -> Stack:
    """The stack of a request's ``training.stack``: a preset id, or an object (a ``StackOverride`` or
    dict) with ``base`` and overrides of ``OVERRIDABLE`` fields. Validation of ids and values is the
    spec's (``planner.specs.StackOverride``); this only applies what it accepted."""
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
