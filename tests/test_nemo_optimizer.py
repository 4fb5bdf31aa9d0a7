"""Cost model 53: NeMo 24.07's apex DistributedFusedAdam states (``Stack.optimizer_dtype``, preset ``nemo-2407``) and
Transformer Engine's FP8 sequence-parallel all-gathers (``Stack.fp8_sp_gather``), each against a hand computation
from the configs' values (planner/specs/stack_nemo.py, bench/fidelity_nemo.py)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

import planner.api as api
from bench import bench_fidelity as bench
from bench.fidelity_nemo import nemo_row, padded_vocab
from planner.compose.memory import optimizer_step_bytes, state_bytes
from planner.specs import PlanRequest, StackOverride
from planner.workload.fp8 import fp8_tp_gather

DATA = bench.load_all(bench.DATA_FILES)
ROWS = {r["id"]: r for r in DATA["runs"]}


def apex_bytes(param: int, grad_sync: int, state: int, d: int) -> float:
    """Bytes per parameter on one GPU at an activation peak, buffer by buffer, as apex 810ffae DistributedFusedAdam
    allocates them with ``store_params=False`` (optim.dtype = the model's): the bf16 parameter, the contiguous grad
    buffer (whole, in grad_sync_dtype), and per DP shard exp_avg, exp_avg_sq (optim.dtype). The reduce-scattered
    grads_shard is not there: NeMo's training_step zero_grads it away before the first forward (cost model 54)."""
    return param + grad_sync + (state + state) / d


# (precision, optimizer, zero stage, dp, main-grad bytes, expected total by hand)
CASES = [
    # Nemotron-340B 128 GPUs: TP 8, PP 8, DP 2; optim.dtype bf16, grad_sync_dtype bf16 (nemotron_340b.yaml:161-162)
    ("bf16", "adam", 1, 2, 2, apex_bytes(2, 2, 2, 2)),  # 2 + 2 + 2 = 6
    ("fp8", "adam", 1, 2, 2, apex_bytes(2, 2, 2, 2)),  # FP8 training keeps bf16 parameters
    # grad_sync_dtype fp32 (apex's default = optim.dtype fp32; with optim.dtype bf16 set alone)
    ("bf16", "adam", 1, 32, 4, apex_bytes(2, 4, 2, 32)),
    # ZeRO-0 (no sharding): the shard is the whole buffer
    ("bf16", "adam", 0, 8, 2, apex_bytes(2, 2, 2, 1)),
]


@pytest.mark.parametrize("precision,optimizer,zero,dp,main,expected", CASES)
def test_param_dtype_states_are_apex_buffers(precision, optimizer, zero, dp, main, expected):
    got = state_bytes(precision, optimizer, zero, dp, "master", 0, main, "param")
    assert got.total == pytest.approx(expected)
    # fp32 states: 12 bytes of master weights and moments per DP shard, as before
    assert state_bytes(precision, optimizer, zero, dp, "master", 0, main, "fp32").total == pytest.approx(
        2 + main + 12 / (dp if zero else 1)
    )


# (optimizer, precision, optimizer dtype, gradient bytes, HBM bytes by hand)
STEP = [
    # read grad 2, read+write bf16 param, exp_avg, exp_avg_sq (3 × 4), the norm pass reads grad again (2)
    ("adam", "bf16", "param", 2, 2 + 12 + 2),
    ("adam", "fp8", "param", 4, 4 + 12 + 4),
    ("sgd", "bf16", "param", 2, 2 + 8 + 2),
    # fp32 states: 2 + 8 + 8 + 8 + 2 and the fp32 main-gradient norm read (4)
    ("adam", "bf16", "fp32", 2, 28 + 4),
    ("adam", "fp32", "param", 4, 28 + 4),  # no 16-bit parameters: "param" is fp32 itself
]


@pytest.mark.parametrize("optimizer,precision,dtype,ge,expected", STEP)
def test_optimizer_step_bytes(optimizer, precision, dtype, ge, expected):
    assert optimizer_step_bytes(optimizer, precision, dtype, ge) == expected


def test_only_a_preset_that_runs_it_offers_param_states():
    assert StackOverride(base="nemo-2407", optimizer_dtype="param").optimizer_dtype == "param"
    with pytest.raises(ValidationError, match="not run by the 'megatron' preset"):
        StackOverride(base="megatron", optimizer_dtype="param")
    schema = PlanRequest.model_json_schema()
    assert "optimizer_dtype" in str(schema) and "nemo-2407" in str(schema)


def _request(stack: dict, precision: str = "bf16", tp: int = 2, sp: bool = True) -> PlanRequest:
    return PlanRequest.model_validate(
        {
            "model": "llama3-8b",
            "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 2, "gpus_per_node": 8},
            "training": {"global_batch_size": 64, "seq_len": 4096, "precision": precision, "stack": stack},
            "parallel": {
                "tp": tp,
                "pp": 1,
                "dp": 16 // tp,
                "micro_batch_size": 1,
                "zero_stage": 1,
                "sequence_parallel": sp,
            },
            "options": {"memory_headroom": 0.0},
        }
    )


@pytest.mark.parametrize("reduce,ge", [("param", 2), ("fp32", 4)])
def test_estimate_optimizer_memory_in_the_ratio_of_k(reduce, ge):
    """Per stage, optimizer memory is parameters × K / d: "param" over "fp32" is 2·2 / 12 by hand, whatever the
    gradient dtype ``ge`` (the gradient shard is not at the peak: cost model 54)."""
    est = {
        dt: api.estimate(_request({"base": "nemo-2407", "optimizer_dtype": dt, "reduce_dtype": reduce}))
        for dt in ("fp32", "param")
    }
    opt = {dt: e.memory_per_stage[0].optimizer_gib for dt, e in est.items()}
    assert opt["param"] / opt["fp32"] == pytest.approx(2 * 2 / 12, rel=1e-6)
    assert est["param"].memory_per_stage[0].weights_gib == pytest.approx(est["fp32"].memory_per_stage[0].weights_gib)


# (stack, precision, tp, sp, FP8 all-gathers?)
GATHERS = [
    ({"base": "nemo-2407"}, "fp8", 2, True, True),  # TE 7d576ed2: FP8 ln_out gathered; FP8 grad_output gathered
    ({"base": "megatron"}, "fp8", 2, True, True),  # TE v2.9: gather_along_first_dim(..., quantizer=...)
    ({"base": "megatron"}, "bf16", 2, True, False),
    ({"base": "megatron"}, "fp8", 2, False, False),  # no SP: all-reduces, no gathers
    ({"base": "megatron"}, "fp8", 1, True, False),
    ({"base": "torchtitan"}, "fp8", 2, True, True),  # tensorwise (its default): Float8ColwiseParallel
]


@pytest.mark.parametrize("stack,precision,tp,sp,expected", GATHERS)
def test_fp8_sp_gathers(stack, precision, tp, sp, expected):
    req = _request(stack, precision, tp, sp)
    ctx = api.context(api.parse_request(req))
    assert fp8_tp_gather(ctx, tp, sp) is expected


def test_fp8_gathers_halve_the_tp_all_gather_time():
    """FP8 all-gathers of 1 byte: the megatron TP time drops to the reduce-scatters' (bf16) plus the gathers at half
    the bytes: less than bf16's, more than half of it."""
    bf16, fp8 = (api.estimate(_request({"base": "megatron"}, p, 4, True)).breakdown.tp_comm_s for p in ("bf16", "fp8"))
    assert 0.5 * bf16 < fp8 < bf16


# (tokenizer vocab, TP, the padded vocab by hand: ceil(V / (128·TP)) · 128·TP)
VOCABS = [
    (50257, 1, 393 * 128),
    (50257, 2, 197 * 256),
    (50257, 4, 99 * 512),
    (32000, 4, 63 * 512),
    (128256, 4, 251 * 512),
    (256000, 8, 250 * 1024),
]


@pytest.mark.parametrize("vocab,tp,expected", VOCABS)
def test_padded_vocab(vocab, tp, expected):
    assert padded_vocab(vocab, tp) == expected
    assert expected % (128 * tp) == 0 and 0 <= expected - vocab < 128 * tp


# (row, reduce_dtype, optimizer_dtype): grad_sync_dtype bf16 in the FP8 example scripts (GPT3, Llama) and in
# nemotron_340b.yaml:161 (with optim.dtype bf16 :162); Nemotron 8B/22B keep apex's fp32 default
SETTINGS = [
    ("nemo2407_GPT3-20B_64gpu", "param", None),
    ("nemo2407_LLAMA2-70B_64gpu", "param", None),
    ("nemo2407_Nemotron-8B_64gpu", "fp32", None),
    ("nemo2412_Nemotron-22B_64gpu", "fp32", None),
    ("nemo2407_Nemotron-340B_128gpu", "param", "param"),
]


@pytest.mark.parametrize("run_id,reduce,opt", SETTINGS)
def test_nemo_rows_run_their_optimizer(run_id, reduce, opt):
    stack = bench.stack_of(nemo_row(ROWS[run_id]))
    assert isinstance(stack, dict) and stack["base"] == "nemo-2407"
    assert stack["reduce_dtype"] == reduce and stack.get("optimizer_dtype") == opt


@pytest.mark.parametrize("run_id", ["nemo2407_Nemotron-340B_128gpu", "nemo2412_Nemotron-340B_128gpu"])
def test_nemotron_340b_fits_with_bf16_states(run_id):
    assert bench.evaluate(ROWS[run_id], DATA["gpus"]).fits
