"""Cost model 41: a trainer's metrics over the logits after every micro-batch's backward (``Stack.train_metrics``,
``workload.ops.metric_bytes``; docs/planner.md, "Composer's train metrics"): Composer runs each of llm-foundry's two
``CrossEntropyLoss(reduction='sum')`` train metrics over the whole [tokens, vocab] logits under autocast, so each
casts the 16-bit logits to fp32 (read 2, write 4 bytes per logit) and runs ``log_softmax`` in fp32 (read 4, write 4).
Bytes are counted by hand from the shapes; seconds from the datasheet bandwidth and the HBM curve's ≥ 100 MB
efficiency (0.90), written out here, not read from the code."""

from __future__ import annotations

import pytest

from planner.answer.request import context
from planner.compose.terms import kind_terms
from planner.specs import PlanRequest
from planner.workload.ops import metric_bytes

#: (model, mbs, seq, precision, metrics) -> the bytes of each kernel, by hand (Llama 3 8B: vocab 128,256)
CASES = [
    # two metrics, bf16 logits: cast (2 + 4) and fp32 log_softmax (4 + 4) each
    ("llama3-8b", 1, 2048, "bf16", 2, (2048 * 128_256 * 6, 2048 * 128_256 * 8) * 2),
    # one metric at micro-batch 4
    ("llama3-8b", 4, 2048, "bf16", 1, (4 * 2048 * 128_256 * 6, 4 * 2048 * 128_256 * 8)),
    # fp32 training: no cast, log_softmax only
    ("llama3-8b", 1, 2048, "fp32", 2, (2048 * 128_256 * 8,) * 2),
    # no metrics (every preset): nothing
    ("llama3-8b", 1, 2048, "bf16", 0, ()),
]


def _ctx(model: str, mbs: int, seq: int, precision: str, metrics: int):
    return context(
        PlanRequest.model_validate(
            {
                "model": model,
                "cluster": {"gpu": "a100-sxm4-80gb", "num_nodes": 1, "gpus_per_node": 8},
                "training": {
                    "global_batch_size": 8 * mbs,
                    "seq_len": seq,
                    "precision": precision,
                    "stack": {"base": "meshplan", "train_metrics": metrics},
                },
                "parallel": {"tp": 1, "pp": 1, "micro_batch_size": mbs, "zero_stage": 3, "recompute": "full"},
            }
        )
    )


@pytest.mark.parametrize(("model", "mbs", "seq", "precision", "metrics", "expected"), CASES)
def test_metric_bytes_by_hand(model, mbs, seq, precision, metrics, expected) -> None:
    assert metric_bytes(_ctx(model, mbs, seq, precision, metrics), mbs, 1) == pytest.approx(expected)


def test_the_lm_head_backward_pays_them() -> None:
    """Two metrics against none: only the LM head's backward grows, by each kernel's bytes at the A100 80 GB's
    datasheet HBM × 0.90 (every kernel here is over 100 MB)."""
    key = (1, 1, False, "full", 3, 8, False, 1, 1, False)
    with_m = kind_terms(_ctx("llama3-8b", 1, 2048, "bf16", 2), key, "transformer_block")
    without = kind_terms(_ctx("llama3-8b", 1, 2048, "bf16", 0), key, "transformer_block")
    bw = 2039e9 * 0.90
    by_hand = 2 * (2048 * 128_256 * 6 + 2048 * 128_256 * 8) / bw  # 3.59 GB: 1.96 ms
    assert with_m.bwd.head - without.bwd.head == pytest.approx(by_hand * 1e9, abs=4)
    assert (with_m.fwd, with_m.bwd.layer, with_m.bwd.emb) == (without.fwd, without.bwd.layer, without.bwd.emb)
