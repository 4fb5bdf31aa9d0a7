"""planner.workload.analytic against independent figures: published parameter counts, the papers' formulas
(Megatron-LM FLOPs, Korthikanti et al. activation memory) and tensor-parallel invariants."""

import pytest

from planner.specs import Profile
from planner.specs.catalog import MODELS
from planner.specs.errors import MeshplanError
from planner.workload.analytic import (
    LAYER_KINDS,
    analytic_profile,
    block_saved_terms,
    check_tp,
    layer_profile,
    model_flops_per_step,
    num_parameters,
    tp_degrees,
)


@pytest.mark.parametrize(
    "model, published",
    [
        # Hugging Face model cards / safetensors headers (exact counts).
        ("llama2-7b", 6_738_415_616),
        ("llama2-13b", 13_015_864_320),
        ("llama2-70b", 68_976_648_192),
        ("llama3-8b", 8_030_261_248),
        ("llama3-70b", 70_553_706_496),
        ("llama3-405b", 405_853_388_800),
        # GPT-3 paper, Table 2.1 (rounded figures): within 2 %.
        ("gpt3-125m", 125e6),
        ("gpt3-350m", 350e6),
        ("gpt3-13b", 13.0e9),
        ("gpt3-175b", 175.0e9),
    ],
)
def test_num_parameters_matches_published_counts(model, published):
    n = num_parameters(MODELS[model])
    if isinstance(published, int):
        assert n == published
    else:
        assert n == pytest.approx(published, rel=0.02)


@pytest.mark.parametrize("model", ["gpt3-175b", "llama2-70b", "llama3-405b", "tiny-gpt", "tiny-llama"])
@pytest.mark.parametrize("seq_len", [128, 2048, 8192])
def test_model_flops_is_three_forwards_of_the_layers(model, seq_len):
    """Megatron's closed form (formulas.md) equals 3 × the sum of per-layer forward FLOPs."""
    m = MODELS[model]
    b = 2
    fwd = {k: layer_profile(m, k, micro_batch_size=b, seq_len=seq_len).fwd_flops for k in LAYER_KINDS}
    per_step = 3 * (fwd["embedding"] + m.num_layers * fwd["transformer_block"] + fwd["lm_head"])
    assert model_flops_per_step(m, b * seq_len, seq_len) == pytest.approx(per_step, rel=1e-12)


def test_model_flops_matches_megatron_gpt3_175b_figure():
    # Narayanan et al. SC'21 eq. (3): 72·B·s·L·h²·(1 + s/(6h) + V/(12·L·h)) for a GPT with f = 4h.
    m = MODELS["gpt3-175b"]
    B, s, L, h, V = 1536, 2048, m.num_layers, m.hidden_size, m.vocab_size
    expected = 72 * B * s * L * h * h * (1 + s / (6 * h) + V / (12 * L * h))
    assert model_flops_per_step(m, B * s, s) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("tp, sp", [(1, False), (2, False), (4, False), (8, False), (2, True), (4, True), (8, True)])
def test_gpt_block_activation_bytes_follow_korthikanti(tp, sp):
    """Korthikanti et al. Table 2 with flash attention (no 5as/h term) and no dropout masks (−2sbh):
    TP: sbh·(8 + 24/t) bytes; TP+SP: sbh·(4/t + 4 + 24/t). The remainder is the log-sum-exp and norm
    statistics, which the paper neglects."""
    m = MODELS["gpt3-13b"]
    b, s, h = 1, 2048, m.hidden_size
    prof = layer_profile(m, "transformer_block", micro_batch_size=b, seq_len=s, tp=tp, sequence_parallel=sp)
    sbh = s * b * h
    # Korthikanti's 10 unsharded units = 4 (norm inputs) + 4 (QKV/MLP inputs) + 2 (dropout masks).
    paper = sbh * ((4 / tp if sp else 4) + 4 + 24 / tp)
    terms = block_saved_terms(m, b, s, tp, sp, "bf16")
    small = terms["attn_logsumexp"] + 2 * 2 * 2 * s * b / (tp if sp else 1)  # lse + 2 norms × 2 stats × 2 B
    assert prof.saved_activation_bytes.none == pytest.approx(paper + small, rel=1e-9)
    assert prof.saved_activation_bytes.full == pytest.approx(2 * sbh / (tp if sp else 1))
    assert prof.saved_activation_bytes.selective == pytest.approx(paper + small - terms["attn_logsumexp"], rel=1e-9)


@pytest.mark.parametrize("model", ["gpt3-13b", "llama3-70b"])
def test_tensor_parallel_divides_flops_and_sharded_params(model):
    m = MODELS[model]
    one = layer_profile(m, "transformer_block", micro_batch_size=2, seq_len=1024, tp=1)
    for tp in (2, 4, 8):
        p = layer_profile(m, "transformer_block", micro_batch_size=2, seq_len=1024, tp=tp)
        assert p.fwd_flops == pytest.approx(one.fwd_flops / tp)
        assert p.bwd_flops == pytest.approx(one.bwd_flops / tp)
        # Only norms and the row-parallel biases stay whole.
        assert one.param_count / tp <= p.param_count <= one.param_count / tp + 6 * m.hidden_size


@pytest.mark.parametrize(
    "model, tp, vocab_local",
    [("llama3-8b", 8, 128256 // 8), ("gpt3-125m", 2, 50257), ("tiny-gpt", 4, 64)],
)
def test_lm_head_is_vocabulary_parallel_only_when_tp_divides_vocab(model, tp, vocab_local):
    m = MODELS[model]
    p = layer_profile(m, "lm_head", micro_batch_size=1, seq_len=256, tp=tp)
    assert p.fwd_flops == 2 * 256 * m.hidden_size * vocab_local
    assert p.output_activation_bytes == 256 * vocab_local * 2


def test_backward_flops_ratios():
    m = MODELS["llama3-8b"]
    block = layer_profile(m, "transformer_block", micro_batch_size=1, seq_len=8192)
    # linears 2×, flash attention core 2.5×: overall between the two.
    assert 2.0 < block.bwd_flops / block.fwd_flops < 2.5
    head = layer_profile(m, "lm_head", micro_batch_size=1, seq_len=8192)
    assert head.bwd_flops == 2 * head.fwd_flops
    emb = layer_profile(m, "embedding", micro_batch_size=1, seq_len=8192)
    assert emb.fwd_flops == emb.bwd_flops == 0


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(kind="attention"), "kind"),
        (dict(tp=3), "tp"),  # 32 heads
        (dict(tp=16), "tp"),  # 8 KV heads
        (dict(precision="int8"), "precision"),
        (dict(micro_batch_size=0), "micro_batch_size"),
        (dict(sequence_parallel=True, tp=1), "sequence_parallel"),
    ],
)
def test_bad_input_names_the_field(kwargs, field):
    args = dict(kind="transformer_block", micro_batch_size=1, seq_len=128, tp=1, precision="bf16")
    args.update(kwargs)
    kind = args.pop("kind")
    with pytest.raises(MeshplanError) as exc:
        layer_profile(MODELS["llama3-8b"], kind, **args)
    assert exc.value.field == field
    assert exc.value.fix


def test_tp_degrees_and_check_tp():
    assert tp_degrees(MODELS["llama3-405b"], 16) == [1, 2, 4, 8]
    check_tp(MODELS["gpt3-175b"], 8)


def test_analytic_profile_covers_the_grid_and_round_trips():
    m = MODELS["tiny-llama"]
    prof = analytic_profile(m, micro_batch_sizes=[1, 2], seq_len=64, tps=[1, 2, 4])
    # tp 1: no SP; tp 2, 4: with and without SP → (1 + 2 + 2) × 2 mbs × 3 kinds
    assert len(prof.layers) == 30
    assert prof.source == "analytic"
    assert prof.find("transformer_block", 2, 64, 4, True) is not None
    assert Profile.model_validate_json(prof.model_dump_json()) == prof
