"""The vocabulary a stack builds over TP ranks (cost model 54).

Megatron-LM pads the tokenizer's vocabulary to a multiple of ``--make-vocab-size-divisible-by`` (default 128) × TP
before it builds the vocabulary-parallel embedding and LM head, so each TP rank holds V_pad / t rows whatever V is:
``_vocab_size_with_padding`` (core_v0.16.1 ``megatron/training/tokenizer/tokenizer.py:117-130``, the default at
``megatron/training/arguments.py:1678``; the same function at v2.0 ``megatron/tokenizer/tokenizer.py:53``, v2.5
``:55`` and 52e636888c ``:47``, each with the default 128). NeMo pads the same way (r2.0.0rc1, 579983fb
``nemo/collections/nlp/models/language_modeling/megatron_base_model.py:582-598``; Megatron-Bridge passes
``make_vocab_size_divisible_by`` to the same Megatron-core model). So on the Megatron-family presets the embedding,
the LM head, their FLOPs, weights, optimizer states, gradients, the logits and the tied embedding's gradient
all-reduce are those of V_pad / t rows; the dummy rows cost like real ones.

The other presets keep their own vocabulary: the bundled runtime builds exactly ``planner.specs.layout.tp_plan``,
which leaves the embedding and the head replicated when t does not divide V (``meshplan``); the torchtitan and
DeepSpeed presets are priced as before (vocabulary-parallel when t divides V, else replicated), unchanged here.

The padding travels with the request's model (``with_padding``: a private attribute of the ``ModelSpec`` copy the
``Context`` holds, ``planner.answer.request.context``) so that every reader of ``local_vocab`` sees it;
``ModelSpec.vocab_size`` stays the tokenizer's (the source's own FLOP accounting reads it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from planner.specs.model import ModelSpec
    from planner.specs.stacks import Stack

#: ``make_vocab_size_divisible_by`` by preset (its id before any override's ``+{…}``); presets not listed pad nothing.
VOCAB_PADDING: dict[str, int] = {
    "megatron": 128,
    "megatron-2020": 128,
    "megatron-2021": 128,
    "megatron-2022": 128,
    "nemo-2407": 128,
}


def padding_multiple(stack: Stack) -> int:
    """The stack's ``make_vocab_size_divisible_by``, 0 where it builds the vocabulary as it is."""
    return VOCAB_PADDING.get(stack.id.partition("+")[0], 0)


def with_padding(model: ModelSpec, stack: Stack) -> ModelSpec:
    """``model`` as ``stack`` builds its vocabulary: a copy carrying the padding multiple, or ``model`` itself."""
    multiple = padding_multiple(stack)
    if multiple == model._vocab_multiple:
        return model
    out = model.model_copy()
    out._vocab_multiple = multiple
    return out


def padded_vocab(model: ModelSpec, tp: int) -> int:
    """The vocabulary the stack builds at TP ``tp``: V rounded up to a multiple of ``multiple`` × tp (Megatron-LM
    ``_vocab_size_with_padding``), V itself where the stack pads nothing."""
    m = model._vocab_multiple * tp
    return -(-model.vocab_size // m) * m if m else model.vocab_size


def vocab_parallel(model: ModelSpec, tp: int) -> bool:
    """Whether the embedding and the LM head are vocabulary-parallel at ``tp``: always (tp > 1) on a padding stack;
    elsewhere when tp divides V (else replicated, as ``planner.specs.layout.tp_plan``)."""
    return tp > 1 and padded_vocab(model, tp) % tp == 0


def local_vocab(model: ModelSpec, tp: int) -> int:
    """Rows of the embedding and the LM head on one TP rank."""
    v = padded_vocab(model, tp)
    return v // tp if vocab_parallel(model, tp) else v
