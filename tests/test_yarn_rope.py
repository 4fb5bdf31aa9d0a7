"""YaRN RoPE as Megatron-core runs it (cost model 61; ``planner.workload.rope``), against hand counts written here
from the cited code: Megatron-LM 0d8e0714 ``megatron/core/models/common/embeddings/rope_utils.py:73-126, 279-284``
(the attention factor ≠ 1 leaves TE's fused RoPE for the eager ``_apply_rotary_pos_emb_bshd``) and
``yarn_rotary_pos_embedding.py:223-242`` (the factor)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from planner.answer.request import context
from planner.specs import PlanRequest
from planner.specs.catalog import get_model
from planner.specs.hf import from_hf_config
from planner.specs.rope import yarn_attention_factor
from planner.workload.ops import memory_ops

CONFIGS = Path(__file__).parent / "data" / "hf_configs"


def test_yarn_attention_factor() -> None:
    assert yarn_attention_factor(32.0) == pytest.approx(1 + 0.1 * math.log(32), rel=1e-15)
    assert yarn_attention_factor(40.0, 1.0, 1.0) == 1.0  # DeepSeek-V3's equal pair
    assert yarn_attention_factor(40.0, 0.707, 1.0) == pytest.approx(
        (0.1 * 0.707 * math.log(40) + 1) / (0.1 * math.log(40) + 1), rel=1e-15
    )
    assert yarn_attention_factor(1.0) == 1.0 and yarn_attention_factor(0.5) == 1.0


@pytest.mark.parametrize("name", ["gpt-oss-120b", "gpt-oss-20b"])
def test_hf_config_and_catalog_agree(name: str) -> None:
    cfg = json.loads((CONFIGS / f"{name}.json").read_text())
    assert cfg["rope_scaling"]["rope_type"] == "yarn" and cfg["rope_scaling"]["factor"] == 32.0
    factor = 1 + 0.1 * math.log(32)
    assert from_hf_config(cfg, name=name).rope_attention_factor == pytest.approx(factor, rel=1e-15)
    assert get_model(name).rope_attention_factor == pytest.approx(factor, rel=1e-15)
    plain = {k: v for k, v in cfg.items() if k != "rope_scaling"}
    assert from_hf_config(plain, name=name).rope_attention_factor == 1.0
    # a dense model's dump does not carry the field at its default
    assert "rope_attention_factor" not in get_model("llama3-8b").model_dump()


def _ctx(model: object, stack: str, tp: int = 1) -> object:
    req = {
        "model": model,
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 8, "gpus_per_node": 8},
        "training": {"global_batch_size": 512, "seq_len": 4096, "stack": stack},
        "parallel": {"tp": tp, "pp": 4, "ep": 8, "micro_batch_size": 1, "zero_stage": 1, "recompute": "none"},
    }
    if tp > 1:
        req["parallel"]["sequence_parallel"] = True
    return context(PlanRequest.model_validate(req))


def _rope(ctx: object, mbs: int, tp: int) -> tuple[float, int]:
    (op,) = [op for op in memory_ops(ctx, "transformer_block", mbs, tp, tp > 1) if op.name == "rope"]
    return op.nbytes, op.kernels


@pytest.mark.parametrize(("mbs", "tp"), [(1, 1), (2, 1), (1, 2)])
def test_megatron_unfused_rope_hand_count(mbs: int, tp: int) -> None:
    """gpt-oss-120b (64 query heads, 8 KV heads of 64) in bf16 on the megatron stack: per q and k element the
    eager ops of ``_apply_rotary_pos_emb_bshd`` — t·cos (2 + 2 bytes), −x2 on the half (1 + 1), cat (2 + 2), ·sin
    (2 + 2), the sum (4 + 2), the closing cat (2 + 2) = 24 bytes — and per call the fp32 freqs [4096, 64] through
    cos/sin, ·mscale, cast (8 + 8 + 6 bytes each of cos and sin), two calls; 6 + 6 kernels a call."""
    m = get_model("gpt-oss-120b")
    ctx = _ctx(m, "megatron", tp)
    s, d = 4096, 64
    elements = mbs * s * (64 + 8) // tp * d
    per_element = (2 + 2) + (1 + 1) + (2 + 2) + (2 + 2) + (4 + 2) + (2 + 2)
    tables = 2 * 2 * (8 + 8 + 6) * s * d
    assert _rope(ctx, mbs, tp) == (per_element * elements + tables, 2 * (6 + 6))
    # the same model without YaRN's factor: TE's fused kernel, read + write once, one kernel a tensor
    plain = _ctx(m.model_copy(update={"rope_attention_factor": 1.0}), "megatron", tp)
    assert _rope(plain, mbs, tp) == (2 * 2 * elements, 2)


def test_other_stacks_keep_their_rope() -> None:
    """torchtitan applies its own RoPE (the factor only changes its precomputed table): unchanged by the factor."""
    m = get_model("gpt-oss-120b")
    with_factor = _rope(_ctx(m, "torchtitan"), 1, 1)
    without = _rope(_ctx(m.model_copy(update={"rope_attention_factor": 1.0}), "torchtitan"), 1, 1)
    assert with_factor == without


@pytest.mark.parametrize(("name", "warned"), [("gpt-oss-20b", True), ("qwen3-30b-a3b", False)])
def test_megatron_export_warns_of_yarn(name: str, warned: bool) -> None:
    """Megatron-LM's flags have no YaRN for standard attention: the export of a YaRN model runs plain RoPE and says
    so (a different function, faster than priced); a model without the factor exports without the warning."""
    import planner
    from api.exporters import ExportOptions, export

    est = planner.estimate_plan(
        {
            "model": name,
            "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "gpus_per_node": 8},
            "training": {"global_batch_size": 64, "seq_len": 4096, "stack": "megatron"},
            "parallel": {"tp": 1, "pp": 1, "dp": 8, "ep": 8, "etp": 1, "micro_batch_size": 1, "zero_stage": 1},
        }
    )
    out = export(est, "megatron", ExportOptions())
    assert "--position-embedding-type rope" in " ".join(out.content.split())
    assert any("YaRN" in w for w in out.warnings) is warned
