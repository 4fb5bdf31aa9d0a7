"""The planner's analytic layer costs agree with the profiler's meta-device measurement of the model
zoo: FLOPs within 1 %, activation bytes within 5 % (every recompute mode), parameters and output bytes
exactly; for GPT and Llama layers at several TP degrees, micro-batch sizes, sequence lengths,
precisions, with and without sequence parallelism."""

from functools import cache

import pytest

from planner.specs.catalog import MODELS
from planner.workload.analytic import layer_profile
from profiler.model_profile import profile_model

# (model, seq_len, micro-batch sizes, TP degrees, dtype)
CASES = [
    ("tiny-gpt", 128, (1, 2), (1, 2, 4), "fp32"),
    ("tiny-llama", 64, (1, 3), (1, 2, 4), "bf16"),
    ("gpt3-1.3b", 512, (1, 2), (1, 2, 4), "bf16"),  # vocab 50257: embedding and head stay whole
    ("llama3-8b", 1024, (1, 2), (1, 2, 4), "bf16"),  # GQA 32/8, vocab-parallel head
    ("llama2-13b", 256, (2,), (1, 4), "fp16"),
    ("qwen2.5-7b", 256, (1,), (1, 2, 4), "bf16"),  # QKV bias (Qwen2.5), GQA 28/4
]


@cache
def measured(model: str, seq_len: int, mbs: tuple, tps: tuple, dtype: str):
    return profile_model(
        MODELS[model],
        device="meta",
        micro_batch_sizes=mbs,
        tps=tps,
        seq_len=seq_len,
        sequence_parallel=True,
        dtype=dtype,
    )


def _rel(measured_value: float, analytic_value: float) -> float:
    if analytic_value == 0:
        return 0.0 if measured_value == 0 else float("inf")
    return abs(measured_value - analytic_value) / analytic_value


@pytest.mark.parametrize("model, seq_len, mbs, tps, dtype", CASES, ids=[c[0] for c in CASES])
def test_analytic_agrees_with_meta_measurement(model, seq_len, mbs, tps, dtype):
    prof = measured(model, seq_len, mbs, tps, dtype)
    assert prof.source == "meta" and prof.dtype == dtype
    kinds = {(p.kind, p.tp, p.sequence_parallel) for p in prof.layers}
    expected_records = len(mbs) * 3 * sum(2 if t > 1 else 1 for t in tps)
    assert len(prof.layers) == expected_records and len(kinds) == expected_records // len(mbs)
    failures = []
    for m in prof.layers:
        a = layer_profile(
            MODELS[model],
            m.kind,
            micro_batch_size=m.micro_batch_size,
            seq_len=m.seq_len,
            tp=m.tp,
            sequence_parallel=m.sequence_parallel,
            precision=dtype,
        )
        checks = {
            "fwd_flops": (_rel(m.fwd_flops, a.fwd_flops), 0.01),
            "bwd_flops": (_rel(m.bwd_flops, a.bwd_flops), 0.01),
            "param_count": (_rel(m.param_count, a.param_count), 0.0),
            "param_bytes": (_rel(m.param_bytes, a.param_bytes), 0.0),
            "output_activation_bytes": (_rel(m.output_activation_bytes, a.output_activation_bytes), 0.0),
        }
        for mode in ("none", "selective", "full"):
            checks[f"saved.{mode}"] = (
                _rel(m.saved_activation_bytes.for_mode(mode), a.saved_activation_bytes.for_mode(mode)),
                0.05,
            )
        for name, (err, tol) in checks.items():
            if err > tol:
                failures.append(
                    f"{m.kind} tp={m.tp} sp={m.sequence_parallel} mbs={m.micro_batch_size} {name}: {err:.2%}"
                )
    assert not failures, "\n".join(failures)


def test_measured_values_are_not_trivial():
    """Guard against an agreement that holds because both sides are zero or constant."""
    prof = measured(*CASES[3])
    block = {(p.tp, p.sequence_parallel, p.micro_batch_size): p for p in prof.layers if p.kind == "transformer_block"}
    one, four = block[(1, False, 1)], block[(4, False, 1)]
    assert one.fwd_flops > 1e11 and one.bwd_flops > 2 * one.fwd_flops
    assert four.fwd_flops == pytest.approx(one.fwd_flops / 4)
    assert block[(1, False, 2)].saved_activation_bytes.none == 2 * one.saved_activation_bytes.none - 8 * 1024 * 128
    # Sequence parallelism shrinks the norm inputs; full recompute keeps only the (sharded) block input.
    sp = block[(4, True, 1)]
    assert sp.saved_activation_bytes.none < four.saved_activation_bytes.none
    assert sp.saved_activation_bytes.full == four.saved_activation_bytes.full // 4 == 1024 * 4096 * 2 // 4
    assert one.saved_activation_bytes.selective < one.saved_activation_bytes.none


# Total parameters against the published counts: Qwen2.5-7B's safetensors index total_size 15,231,233,024
# bytes in bf16 = 7,615,616,512 (its QKV biases included; without them 28·(3584 + 2·512) = 129,024
# fewer), Llama 3 / 3.1 8B 8,030,261,248; Qwen2.5-72B's model card says 72.7B.
@pytest.mark.parametrize(
    "model, published, rel",
    [
        ("qwen2.5-7b", 7_615_616_512, 0),
        ("llama3.1-8b", 8_030_261_248, 0),
        ("llama3-8b", 8_030_261_248, 0),
        ("qwen2.5-72b", 72.7e9, 1e-3),
    ],
)
def test_catalog_parameter_counts_match_the_published_ones(model, published, rel):
    from planner.workload.analytic import num_parameters

    assert num_parameters(MODELS[model]) == pytest.approx(published, rel=rel, abs=0)
    if MODELS[model].qkv_bias:
        plain = MODELS[model].model_copy(update={"qkv_bias": False})
        m = MODELS[model]
        assert num_parameters(m) - num_parameters(plain) == m.num_layers * (
            m.hidden_size + 2 * m.num_kv_heads * m.head_dim
        )


def test_qkv_bias_model_is_built_with_biases_on_q_k_v_only():
    from runtime.models.transformer import build_layer

    block = build_layer(
        MODELS["tiny-llama"].model_copy(update={"qkv_bias": True}), "transformer_block", tp=2, device="meta"
    )
    biased = sorted(n for n, p in block.named_parameters() if n.endswith("bias"))
    assert [n.split(".")[-2] for n in biased] == ["wk", "wq", "wv"]
    assert block.attn.wk.bias.shape[0] == 4 // 2 * 8  # kv heads / tp × head size
