"""Training stacks as data (issue 11 §2): what the software that runs a plan fuses, overlaps and keeps.

A request's ``training.stack`` is a preset id (``STACKS``) or an inline ``{base: <preset id>, ...overrides}``
(``planner.specs.StackOverride``); ``resolve`` turns either into one ``Stack``. Each field feeds ONE
place of the cost model:

=========================  =====================================================================
field                      read by
=========================  =====================================================================
``attention``              ``kernels.attention_time`` (flash at published FlashAttention-2 rates;
                           unfused: the two batched GEMMs + the s×s scores through HBM) and
                           ``activations.saved_activation_bytes`` (unfused keeps the s×s probabilities)
``dropout``                ``kernels`` (mask traffic) and ``activations`` (1-byte masks kept)
``kernels``                ``kernels.op_bytes``: HBM bytes of norms, SwiGLU and RoPE — ``"eager"``
                           (one PyTorch kernel per op, fp32 upcasts) or ``"fused"`` (TE/apex kernels)
``activations``            ``activations.saved_activation_bytes``: ``"zoo"`` = the bundled runtime's
                           tensors (fused RMSNorm, GQA SDPA; pinned by tests/test_analytic_agreement.py);
                           ``"te"`` = Megatron-core + Transformer Engine's fused kernels
``overlap_grad_reduce``    ``terms.end_terms``: the DP gradient sync runs under the last backward
=========================  =====================================================================

Sources per preset are in ``source`` (and docs/planner.md, "Training stacks").
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

Attention = Literal["flash", "unfused"]
ActivationFormula = Literal["zoo", "te"]
Kernels = Literal["eager", "fused"]

#: The fields an inline stack may override (all but ``id``, ``title`` and ``source``).
OVERRIDABLE = ("attention", "dropout", "activations", "kernels", "overlap_grad_reduce")


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

    def describe(self) -> str:
        """One line for explanations: which stack a plan was priced for."""
        return (
            f"{self.id} ({self.attention} attention{', dropout' if self.dropout else ''}, "
            f"{'Transformer Engine' if self.activations == 'te' else 'eager PyTorch'} activations, {self.kernels} kernels, "
            f"DP grad reduce {'overlapped with' if self.overlap_grad_reduce else 'after'} backward)"
        )


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
            overlap_grad_reduce=True,
            source="runtime/models/transformer.py: F.scaled_dot_product_attention (flash) with enable_gqa, K/V kept "
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
            activations="zoo",
            kernels="eager",
            overlap_grad_reduce=True,
            source="pytorch/torchtitan torchtitan/models/llama (SDPA flash, repeat_kv before SDPA, no dropout); "
            "FSDP2 reduce-scatters gradients during backward (torchtitan docs/fsdp.md)",
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
