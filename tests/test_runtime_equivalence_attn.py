"""The attention parts of Qwen3, OLMoE and gpt-oss that the model zoo builds (issue 23) reproduce a single-process
reference under TP, PP and FSDP2, as tests/test_runtime_equivalence.py checks the dense plans: real torchrun, gloo,
multi-process; the loss and every gradient after one step, then three steps of loss and gradient norm (AdamW with
clipping), within 1e-5 in fp32.

- ``tiny-qwen3``: QK-norm per head (``qk_norm="head"``: one RMSNorm of head_dim over each query and key head, its
  weight shared by the heads — under TP a replicated DTensor whose gradient is summed over the TP ranks), a head
  dimension that is not hidden / heads (query width 128 on hidden 64), GQA.
- ``tiny-olmoe-attn``: QK-norm over the whole projection (``qk_norm="projection"``: under TP each rank holds its
  heads' slice of the weight and the sum of squares is all-reduced over TP).
- ``tiny-gpt-oss-attn``: gpt-oss's attention — biases on Q, K, V and the output projection (``attention_out_bias``:
  RowwiseParallel adds it once, after the reduction), a learned sink logit per head (``attention_sinks``, sharded by
  head under TP), GQA with head_dim 16 on hidden 64.

The models' formulas against Hugging Face's are checked in one process by tests/test_runtime_attention_parts.py."""

from __future__ import annotations

import pytest

from tests.test_runtime_equivalence import TOL, launcher

_BASE = dict(
    family="llama",
    num_layers=4,
    hidden_size=64,
    ffn_hidden_size=128,
    vocab_size=256,
    activation="swiglu",
    norm="rmsnorm",
    max_seq_len=128,
)
MODELS = {
    "tiny-qwen3": dict(num_attention_heads=4, num_kv_heads=2, attention_head_dim=32, qk_norm="head"),
    "tiny-olmoe-attn": dict(num_attention_heads=4, num_kv_heads=4, qk_norm="projection"),
    "tiny-gpt-oss-attn": dict(
        num_attention_heads=8,
        num_kv_heads=2,
        attention_head_dim=16,
        qkv_bias=True,
        attention_out_bias=True,
        attention_sinks=True,
    ),
    # gpt-oss's alternation at a toy scale: an 8-token window on layers 0 and 2 of sequences of 32 (with its sinks)
    "tiny-gpt-oss-swa": dict(
        num_attention_heads=8,
        num_kv_heads=2,
        attention_head_dim=16,
        qkv_bias=True,
        attention_out_bias=True,
        attention_sinks=True,
        sliding_window=8,
        window_layer_freq=2,
    ),
    # the same without sinks (which CP refuses): the window in every CP exchange's position mask
    "tiny-swa-cp": dict(
        num_attention_heads=8,
        num_kv_heads=2,
        attention_head_dim=16,
        qkv_bias=True,
        attention_out_bias=True,
        sliding_window=8,
        window_layer_freq=2,
    ),
}

# (id, world, model, parallel settings); global batch 8 × 32 tokens, micro-batch 1 unless given.
CASES = [
    ("qwen3-tp2-sp", 2, "tiny-qwen3", dict(tp=2, sequence_parallel=True)),
    ("olmoe-tp2", 2, "tiny-olmoe-attn", dict(tp=2)),
    ("gpt-oss-tp2-sp", 2, "tiny-gpt-oss-attn", dict(tp=2, sequence_parallel=True)),
    ("gpt-oss-swa-tp2-sp", 2, "tiny-gpt-oss-swa", dict(tp=2, sequence_parallel=True)),
    ("gpt-oss-swa-pp2-1f1b", 2, "tiny-gpt-oss-swa", dict(pp=2, schedule="1f1b")),  # each stage: a windowed + a full
    ("swa-cp2-p2p", 2, "tiny-swa-cp", dict(cp=2, cp_comm="p2p", micro_batch_size=4)),
    ("swa-cp2-all-gather", 2, "tiny-swa-cp", dict(cp=2, cp_comm="all_gather", micro_batch_size=4)),
    ("swa-cp2-a2a", 2, "tiny-swa-cp", dict(cp=2, cp_comm="a2a", micro_batch_size=4)),
    ("qwen3-tp2-pp2-1f1b", 4, "tiny-qwen3", dict(tp=2, pp=2, schedule="1f1b", sequence_parallel=True)),
    ("qwen3-tp2-dp2-zero3", 4, "tiny-qwen3", dict(tp=2, dp=2, zero_stage=3, micro_batch_size=2)),
    (
        "qwen3-moe-ep2-tp2-sp",
        4,
        "tiny-qwen3-moe",
        dict(dp=2, ep=2, tp=2, sequence_parallel=True, micro_batch_size=2),
    ),
    ("olmoe-tp2-dp2-zero3-sp", 4, "tiny-olmoe-attn", dict(tp=2, dp=2, zero_stage=3, sequence_parallel=True)),
    (
        "gpt-oss-tp2-dp2-zero1-selective",
        4,
        "tiny-gpt-oss-attn",
        dict(tp=2, dp=2, zero_stage=1, recompute="selective", micro_batch_size=2),
    ),
]


def model_spec(name: str):
    from planner.specs import ModelSpec
    from planner.specs.catalog import MODELS as CATALOG

    if name == "tiny-qwen3-moe":  # Qwen3-MoE's attention on the catalog's tiny MoE (4 layers, top-2 of 8 experts)
        update = {"name": name, "num_layers": 4, "attention_head_dim": 16, "qk_norm": "head"}
        return CATALOG["tiny-moe"].model_copy(update=update)
    return ModelSpec(name=name, **_BASE, **MODELS[name])


def _plans():
    from runtime.testing import make_plan

    return {cid: make_plan(model_spec(model), **par) for cid, _, model, par in CASES}


@pytest.fixture(scope="module")
def launches(tmp_path_factory):
    return launcher(tmp_path_factory, _plans(), CASES)


@pytest.mark.parametrize("cid, world", [pytest.param(c[0], c[1], id=c[0]) for c in CASES])
def test_attention_parts_match_single_process_reference(launches, cid, world):
    launch = launches(world)
    assert cid in launch["results"], f"case {cid} did not finish (exit {launch['returncode']}):\n{launch['log']}"
    r = launch["results"][cid]
    model = model_spec(next(m for c, _, m, _ in CASES if c == cid))
    # every parameter was compared somewhere: the block's 9 tensors + QK norms (2), 4 biases, sinks (1)
    extra = (2 if model.qk_norm else 0) + (4 if model.attention_out_bias else 0) + (1 if model.attention_sinks else 0)
    assert r["param_tensors_over_ranks"] >= 2 + model.num_layers * (9 + extra)
    assert r["losses"][0] != r["losses"][-1]  # the trajectory moves
    assert r["grad_max_diff"] <= TOL, f"gradient of {r['worst_param_on_rank0']} off by {r['grad_max_diff']:.3g}"
    assert r["loss_max_diff"] <= TOL, (r["losses"], r["ref_losses"])
    assert r["grad_norm_max_diff"] <= TOL


# each `meshplan run` also measures a layer profile and a gloo fit for its local prediction: 164 s for the pair on the
# loaded 2-core machine (load average ≈ 8), so it is a slow case (run in CI)
@pytest.mark.slow
def test_resume_sharded_attention_parts_into_another_plan(tmp_path):
    """``meshplan run`` at TP2 saves a DCP checkpoint whose whole-projection QK-norm weights and sinks are ``Shard(0)``
    DTensors of their global shape; ``meshplan run --resume`` under PP2 (no TP: plain tensors) continues the
    single-process trajectory: the 4 losses equal the reference's. One tiny model carries every variant that TP
    shards (OLMoE's projection norm, gpt-oss's sinks and attention biases)."""
    import numpy as np

    from planner.specs import RunReport
    from runtime.job import TrainConfig
    from runtime.testing import make_plan, reference_run
    from tests.test_runtime_cli import _write, meshplan

    spec = model_spec("tiny-olmoe-attn").model_copy(
        update={"name": "tiny-sharded-attn", "qkv_bias": True, "attention_out_bias": True, "attention_sinks": True}
    )
    plan_a, plan_b = make_plan(spec, tp=2, sequence_parallel=True), make_plan(spec, pp=2, schedule="1f1b")
    ckpt = tmp_path / "ckpt"
    for name, plan, extra in (("a", plan_a, ["--checkpoint-dir", str(ckpt)]), ("b", plan_b, ["--resume", str(ckpt)])):
        run = meshplan(
            ["run", "--plan", str(_write(tmp_path, f"{name}.json", plan)), "--steps", "2", "--nproc-per-node", "2"]
            + [*extra, "--report", str(tmp_path / f"{name}.report")],
            tmp_path,
        )
        assert run.returncode == 0, run.stderr[-3000:]
    ra = RunReport.model_validate_json((tmp_path / "a.report").read_text())
    rb = RunReport.model_validate_json((tmp_path / "b.report").read_text())
    assert rb.resumed_from_step == 2
    ref, _, _ = reference_run(plan_a, TrainConfig(), 4)
    np.testing.assert_allclose(ra.losses + rb.losses, ref, rtol=0, atol=TOL)
