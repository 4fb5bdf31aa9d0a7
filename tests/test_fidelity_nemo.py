"""The NeMo 24.07 DGX-H100 FP8 rows (``nemo-2407``, ``nemo-2412``) as ``bench/fidelity_nemo.py`` expresses them.

Independent checks, from the table itself and from hand formulas:
* parameters: each filled architecture's count, by hand (attention 2·h² + 2·h·(h·g/a), MLP 3·h·f gated or 2·h·f,
  embeddings V·h, twice if untied), is the table's model size within 5 % (Nemotron-8B: 8.54 B, 7 %);
* FLOPs: the table's Model TFLOP/s ÷ Tokens/s is Megatron's model FLOPs per token of the filled shape, written
  out here as 3 × forward (per layer 2 × weights + 4·s·h for QKᵀ and AV; logits 2·V·h), within 0.3 % — the table's
  own arithmetic pins layers, hidden, FFN, heads/groups and vocabulary;
* settings: what the request pins, against NVIDIA/NeMo-Framework-Launcher 24.07 launcher_scripts/conf/training
  read by hand (sequence_parallel, activations_checkpoint_granularity, ub_tp_comm_overlap, dropout;
  distributed_fused_adam with overlap_grad_sync everywhere);
* every value filled is in ``assumed`` with a file (and line where the source has lines).
"""

from __future__ import annotations

import re

import pytest
from bench_support import bench_module

bench = bench_module("bench_fidelity")
nemo = bench_module("fidelity_nemo")
DATA = bench.load_all()
ROWS = [r for r in DATA["runs"] if r["source_group"] in ("nemo-2407", "nemo-2412")]
BY_ID = {r["id"]: r for r in ROWS}

#: The table's model name → its nominal size (billions of parameters).
SIZE_B = {
    "GPT3-5B": 5,
    "GPT3-20B": 20,
    "GPT3-175B": 175,
    "LLAMA2-7B": 7,
    "LLAMA2-13B": 13,
    "LLAMA2-70B": 70,
    "Nemotron-8B": 8,
    "Nemotron-22B": 22,
    "Nemotron-340B": 340,
    "LLAMA3-8B": 8,
    "LLAMA3-70B": 70,
}

#: Launcher 24.07 configs read by hand: (sequence_parallel, recompute, ub_tp_comm_overlap).
SETTINGS = {
    "GPT3-5B": (False, "none", False),  # gpt3/5b.yaml:106, :93, :149
    "GPT3-20B": (True, "none", True),  # gpt3/20b.yaml:106, :93, :149
    "GPT3-175B": (True, "none", False),  # gpt3/175b.yaml:106, :99, :149
    "LLAMA2-7B": (False, "none", False),  # llama/llama2_7b.yaml:126, :121, :138
    "LLAMA2-13B": (False, "none", False),  # llama/llama2_13b.yaml:126, :121, :136
    "LLAMA2-70B": (True, "none", True),  # llama/llama2_70b.yaml:126, :121, :136
    "Nemotron-8B": (True, "none", True),  # nemotron/nemotron_8b.yaml:130, :125, :158
    "Nemotron-22B": (True, "none", True),  # nemotron/nemotron_22b.yaml:130, :125, :158
    "Nemotron-340B": (True, "selective", False),  # nemotron/nemotron_340b.yaml:127, :122, :156
    "LLAMA3-8B": (False, "none", False),  # llama/llama3_8b.yaml:125, :120, :136
    "LLAMA3-70B": (True, "none", True),  # llama/llama3_70b.yaml:125, :120, :136
}


def _filled(row):
    return bench.moe_row(row)


def _params(m) -> float:
    h, f, a, g, v = m["hidden"], m["ffn"], m["heads"], m["kv_heads"], m["vocab"]
    gated = m["family"] == "llama"
    tied = m.get("tie_embeddings", not gated)
    per_layer = 2 * h * h + 2 * h * (h * g // a) + (3 if gated else 2) * h * f
    return m["layers"] * per_layer + v * h * (1 if tied else 2)


def _flops_per_token(m, s: int) -> float:
    h, f, a, g, v = m["hidden"], m["ffn"], m["heads"], m["kv_heads"], m["vocab"]
    gated = m["family"] == "llama"
    weights = 2 * h * h + 2 * h * (h * g // a) + (3 if gated else 2) * h * f
    return 3 * (m["layers"] * (2 * weights + 4 * s * h) + 2 * v * h)


def test_all_24_rows_present_and_expressed():
    assert len(ROWS) == 24
    for row in ROWS:
        assert bench.reasons_not_expressible(row) == [], row["id"]


@pytest.mark.parametrize("run_id", sorted(BY_ID))
def test_parameter_count_is_the_table_size(run_id):
    row = _filled(BY_ID[run_id])
    n = _params(row["model"]) / 1e9
    # within 8 %: Nemotron-3 8B is 8.54 B with its 256k untied embeddings (2.1 B); every other row is within 5 %
    assert abs(n / SIZE_B[row["model_name"]] - 1) < (0.08 if row["model_name"] == "Nemotron-8B" else 0.05), (run_id, n)


@pytest.mark.parametrize("run_id", sorted(BY_ID))
def test_table_tflops_over_tokens_is_megatron_flops_of_the_shape(run_id):
    row = _filled(BY_ID[run_id])
    m = row["measured"]
    per_token = m["tflops_per_gpu"] * 1e12 / m["tokens_per_s_per_gpu"]
    assert abs(per_token / _flops_per_token(row["model"], row["seq_len"]) - 1) < 0.003, run_id


@pytest.mark.parametrize("run_id", sorted(BY_ID))
def test_request_pins_the_launcher_settings(run_id):
    row = BY_ID[run_id]
    sp, recompute, ub = SETTINGS[row["model_name"]]
    req = bench.request(row, DATA["gpus"])
    par = req.parallel
    tp = row["parallel"]["tp"]
    assert par.sequence_parallel is (sp and tp > 1)
    assert par.recompute == recompute
    assert par.tp_comm_overlap is (ub and sp and tp > 1)
    assert par.zero_stage == 1  # distributed_fused_adam
    assert req.training.fp8_recipe == "delayed"
    assert req.training.stack.overlap_grad_reduce is True  # overlap_grad_sync: true
    # hidden_dropout / attention_dropout: 0.1 in the GPT3 configs (gpt3/*.yaml:74-75), 0.0 in the others
    assert req.training.stack.dropout is row["model_name"].startswith("GPT3")
    assert req.cluster.gpu == "h100-sxm5-80gb" and req.cluster.gpus_per_node == 8
    # the table's mapping, not the config's, is what runs
    assert (par.tp, par.pp, par.cp) == (tp, row["parallel"]["pp"], row["parallel"]["cp"])
    assert par.virtual_stages == (row["parallel"]["virtual_stages"] if row["parallel"]["virtual_stages"] > 1 else None)


FILE = re.compile(r"[\w./-]+\.(yaml|py|md|json)\b")
FILE_LINE = re.compile(r"[\w./-]+\.(yaml|py|md):\d+")


@pytest.mark.parametrize("run_id", sorted(BY_ID))
def test_every_filled_value_is_cited(run_id):
    row = BY_ID[run_id]
    fill = nemo.nemo_fill(row)
    added = fill["assumed"]
    assert added[0].startswith("recipe: ") and "8325688d" in added[0]  # the launcher's 24.07 tag, by commit
    assert all(FILE.search(line) for line in added), added
    for field in (
        "parallel.recompute",
        "parallel.sequence_parallel",
        "parallel.tp_comm_overlap",
        "parallel.zero_stage",
    ):
        (line,) = [x for x in added if x.startswith(field + ":")]
        assert FILE_LINE.search(line), line
        assert str(fill["parallel"][field.split(".")[1]]).lower() in line.split("(")[0].lower()
    if row["model"] is None:
        (line,) = [x for x in added if x.startswith("model: ")]
        assert FILE_LINE.search(line), line
    if row["source_group"] == "nemo-2412":  # the 24.12 page's table is NeMo 8e3d65dcfe's 24.07 DGX-H100 table
        assert any("8e3d65dcfe" in x and "DGX-H100" in x for x in added)
    filled = _filled(row)
    assert filled["assumed"][: len(row["assumed"])] == row["assumed"]  # the row's own assumptions kept


def test_nemo_fill_leaves_other_rows_alone():
    other = [r for r in DATA["runs"] if r["source_group"] not in nemo.NEMO_GROUPS]
    assert other and all(nemo.nemo_fill(r) is None and nemo.nemo_row(r) is r for r in other)
