"""A model's layer sequence by block kind: one kind (every dense model, and a mixture of experts whose every block
is MoE) or two (DeepSeek-V3's 3 dense layers then 58 MoE, Llama 4 Maverick's alternating layers,
``ModelSpec.moe.first_dense_layers`` / ``moe_layer_freq``). A model of two kinds is priced as each kind alone
(``terms.shared_terms`` of a model whose every block is dense, and of one whose every block is MoE) and the two
joined (``merged``): every term keeps one coefficient per layer and one more per MoE layer (``affine.Affine.moe``),
so a stage's time and memory sum the kinds of the layers it holds, wherever the cut puts them. A model of one kind
whose blocks attend over a sliding window on some layers and fully on the others (gpt-oss: every other layer,
``ModelSpec.window_layer_freq``) is two kinds the same way: its kind and that kind with the window (``WINDOW``,
priced in ``window_view``), the prefix counting the windowed layers, so the cut solver sees its heterogeneous layers
as it sees DeepSeek-V3's."""

from __future__ import annotations

from dataclasses import fields, replace
from typing import TYPE_CHECKING, Any

from planner.compose.affine import Affine, moe_prefix
from planner.compose.context import Context, SharedKey
from planner.workload.collectives import grad_bucket
from planner.workload.ops import MOE_BLOCK, block_kinds

if TYPE_CHECKING:
    from planner.compose.terms import SharedTerms


#: The suffix of a block kind whose attention runs over the sliding window (``window_view``), in a model of windowed
#: and full blocks of one kind (gpt-oss: ``"moe_block"`` and ``"moe_block@window"``, alternating).
WINDOW = "@window"


def mixed_windows(ctx: Context) -> bool:
    """Whether some but not all blocks attend over a window shorter than the whole sequence (s × cp), on a stack whose
    kernel skips the blocks outside it (``Stack.window_kernel``; else every block costs the whole square)."""
    m = ctx.model
    banded = ctx.stack.window_kernel and m.window_at(ctx.training.seq_len * ctx.cp) is not None
    return banded and 0 < m.window_layers() < m.num_layers


def window_view(ctx: Context) -> Context:
    """The request priced as if every block had the model's window (``Inputs.attention_window``): what a windowed
    block of a model of windowed and full blocks costs. Analytic, as the CP views are: a measured profile's
    block is one kind's (the profiler's layer 0)."""
    view = ctx.window
    if view is None:
        model = ctx.model.model_copy(update={"window_first_layer": 0, "window_layer_freq": 1})
        view = ctx.window = replace(ctx, model=model, profile=None, layer_fn=None)
        if ctx.profile is None and ctx.layer_fn is None:  # priced alike: the routed experts read no window
            view.expert_terms = ctx.expert_terms  # (``tests/test_moe_families.py`` checks them against the view's own)
    return view


def block_sequence(ctx: Context) -> tuple[tuple[str, ...], tuple[int, ...] | None]:
    """The block kinds the model has (one, or ``("transformer_block", "moe_block")``) and, for two kinds, the
    ``affine.moe_prefix`` of its layer sequence (``ops.block_kinds``: DeepSeek-V3's 3 dense layers then 58 MoE,
    Llama 4 Maverick's alternation); a model of one kind whose blocks are windowed and full (``mixed_windows``:
    gpt-oss) has that kind and its ``WINDOW`` kind, the prefix counting the windowed blocks
    (``ModelSpec.is_window_layer``). Cached on the context."""
    seq = ctx.blocks
    if seq is None:
        order = block_kinds(ctx.model)
        kinds = tuple(sorted(set(order)))  # "moe_block" < "transformer_block": the dense kind last
        if len(kinds) == 1 and mixed_windows(ctx):  # (``answer.request.check_priced`` refuses two kinds and windows)
            windowed = [ctx.model.is_window_layer(i) for i in range(ctx.model.num_layers)]
            seq = ctx.blocks = ((kinds[0], kinds[0] + WINDOW), moe_prefix(windowed))
        elif len(kinds) == 1:
            seq = ctx.blocks = (kinds, None)
        else:
            seq = ctx.blocks = (("transformer_block", MOE_BLOCK), moe_prefix([k == MOE_BLOCK for k in order]))
    return seq


def has_moe_blocks(ctx: Context) -> bool:
    """Whether some block of the model is a MoE block."""
    return MOE_BLOCK in block_sequence(ctx)[0]


def block_counts(ctx: Context) -> dict[str, int]:
    """The model's layers of each block kind."""
    kinds, prefix = block_sequence(ctx)
    if prefix is None:
        return {kinds[0]: ctx.model.num_layers}
    return {kinds[0]: ctx.model.num_layers - prefix[-1], kinds[1]: prefix[-1]}


def window_terms(ctx: Context, key: SharedKey, memory_only: bool = False) -> SharedTerms:
    """The terms of a model of windowed and full blocks of one kind: the full kind's and the windowed kind's
    (``window_view``) ``merged`` (the window changes the attention's time alone: memory and parameters alike)."""
    from planner.compose.terms import kind_terms

    (full, windowed), prefix = block_sequence(ctx)
    assert prefix is not None  # block_sequence gives mixed windows two kinds
    names = MEMORY_FIELDS if memory_only else None
    terms = kind_terms(ctx, key, full, memory_only)
    alike = memory_only and same_memory(ctx, key, full, windowed)  # the windowed kind's memory terms: the full one's
    return merged(terms, terms if alike else kind_terms(ctx, key, windowed, memory_only), prefix, names)


def same_memory(ctx: Context, key: SharedKey, full: str, windowed: str) -> bool:
    """Whether the windowed kind's memory terms (``terms.kind_terms(memory_only=True)``: what ``merged`` reads of it,
    ``MEMORY_FIELDS``, ``recompute_tmp``, ``z3_tmp``) are the full kind's: they read the context's stack, training and
    precision, alike in the window view (it changes the model's window fields alone, which no memory term reads:
    ``Inputs.attention_window`` and ``attention_share`` price FLOPs and the attention's time), and of the kind's
    ``LayerGroup`` its parameters, routed experts' parameters, saved activations and rematerialised buffer, compared
    here (priced already: the search's lean bounds price both kinds). Not with a measured profile (the view is
    analytic). ``tests/test_window_memory.py`` checks the terms on a table of models and layouts."""
    if ctx.profile is not None or ctx.layer_fn is not None:
        return False
    from planner.compose.terms import layer_group

    mbs, tp, sp, recompute, _, _, tpo, ep, etp, _ = key
    a = layer_group(ctx, mbs, tp, sp, recompute, tpo, ep, etp, full)
    b = layer_group(ctx, mbs, tp, sp, recompute, tpo, ep, etp, windowed)
    return (a.params, a.expert_params, a.acts, a.recompute_tmp) == (b.params, b.expert_params, b.acts, b.recompute_tmp)


def mixed_terms(ctx: Context, key: SharedKey, prefix: tuple[int, ...], memory_only: bool = False) -> SharedTerms:
    """The terms of a model of dense and MoE blocks (``terms.shared_terms``' key): each kind's (``terms.kind_terms``)
    ``merged``. The dense kind's do not depend on the experts' layout but for the model's parameters per rank (its
    DP buckets): shared by the (ep, etp) pairs with as many."""
    from planner.compose.terms import kind_memory, kind_terms, layer_group

    if block_sequence(ctx)[0][1].endswith(WINDOW):
        return window_terms(ctx, key, memory_only)
    mbs, tp, sp, recompute, zero_stage, dp, tpo, ep, etp, pipelined = key
    at = (mbs, tp, sp, recompute, tpo, ep, etp)
    if memory_only:  # ``terms.memory_terms``: the dense kind's memory terms do not depend on (ep, etp) at all
        mem_key = (*at[:5], zero_stage, dp, pipelined, "memory")  # pipelined: whole gradients held
        dense = ctx.dense_terms.get(mem_key)
        if dense is None:
            dense = ctx.dense_terms[mem_key] = kind_terms(ctx, key, "transformer_block", True)
        # the memory terms joined (what ``search.screens`` reads), the times left unjoined: never read. ``merged`` of
        # the MoE kind's ``kind_terms(memory_only=True)``, from its memory part alone (``terms.kind_memory``: the
        # same values, without building that kind's terms; every time and FLOP term NOTHING or 0 in both)
        moe = kind_memory(ctx, key, MOE_BLOCK)
        return fast_replace(
            dense,
            states=joined(dense.states, moe.states),
            acts=joined(dense.acts, moe.lg.acts),
            grads=joined(dense.grads, moe.grads),
            recompute_tmp=max(dense.recompute_tmp, moe.lg.recompute_tmp),
            z3_tmp=max(dense.z3_tmp, moe.z3_tmp),
            moe_prefix=prefix,
            flops_moe=0.0,
        )
    lg = layer_group(ctx, *at, "transformer_block")
    params = sum(layer_group(ctx, *at, k).params[0] * n for k, n in block_counts(ctx).items())
    # the parameters per rank reach the dense kind's terms only as its DP gradient bucket (``kind_terms``): keyed by
    # that bucket, the (ep, etp) pairs whose buckets agree share one (every pair, where the bucket is the stack's)
    dense_key = (*at[:5], zero_stage, dp, grad_bucket(ctx.stack, dp, lg.params[1] + lg.params[2] + params), pipelined)
    dense = ctx.dense_terms.get(dense_key)
    if dense is None:
        dense = ctx.dense_terms[dense_key] = kind_terms(ctx, key, "transformer_block")
    return merged(dense, kind_terms(ctx, key, MOE_BLOCK), prefix)


#: The ``Affine`` memory terms of ``SharedTerms`` (model states, saved activations, gradients held from a backward on).
MEMORY_FIELDS = ("states", "acts", "grads")


_AFFINE_FIELDS: dict[type, tuple[str, ...]] = {}


def affine_fields(terms: SharedTerms) -> tuple[str, ...]:
    """The names of ``SharedTerms``' fields annotated ``Affine`` (the ones ``merged`` may join), once per class."""
    names = _AFFINE_FIELDS.get(type(terms))
    if names is None:
        names = _AFFINE_FIELDS[type(terms)] = tuple(f.name for f in fields(terms) if "Affine" in str(f.type))
    return names


def merged(
    dense: SharedTerms, moe: SharedTerms, prefix: tuple[int, ...], names: tuple[str, ...] | None = None
) -> SharedTerms:
    """The terms of a model of dense and MoE blocks from the terms of each kind priced as if every block were of
    it: every ``Affine`` keeps the dense one's constant and extras (the embedding, the LM head and the end of step
    are the model's, alike in both) with the dense layer's coefficient as ``layer`` and what a MoE layer adds as
    ``moe``; the per-layer buffers (one rematerialised or ZeRO-3-gathered layer) are the larger kind's. ``names``:
    the ``Affine`` fields joined (default all)."""
    two: dict[str, Any] = {
        name: joined(a, b)
        for name in (names if names is not None else affine_fields(dense))
        if isinstance(a := getattr(dense, name), Affine) and isinstance(b := getattr(moe, name), Affine)
    }
    return fast_replace(
        dense,
        **two,
        recompute_tmp=max(dense.recompute_tmp, moe.recompute_tmp),
        z3_tmp=max(dense.z3_tmp, moe.z3_tmp),
        moe_prefix=prefix,
        flops_moe=moe.flops_layer - dense.flops_layer,
    )


def joined(dense: Affine, moe: Affine) -> Affine:
    """``merged``'s join of one term: the dense kind's constant and extras, its layer coefficient as ``layer`` and
    what a MoE layer adds as ``moe``."""
    return Affine(dense.const, dense.layer, dense.emb, dense.head, moe.layer - dense.layer)


_SETTERS: dict[type, tuple[tuple[str, Any], ...]] = {}


def fast_replace(terms: SharedTerms, **changes: Any) -> SharedTerms:
    """``dataclasses.replace(terms, **changes)`` of ``SharedTerms`` (frozen, slotted, every field in ``__init__``, no
    ``__post_init__``) without its generated ``__init__`` and field checks: each slot set once through its
    descriptor (the memory screens join ~2,000 such terms per MoE request; ``replace`` is twice as slow)."""
    cls = type(terms)
    setters = _SETTERS.get(cls)
    if setters is None:
        setters = _SETTERS[cls] = tuple((f.name, getattr(cls, f.name).__set__) for f in fields(terms))
    out = object.__new__(cls)
    for name, put in setters:
        put(out, changes[name] if name in changes else getattr(terms, name))
    return out
