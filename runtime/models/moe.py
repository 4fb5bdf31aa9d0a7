"""The model zoo's mixture-of-experts MLP (``ModelSpec.moe``; issue 23): a top-k router, routed SwiGLU experts
computed with one grouped GEMM per projection, an optional shared expert, load balancing, dropless or dropping
tokens over an expert's capacity.

Module names (a contract with ``planner.specs.layout.tp_plan`` and checkpoints): a MoE layer's MLP is
``layers.<i>.moe`` (not ``mlp``, so the dense MLP's TP rules never match it) with ``router`` (a linear
h → num_experts, bias if ``router_bias``), ``experts`` (``w1``, ``w3``: [E, h, f]; ``w2``: [E, f, h]; under expert
parallelism each rank holds its E/ep experts as a ``Shard(0)`` DTensor of the global [E, …] shape) and
``shared`` (a dense SwiGLU MLP of ``shared_experts × shared_ffn``, when the spec has shared experts). With
``expert_bias`` (gpt-oss) the experts also hold ``b1``, ``b3`` [E, f] and ``b2`` [E, h], sharded with their experts.

Routing (per token, in fp32): ``softmax`` scores = softmax of the router logits over all experts (Mixtral, Qwen3-MoE);
``sigmoid`` scores = sigmoid of the logits (DeepSeek-V3). With group-limited routing (``router_groups``,
``router_topk_groups``) a token considers only the experts of its best groups (a group's score: the sum of its
two best scores for sigmoid, DeepSeek-V3; its best score for softmax). The top-k experts by score (+ the expert
bias under bias balancing) are chosen; their scores, renormalised to sum to 1, weight the experts' outputs.

Load balancing, by router: ``softmax`` → an auxiliary loss (GShard/Switch, sequence-level as DeepSeek's
seq_aux_loss: per sequence E·Σ_i f_i·P_i, f_i the share of the sequence's k·T assignments to expert i, P_i its mean
score, averaged over sequences, × ``aux_coeff``); its gradient is injected in backward (Megatron's
MoEAuxLossAutoScaler) so the reported loss stays the language-model loss. Defined per sequence, it is the same
whatever the micro-batch or data-parallel split; the ranks that split one sequence (TP with sequence parallelism)
sum the counts f first. ``sigmoid`` → aux-loss-free balancing (DeepSeek-V3): a per-expert bias, a buffer
``expert_bias`` that only affects the choice of experts, moved by ``bias_rate`` × sign(mean load − load) after each
optimizer step from the step's token counts (``tokens_per_expert``, summed over the ranks of a stage by the
caller: ``runtime.expert_parallel.update_expert_bias``).

Experts (``GroupedExperts``) run the tokens sorted by expert through ``torch._grouped_mm`` (2D tokens × 3D
weights with int32 group offsets): the grouped GEMM the GPU path uses. It runs on CPU in PyTorch 2.13 (fp32 and
bf16, autograd; ../shared/notes/moe-cp-fp8.md §8d: exact against a per-expert loop, about 2× slower than it on CPU),
so one code path serves both. gpt-oss's experts (``expert_bias``) add to each row of a grouped GEMM's output its
expert's bias (the bias rows gathered by the row's expert; w2's bias is then weighted by the gate with the rest of the
expert's output, as transformers' ``GptOssExperts``), and with ``swiglu_limit`` run its clamped SwiGLU
(``ClampedSwiGLU``) instead of silu(gate)·up. Under expert parallelism (``ep``: an ``EPContext``) the sorted tokens go to the
ranks holding their experts with an all-to-all of the per-expert counts and ``all_to_all_single_autograd`` of the
rows (uneven splits), are regrouped by local expert, run, and come back the same way; the combine then sums each
token's k outputs weighted by its gates.

Token dropping (``MoeSpec.capacity_factor``; null: dropless), as Megatron-core core_v0.16.1 does it
(``megatron/core/transformer/moe/moe_utils.py`` ``apply_router_token_dropping`` with its default
``--moe-token-drop-policy probs`` and no ``--moe-pad-expert-input-to-capacity``, called by ``router.py``
``TopKRouter.routing`` after top-k; ``MoeSpec.drop_policy`` "position": ``--moe-token-drop-policy position``):
each expert takes at most C = ceil(N·k / E × capacity_factor) of the N·k
assignments of the N tokens this rank routes in one forward (``get_capacity(num_tokens=N·k, …)``; the router
passes no ``min_capacity``), so C depends on the rank's tokens — the micro-batch and, under sequence or context
parallelism, its shard of each sequence — but not on EP, which only moves the kept rows. An expert over capacity
keeps, by policy ``probs``, its C assignments of highest routing probability (the token's renormalised gate; equal
gates: the earlier token first, where Megatron's ``torch.topk`` leaves ties unspecified), or, by ``position``, those
of its C earliest tokens in Megatron's [s, b] order — sequence position first, then the row (Megatron's
documented "tokens at the end of the batch are dropped"; its ``topk`` over the 0/1 routing map does not promise
which of the equal entries it returns); the others are dropped before dispatch: they
are neither sent nor computed and add nothing to the output (the token keeps its residual, its shared expert and
its other experts' gated outputs, not renormalised). The balance loss counts the routing before dropping
(Megatron's ``compute_routing_scores_for_aux_loss``), the expert bias the kept assignments (``_apply_expert_bias``
on the dropped routing map). ``drop_groups`` (the one-process reference, ``runtime.split_reference.drop_groups``)
splits one forward's tokens into the groups the ranks of a plan route separately; ``dropped`` counts the dropped
assignments of the forwards that count tokens (not a pipeline's shape inference or a recomputation).

Padding to capacity (``MoeSpec.pad_to_capacity``, Megatron-core's ``--moe-pad-expert-input-to-capacity``, core_v0.16.1):
every expert computes C rows (Σ of the groups' C in the one-process reference) whatever its load, and under EP each
rank sends C rows per expert with even splits, so the grouped GEMMs and the all-to-all run at fixed shapes. The kept
rows fill each expert's slot first; the rest are zero rows, whose outputs are discarded before the combine: they
change neither the output nor a gradient (a zero row adds zeros to the weight gradients; its discarded output gets a
zero gradient). Megatron fills the slots with real tokens whose routing probability is zero instead (its router's
``capacity_mask`` keeps C tokens per expert, ``apply_router_token_dropping`` ``pad_to_capacity=True``), with the same
shapes, output and gradients (those rows are weighted by a zero probability). One difference: Megatron's expert bias
counts that padded routing map (``router.py`` ``_apply_expert_bias(routing_map)``: C per expert, a flat load that
leaves the bias where it is), the runtime the kept assignments, as unpadded.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from planner.specs import ModelSpec

#: Auxiliary-loss coefficient (softmax routers) and expert-bias update rate (sigmoid routers); the runtime's
#: (``runtime.job.TrainConfig`` may override them): Megatron's --moe-aux-loss-coeff 1e-2 (Mixtral recipes) and
#: DeepSeek-V3's bias update speed 1e-3 (torchtitan load_balance_coeff).
AUX_COEFF = 1e-2
BIAS_RATE = 1e-3


def grouped_mm(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """Rows of ``x`` [M, a] grouped by ``offs`` (int32 cumulative ends) times ``w`` [G, a, b] → [M, b]."""
    if x.shape[0] == 0:  # no token reached this rank's experts: keep the weights in the graph
        return x @ w[0] * 0 if w.shape[0] else x.new_zeros(0, w.shape[-1])
    return torch._grouped_mm(x, w, offs=offs)


#: gpt-oss's clamped SwiGLU (``MoeSpec.swiglu_limit``): σ(ALPHA · gate), as transformers' ``GptOssExperts.alpha``.
SWIGLU_ALPHA = 1.702
_EXPERT_LEAVES = ("w1", "w3", "w2")
#: The experts' biases (``MoeSpec.expert_bias``): [E, f] on w1's and w3's outputs, [E, h] on w2's.
_BIAS_LEAVES = ("b1", "b3", "b2")


def expert_capacity(tokens: int, top_k: int, num_experts: int, capacity_factor: float) -> int:
    """Assignments an expert takes from ``tokens`` routed tokens: Megatron-core's ``get_capacity(num_tokens=tokens ×
    top_k, num_experts, capacity_factor)`` as the router calls it (no ``min_capacity``), the same float expression."""
    return math.ceil((tokens * top_k / num_experts) * capacity_factor)


def capacity_keep(
    gates: torch.Tensor,
    idx: torch.Tensor,
    num_experts: int,
    capacity_factor: float,
    groups: torch.Tensor | None = None,
    policy: str = "probs",
    batch: tuple[int, int] | None = None,
) -> torch.Tensor:
    """Which of the [N, k] assignments (experts ``idx``, weights ``gates``) of N = B·T tokens (``batch`` (B, T), rows
    first) each expert keeps: per group of tokens (``groups``: [N] ids; None: one group) and expert, the
    ``expert_capacity`` of the group's tokens first by ``policy`` — "probs": highest gate first, equal gates in token
    order; "position": the earliest in Megatron's [T, B] token order (sequence position, then row). Returns an [N, k]
    bool mask (module docstring)."""
    n, k = idx.shape
    if groups is None:
        groups = torch.zeros(n, dtype=torch.long, device=idx.device)
    _, group = torch.unique(groups, return_inverse=True)
    sizes = torch.bincount(group).tolist()
    caps = torch.tensor([expert_capacity(s, k, num_experts, capacity_factor) for s in sizes], device=idx.device)
    key = group.repeat_interleave(k) * num_experts + idx.reshape(-1)  # (group, expert) of every assignment
    if policy == "probs":
        first = torch.argsort(-gates.detach().reshape(-1), stable=True)  # highest first; ties: earlier token
    elif policy == "position":
        b, t = batch if batch is not None else (1, n)
        token = torch.arange(n, device=idx.device)
        seq_major = (token % t) * b + token // t  # the token's place in Megatron's [s, b] flattening
        first = torch.argsort(seq_major.repeat_interleave(k), stable=True)
    else:
        raise ValueError(f"drop policy {policy!r}: use 'probs' or 'position'")
    order = first[torch.argsort(key[first], stable=True)]  # grouped by (group, expert), first kept first in each
    counts = torch.bincount(key, minlength=len(sizes) * num_experts)
    start = torch.cumsum(counts, 0) - counts
    rank = torch.empty_like(key)
    rank[order] = torch.arange(key.numel(), device=key.device) - start[key[order]]
    return (rank < caps[key // num_experts]).view(n, k)


class ClampedSwiGLU(torch.autograd.Function):
    """gpt-oss's expert activation on the gate ``a`` and up ``b`` projections (transformers' ``GptOssExperts``):
    g = min(a, limit), u = clamp(b, −limit, limit), out = (u + 1) · g · σ(α·g). Keeps only ``a`` and ``b`` for
    backward (as a fused kernel would; plain autograd ops would keep seven f-wide tensors), recomputing the rest;
    gradients pass where the clamps do not bind (inclusive, as ``torch.clamp``'s)."""

    @staticmethod
    def forward(ctx, a: torch.Tensor, b: torch.Tensor, limit: float) -> torch.Tensor:
        ctx.save_for_backward(a, b)
        ctx.limit = limit
        g = a.clamp(max=limit)
        return (b.clamp(-limit, limit) + 1) * g * torch.sigmoid(SWIGLU_ALPHA * g)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        a, b = ctx.saved_tensors
        limit = ctx.limit
        g = a.clamp(max=limit)
        u = b.clamp(-limit, limit)
        sig = torch.sigmoid(SWIGLU_ALPHA * g)
        d_g = sig * (1 + SWIGLU_ALPHA * g * (1 - sig))
        grad_a = grad * (u + 1) * d_g * (a <= limit)
        grad_b = grad * g * sig * ((b >= -limit) & (b <= limit))
        return grad_a, grad_b, None


class GroupedExperts(nn.Module):
    """``local`` SwiGLU experts (global indices ``first`` … ``first + local − 1`` of ``num_experts``) as three
    stacked weights, with ``bias``: three stacked biases added to each row by its expert (gpt-oss), and with
    ``limit``: gpt-oss's clamped SwiGLU (``ClampedSwiGLU``). ``forward`` takes rows sorted by local expert and the
    rows per expert."""

    def __init__(self, num_experts: int, dim: int, ffn: int, *, bias: bool = False, limit: float | None = None) -> None:
        super().__init__()
        self.num_experts, self.first, self.local = num_experts, 0, num_experts
        self.limit = limit
        self.w1 = nn.Parameter(torch.empty(num_experts, dim, ffn))
        self.w3 = nn.Parameter(torch.empty(num_experts, dim, ffn))
        self.w2 = nn.Parameter(torch.empty(num_experts, ffn, dim))
        self.has_bias = bias
        if bias:
            self.b1 = nn.Parameter(torch.empty(num_experts, ffn))
            self.b3 = nn.Parameter(torch.empty(num_experts, ffn))
            self.b2 = nn.Parameter(torch.empty(num_experts, dim))

    @property
    def leaves(self) -> tuple[str, ...]:
        """Names of the stacked per-expert parameters (first dim: the expert), each sharded alike under EP."""
        return _EXPERT_LEAVES + (_BIAS_LEAVES if self.has_bias else ())

    def keep(self, first: int, local: int) -> None:
        """Hold only experts ``first`` … ``first + local − 1`` (expert parallelism; call on the meta device)."""
        self.first, self.local = first, local
        for name in self.leaves:
            p = getattr(self, name)
            setattr(self, name, nn.Parameter(torch.empty((local, *p.shape[1:]), device=p.device, dtype=p.dtype)))

    def _weights(self) -> list[torch.Tensor]:
        from runtime.expert_parallel import local_weight

        return [local_weight(getattr(self, name), self) for name in self.leaves]

    def forward(self, x: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        w1, w3, w2, *biases = self._weights()
        offs = torch.cumsum(counts, 0).to(torch.int32)
        a, b = grouped_mm(x, w1, offs), grouped_mm(x, w3, offs)
        if biases:  # each row's bias is its expert's: the expert index of every row, by the rows per expert
            row_expert = torch.repeat_interleave(
                torch.arange(counts.shape[0], device=x.device), counts, output_size=x.shape[0]
            )
            b1, b3, b2 = (bias.index_select(0, row_expert) for bias in biases)
            a, b = a + b1, b + b3
        h = F.silu(a) * b if self.limit is None else ClampedSwiGLU.apply(a, b, self.limit)
        out = grouped_mm(h, w2, offs)
        return out + b2 if biases else out


class _AttachAux(torch.autograd.Function):
    """Identity on ``out`` whose backward also back-propagates ``aux`` with gradient ``scale``."""

    @staticmethod
    def forward(ctx, out: torch.Tensor, aux: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.scale = scale
        ctx.aux_shape = aux.shape
        return out.view_as(out)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad, torch.full(ctx.aux_shape, ctx.scale, dtype=torch.float32, device=grad.device), None


def _in_backward() -> bool:
    """Whether this forward is activation recomputation inside a backward pass (its counts are not new tokens)."""
    return torch._C._current_graph_task_id() != -1


class MoE(nn.Module):
    """Router → top-k dispatch → grouped experts → gate-weighted combine (+ shared expert). Takes and returns
    [B, T, h] (T: this rank's tokens of each sequence)."""

    #: Set by the plan applier (``runtime.expert_parallel``): the EP context (None: all experts here), the groups
    #: whose ranks split one sequence (TP with sequence parallelism; their counts are summed for the aux loss)
    #: and the aux loss's gradient scale (1 / micro-batches when the caller does not rescale gradients).
    ep = None
    seq_groups: tuple = ()
    aux_scale = 1.0
    #: Whether a forward adds its routed tokens to ``tokens_per_expert`` (off during a pipeline stage's shape
    #: inference: ``runtime.job``; never during activation recomputation)
    counting = True
    #: The one-process reference's groups of tokens routed apart ([B, T] ids; None: the forward's tokens are one)
    drop_groups: torch.Tensor | None = None

    def __init__(self, spec: ModelSpec, *, tp: int = 1) -> None:
        """``tp``: the shared expert at its TP-sharded width (``build_layer``, for the profiler)."""
        super().__init__()
        moe = spec.moe
        assert moe is not None
        d = spec.hidden_size
        self.num_experts, self.top_k, self.score = moe.num_experts, moe.top_k, moe.router
        self.capacity_factor, self.drop_policy = moe.capacity_factor, moe.drop_policy
        self.pad_to_capacity = moe.pad_to_capacity
        self.dropped = 0  # assignments dropped over capacity (module docstring)
        self.groups, self.topk_groups = moe.router_groups, moe.router_topk_groups
        self.aux_coeff, self.bias_rate = AUX_COEFF, BIAS_RATE
        self.router = nn.Linear(d, moe.num_experts, bias=moe.router_bias)
        self.experts = GroupedExperts(
            moe.num_experts, d, moe.expert_ffn_hidden_size, bias=moe.expert_bias, limit=moe.swiglu_limit
        )
        self.shared = None
        if moe.shared_experts:
            from runtime.models.transformer import FeedForward

            self.shared = FeedForward(spec, tp=tp, ffn=moe.shared_experts * moe.shared_ffn)
        self.balance = "aux_loss" if moe.router == "softmax" else "expert_bias"
        self.register_buffer("expert_bias", torch.zeros(moe.num_experts), persistent=True)
        self.register_buffer("tokens_per_expert", torch.zeros(moe.num_experts), persistent=False)

    # ---------------------------------------------------------------- routing
    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(scores [N, E] fp32, chosen experts [N, k], gates [N, k]) of the tokens ``x`` [B, T, h] (N = B·T)."""
        logits = self.router(x)
        if hasattr(logits, "to_local"):  # TP: the router runs sequence-parallel (a Replicate DTensor weight)
            logits = logits.to_local()
        logits = logits.reshape(-1, self.num_experts).float()
        scores = logits.softmax(-1) if self.score == "softmax" else logits.sigmoid()
        choice = scores.detach()
        if self.balance == "expert_bias":
            choice = choice + self.expert_bias
        if self.groups is not None:
            n, g = choice.shape[0], self.groups
            grouped = choice.view(n, g, -1)
            best = (
                grouped.topk(2, -1).values.sum(-1)
                if self.score == "sigmoid" and grouped.shape[-1] > 1
                else grouped.amax(-1)
            )
            keep = torch.zeros_like(best, dtype=torch.bool).scatter_(1, best.topk(self.topk_groups, -1).indices, True)
            choice = choice.masked_fill(~keep.repeat_interleave(grouped.shape[-1], 1), float("-inf"))
        idx = choice.topk(self.top_k, -1).indices
        gates = scores.gather(1, idx)
        gates = gates / gates.sum(-1, keepdim=True)
        return scores, idx, gates

    def aux_loss(self, scores: torch.Tensor, idx: torch.Tensor, b: int) -> torch.Tensor:
        """This rank's share of the sequence-level balance loss of its ``b`` sequences (the ranks of
        ``seq_groups`` hold the other tokens of the same sequences; their shares add up to the loss)."""
        import torch.distributed as dist

        e = self.num_experts
        t_local = scores.shape[0] // b
        counts = torch.zeros(b, e, device=scores.device)
        counts.scatter_add_(1, idx.view(b, -1), torch.ones(idx.view(b, -1).shape, device=scores.device))
        tokens = torch.tensor(float(t_local), device=scores.device)
        for group in self.seq_groups:  # whole-sequence counts and lengths
            dist.all_reduce(counts, group=group)
            dist.all_reduce(tokens, group=group)
        f = counts / (tokens * self.top_k)  # [b, E], no gradient
        p_sum = scores.view(b, t_local, e).sum(1) / tokens  # this rank's part of each P_i
        return self.aux_coeff * e * (f * p_sum).sum() / b

    # ---------------------------------------------------------------- forward
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if hasattr(x, "to_local"):
            x = x.to_local()
        b, t, d = x.shape
        flat = x.reshape(b * t, d)
        scores, idx, gates = self.route(x)
        experts = idx.reshape(-1)
        counting = self.counting and torch.is_grad_enabled() and not _in_backward()
        capacity = 0  # each expert's padded rows (pad_to_capacity)
        if self.capacity_factor is None:
            order = torch.argsort(experts, stable=True)  # assignments sorted by expert (token order within one)
            counts = torch.bincount(experts, minlength=self.num_experts)
        else:  # the kept assignments only, sorted the same way
            groups = None if self.drop_groups is None else self.drop_groups.reshape(-1).to(idx.device)
            if groups is not None and groups.numel() != b * t:
                raise ValueError(f"drop_groups holds {groups.numel()} token ids for {b * t} tokens")
            if self.pad_to_capacity:  # Σ over the groups of their capacity: each expert's padded rows
                sizes = [b * t] if groups is None else torch.bincount(torch.unique(groups, return_inverse=True)[1])
                capacity = sum(
                    expert_capacity(int(n), self.top_k, self.num_experts, self.capacity_factor) for n in sizes
                )
            kept = capacity_keep(
                gates, idx, self.num_experts, self.capacity_factor, groups, self.drop_policy, (b, t)
            ).reshape(-1)
            kept = kept.nonzero().squeeze(1)
            order = kept[torch.argsort(experts[kept], stable=True)]
            counts = torch.bincount(experts[kept], minlength=self.num_experts)
            if counting:
                self.dropped += experts.numel() - kept.numel()
        token_of = order // self.top_k
        if self.balance == "expert_bias" and counting:
            self.tokens_per_expert += counts.to(self.tokens_per_expert.dtype)
        rows = flat.index_select(0, token_of)
        if self.capacity_factor is not None and self.pad_to_capacity:
            out = self._run_padded(rows, counts, capacity)
        elif self.ep is None:
            out = self.experts(rows, counts)
        else:
            out = self.ep.run(self.experts, rows, counts)
        out = out * gates.reshape(-1).index_select(0, order).unsqueeze(-1).to(out.dtype)
        y = torch.zeros_like(flat).index_add(0, token_of, out.to(flat.dtype)).view(b, t, d)
        if self.shared is not None:
            y = y + self.shared(x)
        if self.balance == "aux_loss" and self.aux_coeff > 0 and torch.is_grad_enabled():
            y = _AttachAux.apply(y, self.aux_loss(scores, idx, b), self.aux_scale)
        return y

    def _run_padded(self, rows: torch.Tensor, counts: torch.Tensor, capacity: int) -> torch.Tensor:
        """The kept ``rows`` (sorted by expert, ``counts`` per expert) through the experts padded to ``capacity``
        rows each (``MoeSpec.pad_to_capacity``; module docstring): a [E·capacity, h] buffer of zero rows with each
        expert's kept rows first in its slot, dispatched with even splits; the kept rows' outputs are returned."""
        e = self.num_experts
        start = torch.cumsum(counts, 0) - counts  # each expert's first kept row
        expert = torch.repeat_interleave(torch.arange(e, device=rows.device), counts, output_size=rows.shape[0])
        slot = expert * capacity + torch.arange(rows.shape[0], device=rows.device) - start[expert]
        padded = rows.new_zeros(e * capacity, rows.shape[1]).index_copy(0, slot, rows)
        full = torch.full_like(counts, capacity)
        out = self.experts(padded, full) if self.ep is None else self.ep.run(self.experts, padded, full)
        return out.index_select(0, slot)

    @torch.no_grad()
    def update_bias(self, counts: torch.Tensor) -> None:
        """Aux-loss-free balancing (DeepSeek-V3 §2.1.2): raise the bias of under-loaded experts, lower the
        over-loaded ones' by ``bias_rate``, from the step's token counts (summed over the stage's ranks)."""
        if self.balance == "expert_bias":
            self.expert_bias += self.bias_rate * torch.sign(counts.mean() - counts)
        self.tokens_per_expert.zero_()
