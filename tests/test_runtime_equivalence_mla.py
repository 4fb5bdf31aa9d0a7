"""Multi-head latent attention (DeepSeek-V3's MLA, ``runtime.models.mla``) reproduces a single-process reference under
TP, sequence parallelism, PP, FSDP2 ZeRO-3 and, with a DeepSeek-V3-shaped mixture of experts, expert parallelism, as
tests/test_runtime_equivalence.py checks the dense plans: real torchrun, gloo, multi-process; the loss and every
gradient after one step, then three steps of loss and gradient norm (AdamW with clipping), within 1e-5 in fp32.

Under TP the down projections (``wq_a``, ``wkv_a``) and the latent norms are replicated plain tensors whose gradients
must come out equal on every TP rank — which needs the rotary key's gradient summed over TP
(``LatentAttention.tp_mesh``): without that sum a replicated weight's gradient is off by the other rank's heads and
these rows fail. ``tiny-mla`` has v narrower than q/k (the padded kernel path) and a query bottleneck;
``tiny-deepseek-v3`` adds MoE layers after a dense one (shared expert, sigmoid group-limited router).

The formula against Hugging Face's is checked in one process by tests/test_runtime_mla.py."""

from __future__ import annotations

import pytest

from tests.test_runtime_equivalence import TOL, launcher
from tests.test_runtime_mla import MLAS, tiny_deepseek_v3

_BASE = dict(
    family="llama",
    num_layers=4,
    hidden_size=64,
    ffn_hidden_size=128,
    vocab_size=256,
    activation="swiglu",
    norm="rmsnorm",
    max_seq_len=128,
    num_attention_heads=4,
    num_kv_heads=4,
)

# (id, world, model, parallel settings); global batch 8 × 32 tokens, micro-batch 1 unless given.
CASES = [
    ("mla-tp2", 2, "tiny-mla", dict(tp=2)),
    ("mla-tp2-sp", 2, "tiny-mla", dict(tp=2, sequence_parallel=True)),
    ("mla-pp2-1f1b", 2, "tiny-mla", dict(pp=2, schedule="1f1b")),
    ("mla-dp2-zero3", 2, "tiny-mla", dict(dp=2, zero_stage=3, micro_batch_size=2)),
    # the checkpointed core recomputes the padded kernel output; wo keeps its own sliced copy
    ("mla-tp2-selective", 2, "tiny-mla", dict(tp=2, recompute="selective", micro_batch_size=2)),
    ("deepseek-v3-ep2", 2, "tiny-deepseek-v3", dict(dp=2, ep=2, micro_batch_size=2)),
    ("mla-tp2-dp2-zero3-sp", 4, "tiny-mla", dict(tp=2, dp=2, zero_stage=3, sequence_parallel=True)),
    (
        "deepseek-v3-ep2-tp2-sp",
        4,
        "tiny-deepseek-v3",
        dict(dp=2, ep=2, tp=2, sequence_parallel=True, micro_batch_size=2),
    ),
]


def model_spec(name: str):
    from planner.specs import ModelSpec

    if name == "tiny-deepseek-v3":
        return tiny_deepseek_v3()
    return ModelSpec(name=name, **_BASE, mla=MLAS["v3"])


def _plans():
    from runtime.testing import make_plan

    return {cid: make_plan(model_spec(model), **par) for cid, _, model, par in CASES}


@pytest.fixture(scope="module")
def launches(tmp_path_factory):
    return launcher(tmp_path_factory, _plans(), CASES)


@pytest.mark.parametrize("cid, world", [pytest.param(c[0], c[1], id=c[0]) for c in CASES])
def test_latent_attention_matches_single_process_reference(launches, cid, world):
    launch = launches(world)
    assert cid in launch["results"], f"case {cid} did not finish (exit {launch['returncode']}):\n{launch['log']}"
    r = launch["results"][cid]
    model = model_spec(next(m for c, _, m, _ in CASES if c == cid))
    # every parameter was compared somewhere: embedding and head, and per block its 2 norms, 7 attention tensors
    # (wq_a, q_norm, wq_b, wkv_a, kv_norm, wkv_b, wo) and at least its MLP's 3
    assert r["param_tensors_over_ranks"] >= 2 + model.num_layers * (2 + 7 + 3)
    assert r["losses"][0] != r["losses"][-1]  # the trajectory moves
    assert r["grad_max_diff"] <= TOL, f"gradient of {r['worst_param_on_rank0']} off by {r['grad_max_diff']:.3g}"
    assert r["loss_max_diff"] <= TOL, (r["losses"], r["ref_losses"])
    assert r["grad_norm_max_diff"] <= TOL
