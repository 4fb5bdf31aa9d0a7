"""What each training stack runs (issue 27 §1): the search enumerates only that, a pin outside it is an error
naming the stack, the field and what the stack offers (``planner.plan``, ``planner.estimate``, the CLI's exit
code 2, the service's 422), and ``meshplan stacks`` / ``GET /v1/catalog/stacks`` show it. The ``meshplan``
stack is exactly what ``runtime/`` runs (``runtime.validate.validate_plan`` agrees with it)."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

import planner
from planner.search.space import DEFAULT_SCHEDULES, RECOMPUTE, enumerate_candidates
from planner.specs import ParallelPins, SearchOptions
from planner.specs.catalog import get_model
from planner.specs.errors import MeshplanError
from planner.specs.rules import stack_runs_config
from planner.specs.stack_rules import unbuilt_parts
from planner.specs.stacks import STACKS, resolve
from tests.api_support import make_app

ROOT = Path(__file__).resolve().parents[1]


def request(stack: object = "meshplan", model: object = "llama3-8b", gpus: int = 8, **pins: object) -> dict:
    return {
        "model": model,
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": max(1, gpus // 8), "gpus_per_node": min(gpus, 8)},
        "training": {"global_batch_size": 64, "seq_len": 2048, "stack": stack},
        "parallel": pins,
        "top_k": 1,
        "options": {"time_limit_s": 5, "num_workers": 1},
    }


#: (case, pins, model, the stack that does not run them, the field named, words of what it offers, a stack that does)
OUTSIDE = [
    ("megatron ZeRO-3", {"zero_stage": 3}, "llama3-8b", "megatron", "parallel.zero_stage", "ZeRO 0, 1", "meshplan"),
    ("megatron ZeRO-2", {"zero_stage": 2}, "llama3-8b", "megatron", "parallel.zero_stage", "ZeRO 0, 1", "deepspeed"),
    ("megatron GPipe", {"pp": 2, "schedule": "gpipe"}, "llama3-8b", "megatron", "parallel.schedule", "1f1b", "meshplan"),
    ("torchtitan ZeRO-1", {"zero_stage": 1}, "llama3-8b", "torchtitan", "parallel.zero_stage", "ZeRO 0, 2, 3", "megatron"),
    ("torchtitan pp2 tied", {"pp": 2}, "gpt3-1.3b", "torchtitan", "parallel.pp", "model.tie_embeddings", "megatron"),
    ("meshplan pp2 tied", {"pp": 2}, "gpt3-1.3b", "meshplan", "parallel.pp", "model.tie_embeddings", "deepspeed"),
    ("deepspeed pp2 ZeRO-2", {"pp": 2, "zero_stage": 2}, "llama3-8b", "deepspeed", "parallel.zero_stage", "ZeRO 0, 1", "torchtitan"),
    ("deepspeed SP", {"tp": 2, "sequence_parallel": True}, "llama3-8b", "deepspeed", "parallel.sequence_parallel", "sequence_parallel", "megatron"),
    ("deepspeed selective", {"recompute": "selective"}, "llama3-8b", "deepspeed", "parallel.recompute", "none, full", "megatron"),
    ("deepspeed interleaved", {"pp": 2, "schedule": "interleaved-1f1b", "virtual_stages": 2}, "llama3-8b", "deepspeed", "parallel.schedule", "1f1b", "megatron"),
    ("megatron-2021 interleaved pp2", {"pp": 2, "schedule": "interleaved-1f1b", "virtual_stages": 2}, "gpt3-1.3b", "megatron-2021", "parallel.pp", "pp ≥ 3", "megatron"),
    ("megatron-2022 ZeRO-2", {"zero_stage": 2}, "gpt3-1.3b", "megatron-2022", "parallel.zero_stage", "ZeRO 0, 1", "meshplan"),
    ("megatron-2022 interleaved pp2", {"pp": 2, "schedule": "interleaved-1f1b", "virtual_stages": 2}, "gpt3-1.3b", "megatron-2022", "parallel.pp", "pp ≥ 3", "megatron"),
    ("megatron-2022 CP", {"cp": 2}, "gpt3-1.3b", "megatron-2022", "parallel.cp", "does not run context parallelism", "megatron"),
    ("torchtitan-2404 pp2", {"pp": 2}, "llama3-8b", "torchtitan-2404", "parallel.pp", "does not run pipeline parallelism", "torchtitan-2408"),
    ("torchtitan-2404 mbs1", {"micro_batch_size": 1}, "llama3-8b", "torchtitan-2404", "parallel.micro_batch_size", "global_batch_size / dp", "torchtitan"),
    ("torchtitan-2412 pp1 ZeRO-2", {"pp": 1, "zero_stage": 2}, "llama3-8b", "torchtitan-2412", "parallel.zero_stage", "it runs ZeRO 3", "torchtitan"),
    ("torchtitan-2412 TP without SP", {"tp": 2, "sequence_parallel": False}, "llama3-8b", "torchtitan-2412", "parallel.sequence_parallel", "with sequence parallelism only", "torchtitan"),
    ("torchtitan-2404 fused norm TP", {"tp": 2, "sequence_parallel": True}, "llama3-8b", {"base": "torchtitan-2404", "norm_kernel": "fused"}, "parallel.tp", "norm_kernel to eager", {"base": "torchtitan-2408", "norm_kernel": "fused"}),
    ("inline megatron ZeRO-3", {"zero_stage": 3}, "llama3-8b", {"base": "megatron", "kernels": "eager"}, "parallel.zero_stage", "ZeRO 0, 1", {"base": "torchtitan", "kernels": "compiled"}),
]  # fmt: skip
IDS = [c[0] for c in OUTSIDE]


@pytest.mark.parametrize("entry", ["plan", "estimate"])
@pytest.mark.parametrize("case,pins,model,stack,field,offers,runner", OUTSIDE, ids=IDS)
def test_a_pin_outside_the_stack_names_the_stack_the_field_and_what_it_offers(
    entry, case, pins, model, stack, field, offers, runner
):
    """Both ``plan`` and ``estimate`` refuse it; the same pins priced for a stack that runs them are answered."""
    call = getattr(planner, entry)
    with pytest.raises(MeshplanError) as err:
        call(request(stack, model, **pins))
    e = err.value
    assert e.field == field, str(e)
    assert f"'{resolve(stack).id}'" in e.message and resolve(stack).version in e.message
    assert offers in e.message + e.fix and e.fix
    answer = call(request(runner, model, **pins))
    assert answer.plans if entry == "plan" else answer.step_time_s > 0


@pytest.mark.parametrize(
    "pins,model,stack,words,runner",
    [
        ({"tp": 2, "dp": 2}, "gpt3-1.3b", "meshplan", "model.tie_embeddings", "megatron"),
        ({"tp": 2, "dp": 2, "zero_stage": 2}, "llama3-8b", "deepspeed", "with pp > 1 it runs ZeRO 0, 1", "torchtitan"),
    ],
    ids=["meshplan tied", "deepspeed ZeRO-2"],
)
def test_pinned_tp_and_dp_that_leave_a_pipeline_the_stack_does_not_run_are_refused(pins, model, stack, words, runner):
    """pp unpinned but fixed by tp × dp: the error is on dp (pp = GPUs / (tp × dp)), not "no dp divides the batch"."""
    with pytest.raises(MeshplanError) as err:
        planner.plan(request(stack, model, **pins))
    assert err.value.field == "parallel.dp" and "pp=2" in err.value.message and words in err.value.message
    assert "tp × dp = 8 (pp = 1)" in err.value.fix
    assert planner.plan(request(runner, model, **pins)).plans[0].parallel.pp == 2


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "api.cli", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


BASE_FLAGS = ["--gpu", "h100-sxm5-80gb", "--nodes", "1", "--gpus-per-node", "8", "--global-batch-size", "64"]


@pytest.mark.parametrize(
    "args,flag,words",
    [
        (["estimate", "--model", "llama3-8b", "--stack", "megatron", "--zero-stage", "3"], "--zero-stage", "ZeRO 0, 1"),
        (["plan", "--model", "gpt3-1.3b", "--pp", "2"], "--pp", "tie_embeddings"),
        (
            ["plan", "--model", "llama3-8b", "--stack", "deepspeed", "--recompute", "selective"],
            "--recompute",
            "none, full",
        ),
    ],
    ids=["estimate megatron zero3", "plan meshplan tied pp2", "plan deepspeed selective"],
)
def test_the_cli_exits_2_naming_the_flag_the_stack_and_what_it_offers(args, flag, words):
    out = run_cli(*args, *BASE_FLAGS, "--seq-len", "2048")
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert flag in out.stderr and words in out.stderr and "training stack" in out.stderr
    assert "Traceback" not in out.stderr + out.stdout


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    with TestClient(make_app(tmp_path_factory.mktemp("stacks")), raise_server_exceptions=False) as c:
        yield c


@pytest.mark.parametrize("path", ["/v1/plans", "/v1/estimates"])
@pytest.mark.parametrize(
    "case,pins,model,stack,field,offers,runner", OUTSIDE[:3] + OUTSIDE[-1:], ids=IDS[:3] + IDS[-1:]
)
def test_the_service_answers_422_naming_the_field_and_the_stack(
    client, path, case, pins, model, stack, field, offers, runner
):
    r = client.post(path, json=request(stack, model, **pins))
    assert r.status_code == 422 and r.headers["content-type"] == "application/problem+json", r.text
    (error,) = r.json()["errors"]
    assert error["field"] == field and "training stack" in error["message"] and error["fix"]
    assert offers in error["message"] + error["fix"]
    assert client.post(path, json=request(runner, model, **pins)).status_code in (200, 201)


# ---- what is enumerated ---------------------------------------------------------------------


@pytest.mark.parametrize("stack", list(STACKS))
@pytest.mark.parametrize("model", ["llama3-8b", "gpt3-1.3b"])
def test_the_search_enumerates_exactly_what_the_stack_runs(stack, model):
    """Every class enumerated is one the stack runs, and every value the stack runs (within the search's own
    space) is enumerated somewhere: the filter is neither missing nor too strict."""
    from planner.answer.request import context, parse_request

    r = request(stack, model, gpus=16)
    r["training"]["precision"] = STACKS[stack].precisions[0]  # megatron-2020 trains in fp16
    req = parse_request(r)
    if unbuilt_parts(STACKS[stack], get_model(model)):  # a model the stack does not build is refused, not searched
        with pytest.raises(MeshplanError, match="does not build"):
            context(req)
        return
    ctx = context(req)
    cands = enumerate_candidates(ctx, ParallelPins(), SearchOptions())
    s, tied = STACKS[stack], get_model(model).tie_embeddings
    assert cands and all(stack_runs_config(s, ctx.model, c, 64) is None for c in cands)
    piped = [c for c in cands if c.pp > 1]
    sharded = [c for c in cands if c.pp == 1 and c.dp * c.cp > 1]  # one data-parallel rank shards nothing: ZeRO-0
    assert {c.zero_stage for c in sharded} == set(s.zero_stages) - ({2} if stack == "meshplan" else set())
    assert s.accumulation or all(c.dp * c.micro_batch_size == 64 for c in cands if c.pp == 1)
    assert s.tp_without_sp or all(c.sequence_parallel for c in cands if c.tp > 1)
    if (tied and not s.pp_with_tied_embeddings) or not s.pipeline_parallel:
        assert not piped
    else:
        assert {c.schedule for c in piped} == set(s.schedules) & set(DEFAULT_SCHEDULES)
    assert {c.zero_stage for c in piped if c.dp * c.cp > 1} <= set(s.pipeline_zero_stages)
    assert {c.recompute for c in cands} == set(s.recompute) & set(RECOMPUTE)
    assert any(c.sequence_parallel for c in cands) == s.sequence_parallel


@pytest.mark.parametrize("stack", list(STACKS))
def test_every_stack_runs_what_estimate_fills_in(stack):
    """``estimate`` fills unpinned fields with the defaults (1F1B, recompute none, ZeRO-0 or the stack's first ZeRO
    stage, no SP or SP where the stack runs TP with it only, micro-batches of 1 or one a step where it accumulates
    none): every stack runs them, so an unpinned estimate, or one pinning only tp, is never refused for its stack."""
    from planner.specs.config import estimate_defaults

    d, s = estimate_defaults(), STACKS[stack]
    assert d["schedule"] in s.schedules and d["recompute"] in s.recompute
    model = "gpt3-1.3b" if unbuilt_parts(s, get_model("llama3-8b")) else "llama3-8b"
    for pins in ({}, {"tp": 2}):
        r = request(stack, model, **pins)
        r["training"]["precision"] = s.precisions[0]
        assert planner.estimate(r).step_time_s > 0


def test_an_inline_stack_runs_what_its_base_runs():
    fields = ("version", "zero_stages", "pipeline_zero_stages", "schedules", "sequence_parallel", "recompute")
    for base in STACKS:
        inline = resolve({"base": base, "kernels": "compiled", "dropout": True})
        assert inline.id != base and all(getattr(inline, f) == getattr(STACKS[base], f) for f in fields)


# ---- the meshplan stack is the bundled runtime -----------------------------------------------


def test_the_meshplan_stack_is_what_the_runtime_runs():
    """Over schedules × ZeRO × recompute × SP × pp × tied embeddings: ``runtime.validate.validate_plan`` refuses a
    plan exactly when the meshplan stack does not run it (its other rules all hold here)."""
    from runtime.validate import validate_plan

    meshplan = STACKS["meshplan"]
    tied = get_model("gpt3-1.3b")
    untied = tied.model_copy(update={"tie_embeddings": False})
    base = planner.estimate_plan(request("meshplan", untied.model_dump(), tp=2, pp=2, dp=2, micro_batch_size=1))
    checked = 0
    for sched, zero, rc, sp, model in itertools.product(
        [s for s in meshplan.schedules if s != "zbv-zero-bubble"], range(4), RECOMPUTE, (False, True), (tied, untied)
    ):
        v = 2 if sched.startswith("interleaved") else 1
        parallel = base.parallel.model_copy(
            update={
                "schedule": sched,
                "virtual_stages": v,
                "stage_layers": [24 // (2 * v)] * (2 * v),
                "zero_stage": zero,
                "recompute": rc,
                "sequence_parallel": sp,
            }
        )
        plan = base.model_copy(update={"parallel": parallel, "model": model})
        if sp:  # the TP plan carries the sequence-parallel rules
            from planner.specs.layout import tp_plan

            plan = plan.model_copy(update={"tp_plan": tp_plan(model, parallel)})
        refused = stack_runs_config(meshplan, model, parallel) is not None
        try:
            validate_plan(plan, 8)
            ran = True
        except MeshplanError as err:
            ran = False
            assert refused, f"{sched} ZeRO-{zero} {rc} sp={sp}: {err}"
        assert ran != refused
        checked += 1
    assert checked == 4 * 4 * 3 * 2 * 2


# ---- shown by `meshplan stacks` and GET /v1/catalog/stacks ------------------------------------


def test_meshplan_stacks_shows_what_each_stack_runs():
    out = run_cli("stacks")
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    for s in STACKS.values():
        assert s.version in text and ", ".join(s.schedules) in text and s.data_parallel in text
    listed = {x["id"]: x for x in json.loads(run_cli("stacks", "--json").stdout)}
    assert listed["megatron"]["zero_stages"] == [0, 1] and listed["deepspeed"]["pipeline_zero_stages"] == [0, 1]
    assert listed["meshplan"]["pp_with_tied_embeddings"] is False and listed["deepspeed"]["sequence_parallel"] is False


def test_the_stack_catalog_shows_what_each_stack_runs(client):
    body = {x["id"]: x for x in client.get("/v1/catalog/stacks").json()}
    for s in STACKS.values():
        got = body[s.id]
        assert got["version"] == s.version and got["runs_source"] == s.runs_source
        assert (got["zero_stages"], got["pipeline_zero_stages"]) == (list(s.zero_stages), list(s.pipeline_zero_stages))
        assert (got["schedules"], got["recompute"]) == (list(s.schedules), list(s.recompute))
        assert got["sequence_parallel"] == s.sequence_parallel
        assert got["pp_with_tied_embeddings"] == s.pp_with_tied_embeddings
    assert body["megatron"]["schedules"] == ["1f1b", "interleaved-1f1b"]
    assert body["torchtitan"]["zero_stages"] == [0, 2, 3]


@pytest.mark.parametrize(
    "stack, gbs, answers",
    [
        ("meshplan", 7, False),  # tied: pp = 1, dp = 8 ÷ tp ∈ {2, 4, 8}: none divides 7
        ("torchtitan", 7, False),
        ("meshplan", 8, True),
        ("megatron", 7, True),  # runs pp > 1 on tied models: dp = 1 divides 7
    ],
)
def test_a_batch_no_dp_divides_because_the_stack_keeps_a_tied_model_on_one_stage(stack: str, gbs: int, answers: bool):
    """When the stack keeps a tied model on one pipeline stage, the explanation says so (not 'pin tp/pp'), lists
    the data-parallel degrees left and a batch that plans, and names the stacks that pipeline tied models. Without
    context parallelism (cp = 1 pinned): on 8 GPUs every CP degree is searched (``cp_degrees.CP_FULL_GPUS``), and
    a batch of 7 then plans on one data-parallel rank (meshplan: TP1 × CP8, torchtitan: TP4 × CP2)."""
    tied = get_model("tiny-gpt").model_copy(update={"tie_embeddings": True}).model_dump()
    body = request(stack, tied, cp=1) | {"training": {"global_batch_size": gbs, "seq_len": 64, "stack": stack}}
    resp = planner.plan(body)
    assert bool(resp.plans) == answers
    if answers:
        return
    why = resp.infeasible
    assert why is not None and why.field == "training.global_batch_size"
    assert f"'{stack}' does not run pipeline parallelism on a model with tied embeddings" in why.reason
    assert "[2, 4, 8]" in why.reason and "training.stack: megatron, deepspeed" in why.suggestion
    suggested = int(why.suggestion.split("(e.g. ")[1].split(")")[0])
    again = planner.plan(body | {"training": {**body["training"], "global_batch_size": suggested}})
    assert again.plans, "the suggested batch plans"


def test_meshplan_stacks_shows_cp_and_fp8_capabilities():
    """`meshplan stacks` has a row per stack with the CP exchanges and FP8 recipes it runs (issue 24)."""
    out = run_cli("stacks")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert any("CP exchanges" in line and "FP8 recipes" in line for line in lines)
    for s in STACKS.values():
        [row] = [
            ln
            for ln in lines
            if ln.strip("│ ").startswith(f"{s.id} ") and ("no CP" in ln or "p2p" in ln or "a2a" in ln)
        ]
        assert (", ".join(s.cp_comms) or "no CP") in row and (", ".join(s.fp8_recipes) or "no FP8") in row


# ---- training precisions (Stack.precisions) ----------------------------------------------------

#: (stack, precision, runs): fp16 needs a loss scaler, which the bundled runtime and torchtitan do not have; Megatron-LM
#: v2.0 predates --bf16 (b4bc51b1e7).
PRECISIONS = [
    ("meshplan", "bf16", True),
    ("meshplan", "fp32", True),
    ("meshplan", "fp16", False),
    ("torchtitan", "fp16", False),
    ("torchtitan", "bf16", True),
    ("megatron", "fp16", True),
    ("deepspeed", "fp16", True),
    ("megatron-2020", "bf16", False),
    ("megatron-2020", "fp16", True),
    ("megatron-2021", "bf16", True),  # --bf16 since b4bc51b1e7 (2021-03-08): Megatron-LM v2.5 has it
    ("megatron-2021", "fp16", True),
    ("megatron-2022", "bf16", True),
    ("megatron-2022", "fp16", True),
]


def _precision_request(stack: str, precision: str) -> dict:
    model = "gpt3-1.3b" if stack.startswith("megatron-20") else "llama3-8b"  # GPT only
    r = request(stack, model)
    r["training"]["precision"] = precision
    return r


@pytest.mark.parametrize("entry", ["plan", "estimate"])
@pytest.mark.parametrize("stack,precision,runs", PRECISIONS)
def test_a_precision_the_stack_does_not_train_in_is_refused_naming_what_it_does(entry, stack, precision, runs):
    call = planner.plan if entry == "plan" else planner.estimate_plan
    req = _precision_request(stack, precision)
    if entry == "estimate":
        req["parallel"] = {"tp": 1, "pp": 1, "dp": 8, "micro_batch_size": 1, "zero_stage": 0}
    if runs:
        assert call(req) is not None
        return
    with pytest.raises(MeshplanError) as err:
        call(req)
    assert err.value.field == "training.precision" and stack in err.value.message
    assert ", ".join(STACKS[stack].precisions) in err.value.message
    others = [s.id for s in STACKS.values() if precision in s.precisions]
    assert all(o in err.value.fix for o in others), err.value.fix


def test_the_cli_and_the_service_refuse_fp16_for_the_bundled_runtime(client):
    out = run_cli("plan", "--model", "llama3-8b", *BASE_FLAGS, "--seq-len", "2048", "--precision", "fp16")
    assert out.returncode == 2 and "training.precision" in out.stderr and "bf16, fp32" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr + out.stdout
    r = client.post("/v1/plans", json=_precision_request("meshplan", "fp16"))
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "training.precision", r.text
    stacks = {s["id"]: s for s in client.get("/v1/catalog/stacks").json()}
    assert stacks["megatron-2020"]["precisions"] == ["fp16", "fp32"]


@pytest.mark.parametrize("precision", ["bf16", "fp16", "fp32", "fp8"])
def test_the_runtime_trains_in_exactly_the_meshplan_stacks_precisions(precision):
    """``validate_plan`` refuses a precision exactly when the meshplan stack does not train in it (FP8: its recipes)."""
    from runtime.validate import validate_plan

    base = planner.estimate_plan(request("meshplan", "llama3-8b", tp=2, pp=1, dp=4, micro_batch_size=1, zero_stage=1))
    plan = base.model_copy(update={"training": base.training.model_copy(update={"precision": precision})})
    meshplan = STACKS["meshplan"]
    runs = precision in meshplan.precisions or (precision == "fp8" and bool(meshplan.fp8_recipes))
    try:
        validate_plan(plan, 8)
        ran = True
    except MeshplanError as err:
        ran = False
        assert err.field == "training.precision", err
    assert ran == runs
