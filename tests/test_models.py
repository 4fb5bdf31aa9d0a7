"""The model zoo: shapes, module names (the TP-plan/checkpoint contract), seeded init, stage pruning."""

from __future__ import annotations

import fnmatch

import pytest
import torch
import torch.nn.functional as F

from planner.specs import ParallelConfig
from planner.specs.catalog import MODELS
from planner.specs.errors import MeshplanError
from planner.specs.layout import tp_plan
from runtime.models import build_layer, build_model

TINY = ["tiny-gpt", "tiny-llama"]


@pytest.mark.parametrize("name", TINY)
def test_forward_shapes_and_causality(name):
    spec = MODELS[name]
    model = build_model(spec, seed=0)
    ids = torch.randint(0, spec.vocab_size, (2, 16), generator=torch.Generator().manual_seed(1))
    logits = model(ids)
    assert logits.shape == (2, 16, spec.vocab_size)
    # Causal: changing a later token leaves earlier logits unchanged.
    ids2 = ids.clone()
    ids2[:, 10] = (ids2[:, 10] + 1) % spec.vocab_size
    logits2 = model(ids2)
    assert torch.equal(logits[:, :10], logits2[:, :10])
    assert not torch.allclose(logits[:, 10:], logits2[:, 10:])


@pytest.mark.parametrize("name", TINY)
def test_seeded_init_is_deterministic_and_seed_dependent(name):
    spec = MODELS[name]
    a, b, c = build_model(spec, seed=3), build_model(spec, seed=3), build_model(spec, seed=4)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not torch.equal(sa["layers.0.attn.wq.weight"], sc["layers.0.attn.wq.weight"])


@pytest.mark.parametrize("name", TINY)
def test_meta_then_materialise_matches_seeded_build(name):
    """A stage built on meta, pruned, materialised and initialised equals the full model's slice."""
    from runtime.models import init_weights

    spec = MODELS[name]
    full = build_model(spec, seed=7).state_dict()
    stage = build_model(spec, device="meta")
    for i in range(4):
        del stage.layers[str(i)]
    stage.embed = None
    stage.to_empty(device="cpu")
    init_weights(stage, spec, seed=7)
    for k, v in stage.state_dict().items():
        assert torch.equal(v, full[k]), k


@pytest.mark.parametrize(
    "name, expected",
    [
        (
            "tiny-gpt",
            {"embed.tok.weight", "embed.pos.weight", "layers.0.attn.wq.bias", "layers.0.mlp.w2.bias", "head.weight"},
        ),
        (
            "tiny-llama",
            {"embed.tok.weight", "layers.7.attn.wk.weight", "layers.3.mlp.w3.weight", "norm.weight", "head.weight"},
        ),
    ],
)
def test_module_names_contract(name, expected):
    names = set(build_model(MODELS[name]).state_dict())
    assert expected <= names
    if name == "tiny-llama":
        assert not any(n.endswith(".bias") for n in names)
        assert "embed.pos.weight" not in names


@pytest.mark.parametrize("name", TINY)
@pytest.mark.parametrize("sp", [False, True])
def test_every_tp_rule_matches_a_module(name, sp):
    spec = MODELS[name]
    model = build_model(spec)
    modules = [n for n, _ in model.named_modules() if n]
    par = ParallelConfig(tp=2, pp=1, dp=1, micro_batch_size=1, sequence_parallel=sp, stage_layers=[8])
    for rule in tp_plan(spec, par):
        assert any(fnmatch.fnmatchcase(m, rule.pattern) for m in modules), rule.pattern


@pytest.mark.parametrize("name", TINY)
def test_pruned_stages_compose_to_the_full_model(name):
    spec = MODELS[name]
    full = build_model(spec, seed=0)
    ids = torch.randint(0, spec.vocab_size, (2, 8), generator=torch.Generator().manual_seed(0))
    first, last = build_model(spec, seed=0), build_model(spec, seed=0)
    for i in range(3, 8):
        del first.layers[str(i)]
    first.norm = first.head = None
    for i in range(3):
        del last.layers[str(i)]
    last.embed = None
    torch.testing.assert_close(last(first(ids)), full(ids), rtol=0, atol=0)


@pytest.mark.parametrize("name", TINY)
@pytest.mark.parametrize("tp", [1, 2, 4])
def test_build_layer_widths(name, tp):
    spec = MODELS[name]
    block = build_layer(spec, "transformer_block", tp=tp, seed=0)
    assert block.attn.wq.out_features == spec.hidden_size // tp
    assert block.attn.wk.out_features == spec.num_kv_heads * spec.head_dim // tp
    assert block.mlp.w1.out_features == spec.ffn_hidden_size // tp
    x = torch.randn(2, 8, spec.hidden_size)
    assert block(x).shape == x.shape
    head = build_layer(spec, "lm_head", tp=tp)
    assert head(x).shape == (2, 8, spec.vocab_size // tp)
    emb = build_layer(spec, "embedding", tp=tp)
    assert emb(torch.zeros(2, 8, dtype=torch.long)).shape == (2, 8, spec.hidden_size)


def test_build_layer_tp_sharded_block_is_a_slice_of_the_full_one():
    """Column/row slices of the full block's weights, run at tp=2 and summed, give the full output."""
    spec = MODELS["tiny-llama"]
    full = build_layer(spec, "transformer_block", tp=1, seed=0)
    x = torch.randn(2, 8, spec.hidden_size, generator=torch.Generator().manual_seed(0))
    mlp_out = torch.zeros_like(x)
    for r in range(2):
        part = build_layer(spec, "transformer_block", tp=2)
        sd = {}
        for k, v in full.mlp.state_dict().items():
            sd[k] = v.chunk(2, dim=1 if k.startswith("w2") else 0)[r]
        part.mlp.load_state_dict(sd)
        mlp_out += part.mlp(x)
    torch.testing.assert_close(mlp_out, full.mlp(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "kind, tp, field",
    [("conv", 1, "kind"), ("transformer_block", 3, "model.num_attention_heads"), ("transformer_block", 0, "tp")],
)
def test_build_layer_rejects_bad_input(kind, tp, field):
    with pytest.raises(MeshplanError) as exc:
        build_layer(MODELS["tiny-llama"], kind, tp=tp)
    assert exc.value.field == field


def test_tied_embeddings_share_one_parameter():
    spec = MODELS["tiny-gpt"].model_copy(update={"tie_embeddings": True})
    model = build_model(spec, seed=0)
    assert model.head.weight is model.embed.tok.weight
    loss = F.cross_entropy(model(torch.zeros(1, 4, dtype=torch.long)).flatten(0, 1), torch.zeros(4, dtype=torch.long))
    loss.backward()
    assert model.embed.tok.weight.grad is not None


def test_gqa_matches_explicit_repeat():
    """GQA (8 query heads on 4 kv heads) equals MHA whose k/v projections repeat each kv head."""
    spec = MODELS["tiny-llama"]
    gqa = build_layer(spec, "transformer_block", seed=1)
    mha_spec = spec.model_copy(update={"num_kv_heads": spec.num_attention_heads})
    mha = build_layer(mha_spec, "transformer_block")
    sd = gqa.state_dict()
    hd = spec.head_dim
    for k in ("attn.wk.weight", "attn.wv.weight"):
        sd[k] = sd[k].view(spec.num_kv_heads, hd, -1).repeat_interleave(2, dim=0).reshape(-1, spec.hidden_size)
    mha.load_state_dict(sd)
    x = torch.randn(2, 8, spec.hidden_size, generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(gqa(x), mha(x), rtol=1e-5, atol=1e-6)
