"""Route tests (TestClient, real planner, real SQLite): each resource's happy path beside its error
paths, as tables."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.client import MeshplanAPIError, MeshplanClient
from api.deps import get_solver
from api.solver import PlannerSolver
from planner.specs.catalog import CLUSTER_PRESETS, GPUS, MODELS
from planner.specs.stacks import STACKS, Stack
from tests.api_support import make_app, plan_request, profile_body, run_report_body

PROBLEM = "application/problem+json"


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    app = make_app(tmp_path_factory.mktemp("routes"))
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


@pytest.fixture(scope="module")
def solved(client) -> dict:
    """One plan solved by the real planner, shared by the tests that read it."""
    r = client.post("/v1/plans", json=plan_request())
    assert r.status_code == 201, r.text
    return r.json()


# ---- plans ---------------------------------------------------------------------------------


def test_create_plan_solves_and_stores(solved):
    assert re.fullmatch(r"[0-9a-f]{32}", solved["id"])
    assert solved["cached"] is False
    response = solved["response"]
    assert response["model"]["name"] == "tiny-gpt"
    assert response["solver"]["status"] in {"OPTIMAL", "FEASIBLE"}
    assert 1 <= len(response["plans"]) <= 2
    best = response["plans"][0]["parallel"]
    assert best["tp"] * best["pp"] * best["dp"] <= 8
    # The stored request shows what was solved, defaults filled in.
    assert solved["request"]["training"]["precision"] == "bf16"


def test_same_request_is_answered_from_the_store(client, solved):
    # Same request, spelt differently: other key order and a default written out.
    body = plan_request()
    body = {"training": {**body["training"], "optimizer": "adam"}, **{k: v for k, v in body.items() if k != "training"}}
    r = client.post("/v1/plans", json=body)
    assert r.status_code == 200
    again = r.json()
    assert again["id"] == solved["id"] and again["cached"] is True
    assert again["created_at"] == solved["created_at"]
    assert again["response"] == solved["response"]  # not re-solved: the stored answer, byte for byte


def test_read_plan(client, solved):
    r = client.get(f"/v1/plans/{solved['id']}")
    assert r.status_code == 200
    assert r.json()["response"] == solved["response"]


@pytest.mark.parametrize(
    ("query", "expected_total"),
    [
        ("", 1),
        ("?model=tiny-gpt", 1),
        ("?model=llama3-70b", 0),
        ("?gpu=h100-sxm5-80gb", 1),
        ("?gpu=a100-sxm4-80gb", 0),
        ("?model=tiny-gpt&gpu=h100-sxm5-80gb&limit=1&offset=0", 1),
    ],
)
def test_list_plans_filters(client, solved, query, expected_total):
    r = client.get(f"/v1/plans{query}")
    assert r.status_code == 200
    page = r.json()
    assert page["total"] == expected_total
    if expected_total:
        item = page["items"][0]
        best = solved["response"]["plans"][0]["estimate"]
        assert item["id"] == solved["id"] and item["num_gpus"] == 8 and item["gpu"] == "h100-sxm5-80gb"
        assert item["step_time_s"] == best["step_time_s"] and item["fits"] == best["fits"]


def test_list_plans_offset_past_the_end(client, solved):
    page = client.get("/v1/plans?offset=5").json()
    assert page["items"] == [] and page["total"] == 1 and page["offset"] == 5


def test_trace_of_a_stored_plan(client, solved):
    r = client.get(f"/v1/plans/{solved['id']}/trace?index=0")
    assert r.status_code == 200
    trace = r.json()
    blocks = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    assert blocks and {"forward", "backward"} <= {e["cat"] for e in blocks}
    assert max(e["tid"] for e in blocks) == solved["response"]["plans"][0]["parallel"]["pp"] - 1


def test_delete_plan_then_it_is_gone(tmp_path):
    with TestClient(make_app(tmp_path)) as c:
        plan_id = c.post("/v1/plans", json=plan_request()).json()["id"]
        assert c.delete(f"/v1/plans/{plan_id}").status_code == 204
        assert c.get(f"/v1/plans/{plan_id}").status_code == 404
        assert c.delete(f"/v1/plans/{plan_id}").status_code == 404
        # Asked again, it is solved again (201), under the same id.
        r = c.post("/v1/plans", json=plan_request())
        assert (r.status_code, r.json()["id"]) == (201, plan_id)


def test_every_export_format_downloads(client, solved):
    formats = client.get("/v1/catalog/export-formats").json()
    assert {f["id"] for f in formats} >= {
        "torchrun",
        "slurm",
        "kubeflow-pytorchjob",
        "kubeflow-trainjob",
        "megatron",
        "deepspeed",
        "torchtitan",
        "meshplan",
    }
    for fmt in formats:
        r = client.get(
            f"/v1/plans/{solved['id']}/export/{fmt['id']}?job_name=tiny-run&partition=gpu&image=reg.example/meshplan:1"
        )
        era = {
            "megatron-2020": "Megatron-LM v2.0",
            "megatron-2021": "Megatron-LM v2.5",
            "megatron-2022": "Megatron-LM 52e636888c",
        }.get(fmt["id"])
        if era is not None and r.status_code == 422:  # Megatron-LM v2.0 / v2.5 refuse what they cannot run
            assert era in r.text and '"plan.' in r.text, r.text  # the problem names the field
            continue
        assert r.status_code == 200, (fmt["id"], r.text)
        assert r.headers["content-type"].split(";")[0] == fmt["media_type"]
        assert re.fullmatch(r'attachment; filename="[^"/]+"', r.headers["content-disposition"])
        assert r.text.strip()


@pytest.mark.parametrize(
    ("fmt", "query", "target", "warned"),
    [
        ("megatron", "", "megatron", True),
        ("torchtitan-toml", "", "torchtitan", True),
        ("deepspeed", "", "deepspeed", True),
        ("slurm", "partition=gpu", "meshplan", False),
        ("meshplan", "", "meshplan", False),
        ("torchrun", "command=train.py", None, False),  # the user's program: its stack is unknown
    ],
)
def test_export_says_which_stack_the_plan_was_priced_for_and_warns_on_another(
    client, solved, fmt, query, target, warned
):
    """The plan was priced for the default stack (meshplan); an export that runs another stack carries
    the warning in the file (first in its box) and in ``X-Meshplan-Stack-Warning``."""
    r = client.get(f"/v1/plans/{solved['id']}/export/{fmt}?{query}")
    assert r.status_code == 200, r.text
    assert r.headers["x-meshplan-plan-stack"] == solved["request"]["training"]["stack"] == "meshplan"
    assert r.headers.get("x-meshplan-target-stack") == target
    warning = r.headers.get("x-meshplan-stack-warning")
    assert (warning is not None) is warned
    if warned:
        assert f"'{target}'" in warning and f"--stack {target}" in warning
        if fmt == "deepspeed":  # JSON: the warnings are a list in the file's "meshplan" block
            assert r.json()["meshplan"]["warnings"][0] == warning
        else:

            def norm(text: str) -> str:
                return " ".join(text.replace("#", " ").replace('"', " ").split())

            assert norm("WARNING: " + warning) in norm(r.text)
        assert int(r.headers["x-meshplan-warnings"]) >= 1
    stacks = {f["id"]: f["stack"] for f in client.get("/v1/catalog/export-formats").json()}
    assert stacks[fmt] == (target or "meshplan")


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("job_name=Not%20A%20Label", "query.job_name"),
        ("partition=gpu%3Brm%20-rf", "query.partition"),
        ("nodes=0", "query.nodes"),
        ("index=7", "query.index"),
    ],
)
def test_export_with_bad_options_is_422_or_404(client, solved, query, field):
    r = client.get(f"/v1/plans/{solved['id']}/export/slurm?{query}")
    assert r.status_code in (404, 422) and r.headers["content-type"] == PROBLEM
    assert field in [e["field"] for e in r.json()["errors"]], r.json()


# ---- estimates -----------------------------------------------------------------------------


def test_estimate_of_pinned_configuration(client):
    pins = {"tp": 2, "pp": 2, "dp": 2, "micro_batch_size": 1}
    r = client.post("/v1/estimates", json=plan_request(parallel=pins))
    assert r.status_code == 200, r.text
    plan = r.json()
    assert {k: plan["parallel"][k] for k in pins} == pins
    assert sum(plan["parallel"]["stage_layers"]) == MODELS["tiny-gpt"].num_layers
    assert plan["estimate"]["step_time_s"] > 0 and plan["mesh"]["shape"] == [2, 2, 2]


# ---- profiles and runs ---------------------------------------------------------------------


def test_profile_upload_is_content_addressed(client):
    first = client.post("/v1/profiles", json=profile_body(device="cpu-a"))
    again = client.post("/v1/profiles", json=profile_body(device="cpu-a"))
    other = client.post("/v1/profiles", json=profile_body(device="cpu-b"))
    assert (first.status_code, again.status_code, other.status_code) == (201, 200, 201)
    assert first.json()["id"] == again.json()["id"] != other.json()["id"]
    got = client.get(f"/v1/profiles/{first.json()['id']}")
    assert got.status_code == 200 and got.json()["profile"]["device"] == "cpu-a"
    listed = client.get("/v1/profiles?model=tiny-gpt").json()
    assert {i["device"] for i in listed["items"]} >= {"cpu-a", "cpu-b"}
    assert client.get("/v1/profiles?model=llama3-8b").json()["total"] == 0


def test_plan_with_stored_profile_id(tmp_path):
    seen = []

    class Recording(PlannerSolver):  # the real planner; records what it was handed
        def plan(self, request):
            seen.append(request)
            return super().plan(request)

    app = make_app(tmp_path)
    app.dependency_overrides[get_solver] = Recording
    with TestClient(app) as c:
        profile_id = c.post("/v1/profiles", json=profile_body(device="NVIDIA H100 80GB HBM3")).json()["id"]
        r = c.post("/v1/plans", json=plan_request(profile_id=profile_id))
        assert r.status_code == 201, r.text
        assert r.json()["request"]["profile_id"] == profile_id
        assert (
            seen[0].profile is not None
            and seen[0].profile.device == "NVIDIA H100 80GB HBM3"
            and seen[0].profile_id is None
        )
        # a profile measured on the CPU does not price an H100 cluster: 422 naming both devices and the fix
        cpu_id = c.post("/v1/profiles", json=profile_body(device="cpu")).json()["id"]
        r = c.post("/v1/plans", json=plan_request(profile_id=cpu_id))
        assert r.status_code == 422 and r.headers["content-type"].startswith(PROBLEM), r.text
        error = r.json()["errors"][0]
        assert (
            error["field"] == "profile.device" and "'cpu'" in error["message"] and "h100-sxm5-80gb" in error["message"]
        )
        assert error["fix"]


def test_runs_store_and_list(client):
    r = client.post("/v1/runs", json=run_report_body(step_time=0.5))
    assert r.status_code == 201
    run = r.json()
    assert client.get(f"/v1/runs/{run['id']}").json()["report"]["measured_step_time_s"] == 0.5
    items = client.get("/v1/runs").json()["items"]
    assert any(i["id"] == run["id"] and i["world_size"] == 8 and i["step_time_ratio"] == 0.8 for i in items)


# ---- catalog and health --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "check"),
    [
        ("/v1/catalog/models", lambda body: {m["name"] for m in body} == set(MODELS)),
        ("/v1/catalog/gpus", lambda body: {g["id"] for g in body} == set(GPUS)),
        (
            "/v1/catalog/clusters",
            lambda body: (
                [c["id"] for c in body] == list(CLUSTER_PRESETS)
                and body[list(CLUSTER_PRESETS).index("dgx-h100")]["inter_node_bandwidth_GBps"] == 8 * 400 / 8 / 8
            ),
        ),
        (
            "/v1/catalog/stacks",
            lambda body: (
                [x["id"] for x in body] == list(STACKS)
                and [Stack.model_validate(x) for x in body] == list(STACKS.values())
            ),
        ),
        (
            "/v1/catalog/export-formats",
            lambda body: all({"id", "media_type", "target", "target_version"} <= set(f) for f in body),
        ),
        ("/healthz", lambda body: body["status"] == "ok"),
        ("/readyz", lambda body: body["status"] == "ok"),
        (
            "/openapi.json",
            lambda body: "/v1/plans" in body["paths"] and "/v1/plans/{plan_id}/export/{fmt}" in body["paths"],
        ),
    ],
)
def test_read_only_routes(client, path, check):
    r = client.get(path)
    assert r.status_code == 200
    assert check(r.json())


def test_schedule_catalog_says_what_the_planner_prices_and_the_runtime_runs(client):
    """GET /v1/catalog/schedules (and the client's ``schedules()``) lists every schedule a plan may name;
    the planner accepts a pinned schedule exactly when it is ``priced`` (else 422 naming the field)."""
    from planner.specs import ParallelConfig
    from planner.specs.config import SCHEDULES

    body = client.get("/v1/catalog/schedules").json()
    assert [s["id"] for s in body] == list(ParallelConfig.model_fields["schedule"].annotation.__args__)
    assert body == [dataclasses.asdict(s) for s in SCHEDULES]
    assert MeshplanClient(http=client).schedules() == list(SCHEDULES)
    assert "/v1/catalog/schedules" in client.get("/openapi.json").json()["paths"]
    for s in body:
        pins = {
            "tp": 1,
            "pp": 2,
            "dp": 4,
            "micro_batch_size": 1,
            "schedule": s["id"],
            "virtual_stages": s["fixed_virtual_stages"] or (2 if s["needs_virtual_stages"] else 1),
        }
        r = client.post("/v1/estimates", json=plan_request(parallel=pins))
        assert r.status_code == (200 if s["priced"] else 422), (s["id"], r.text)
        if not s["priced"]:
            assert r.json()["errors"][0]["field"] == "parallel.schedule"


def test_root_serves_the_dashboard_or_says_it_is_missing(client):
    r = client.get("/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    from api.app import STATIC_DIR

    if (STATIC_DIR / "index.html").is_file():
        assert r.text == (STATIC_DIR / "index.html").read_text()
    else:
        assert "dashboard is not installed" in r.text


# ---- errors: problem+json naming the field -------------------------------------------------

ERROR_CASES = [
    # (name, method, path, json body, status, field named in errors or None)
    ("missing section", "POST", "/v1/plans", {"model": "tiny-gpt"}, 422, "cluster"),
    ("bad nested value", "POST", "/v1/plans", plan_request(cluster__num_nodes=0), 422, "cluster.num_nodes"),
    ("unknown field", "POST", "/v1/plans", {**plan_request(), "clustr": {}}, 422, "clustr"),
    ("unknown model id", "POST", "/v1/plans", plan_request(model="gpt-5"), 422, "model"),
    ("unknown gpu id", "POST", "/v1/plans", plan_request(cluster__gpu="tpu-v9"), 422, "cluster.gpu"),
    ("top_k out of schema range", "POST", "/v1/plans", plan_request(top_k=0), 422, "top_k"),
    ("unknown profile id", "POST", "/v1/plans", plan_request(profile_id="feedface"), 422, "profile_id"),
    ("bad pins in estimate", "POST", "/v1/estimates", plan_request(parallel={"tp": 3, "pp": 1, "dp": 1}), 422, None),
    ("bad run report", "POST", "/v1/runs", {**run_report_body(), "world_size": 0}, 422, "world_size"),
    ("profile without layers", "POST", "/v1/profiles", {**profile_body(), "layers": []}, 422, "layers"),
    ("bad query", "GET", "/v1/plans?limit=0", None, 422, "query.limit"),
    ("bad trace index", "GET", "/v1/plans/x/trace?index=-1", None, 422, "query.index"),
    ("unknown plan", "GET", "/v1/plans/0123456789abcdef", None, 404, None),
    ("unknown plan trace", "GET", "/v1/plans/0123456789abcdef/trace", None, 404, None),
    ("unknown plan delete", "DELETE", "/v1/plans/0123456789abcdef", None, 404, None),
    ("unknown export format", "GET", "/v1/plans/0123456789abcdef/export/punchcard", None, 404, "path.fmt"),
    ("unknown profile", "GET", "/v1/profiles/0123456789abcdef", None, 404, None),
    ("unknown run", "GET", "/v1/runs/0123456789abcdef", None, 404, None),
    ("unknown path", "GET", "/v2/plans", None, 404, None),
    ("wrong method", "PUT", "/v1/plans", {}, 405, None),
]


@pytest.mark.parametrize(
    ("name", "method", "path", "body", "status", "field"), ERROR_CASES, ids=[c[0] for c in ERROR_CASES]
)
def test_errors_are_problems_naming_the_field(client, name, method, path, body, status, field):
    r = client.request(method, path, json=body)
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == PROBLEM
    problem = r.json()
    assert problem["status"] == status and problem["title"] and problem["detail"]
    if field is not None:
        assert field in [e["field"] for e in problem["errors"]], problem


def test_malformed_json_is_a_422_problem(client):
    r = client.post("/v1/plans", content=b'{"model": ', headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.headers["content-type"] == PROBLEM


def test_unexpected_error_is_a_500_problem_without_a_trace(tmp_path):
    class Broken:
        def plan(self, request):
            raise RuntimeError("internal secret /etc/passwd")

    app = make_app(tmp_path)
    app.dependency_overrides[get_solver] = Broken
    with TestClient(app, raise_server_exceptions=False) as c:
        r = c.post("/v1/plans", json=plan_request())
    assert r.status_code == 500 and r.headers["content-type"] == PROBLEM
    assert "secret" not in r.text and "Traceback" not in r.text


# ---- the Python client ---------------------------------------------------------------------


def test_client_reads_plans_and_raises_problems(client, solved):
    mc = MeshplanClient(http=client)
    stored = mc.plan(plan_request())
    assert stored.id == solved["id"] and stored.cached
    assert mc.get_plan(stored.id).response.plans[0].parallel.num_gpus <= 8
    assert mc.list_plans(model="tiny-gpt").total == 1
    assert {m.name for m in mc.models()} == set(MODELS)
    with pytest.raises(MeshplanAPIError) as err:
        mc.plan(plan_request(cluster__num_nodes=0))
    assert err.value.status == 422 and err.value.problem.errors[0].field == "cluster.num_nodes"
    with pytest.raises(MeshplanAPIError) as err:
        mc.get_run("nope")
    assert err.value.status == 404


def test_readyz_is_503_when_the_store_does_not_answer(tmp_path):
    from sqlalchemy.exc import OperationalError

    from api.deps import get_store

    class Unreachable:
        def ping(self):
            raise OperationalError("SELECT 1", {}, Exception("connection refused"))

    app = make_app(tmp_path)
    app.dependency_overrides[get_store] = Unreachable
    with TestClient(app) as c:
        ready, healthy = c.get("/readyz"), c.get("/healthz")
    assert (ready.status_code, ready.json()["status"]) == (503, "unavailable")
    assert "OperationalError" in ready.json()["detail"] and "refused" not in ready.text
    assert healthy.status_code == 200  # the process itself is fine


def test_stack_catalog_through_the_client(client):
    """The client's ``stacks()`` reads GET /v1/catalog/stacks: every preset ``training.stack`` may name."""
    assert MeshplanClient(http=client).stacks() == list(STACKS.values())
    assert "/v1/catalog/stacks" in client.get("/openapi.json").json()["paths"]


# ---- new dimensions in the catalog: MoE, context parallelism, FP8; HF configs as models (issues 23, 24) ----

HF_CONFIGS = Path(__file__).parent / "data" / "hf_configs"


def test_model_catalog_lists_moe_fields_and_parameter_counts(client):
    """Each catalog model is its ModelSpec (MoE models with ``moe``: experts, top-k, ...) plus its total and
    active parameters as the planner counts them; the client still reads ModelSpecs."""
    from planner.workload.analytic import num_active_parameters, num_parameters

    body = {m["name"]: m for m in client.get("/v1/catalog/models").json()}
    assert set(body) == set(MODELS)
    for name, spec in MODELS.items():
        got = body[name]
        assert (got["total_parameters"], got["active_parameters"]) == (
            num_parameters(spec),
            num_active_parameters(spec),
        )
        assert got["moe_layers"] == sum(spec.is_moe_layer(i) for i in range(spec.num_layers))
        if spec.moe is None:
            assert "moe" not in got and got["active_parameters"] == got["total_parameters"]
        else:
            assert (got["moe"]["num_experts"], got["moe"]["top_k"]) == (spec.moe.num_experts, spec.moe.top_k)
            assert got["active_parameters"] < got["total_parameters"]
    # DeepSeek-V3: 671B total, 37B active (its paper), to 1 %.
    assert body["deepseek-v3"]["total_parameters"] == pytest.approx(671e9, rel=0.01)
    assert body["deepseek-v3"]["active_parameters"] == pytest.approx(37e9, rel=0.02)
    assert MeshplanClient(http=client).models() == list(MODELS.values())


def test_stack_catalog_says_what_each_stack_runs_of_cp_and_fp8(client):
    body = {x["id"]: x for x in client.get("/v1/catalog/stacks").json()}
    for s in STACKS.values():
        got = body[s.id]
        assert got["cp_comms"] == list(s.cp_comms) and got["fp8_recipes"] == list(s.fp8_recipes)
        assert got["fp8_all_gather"] == list(s.fp8_all_gather) and got["tp_overlap"] == s.tp_overlap
    assert body["megatron"]["fp8_recipes"][0] == "delayed" and "a2a+p2p" in body["megatron"]["cp_comms"]
    # the bundled runtime's torchao recipes (runtime/fp8.py), its FSDP all-gather in high precision
    assert body["meshplan"]["fp8_recipes"] == ["tensorwise", "rowwise"] and body["meshplan"]["fp8_all_gather"] == []


def test_plan_request_with_an_hf_config_plans_end_to_end(client):
    """A real config.json (Llama 3.2 3B Instruct) as ``{"model": {"hf_config": ...}}``: planned, stored with the
    ModelSpec it describes, and the same request again is served from the store."""
    from planner.specs.hf import from_hf_config

    cfg = json.loads((HF_CONFIGS / "llama-3.2-3b-instruct.json").read_text())
    body = plan_request(model={"hf_config": cfg, "name": "llama3.2-3b-hf"}, training__seq_len=2048)
    r = client.post("/v1/plans", json=body)
    assert r.status_code == 201, r.text
    stored = r.json()
    spec = from_hf_config(cfg, "llama3.2-3b-hf")
    assert stored["request"]["model"] == spec.model_dump(mode="json")
    assert stored["response"]["model"]["name"] == "llama3.2-3b-hf"
    assert stored["response"]["plans"], stored["response"]["infeasible"]
    again = client.post("/v1/plans", json=body)
    assert again.status_code == 200 and again.json()["id"] == stored["id"]


@pytest.mark.parametrize(
    ("model", "field"),
    [
        # An MoE config is read, and refused by name on a stack without a MoE block (deepspeed; the default,
        # meshplan, runs MoE since issue 23's runtime part; expert parallelism is priced since cost model 17).
        ({"hf_config": "olmoe-1b-7b-0125-instruct.json"}, "training.stack"),
        ({"hf_config": {"model_type": "bert", "architectures": ["BertModel"]}}, "model.hf_config.model_type"),
        ({"hf_config": "qwen3-8b.json", "revision": "main"}, "model"),
    ],
    ids=["moe", "unsupported-architecture", "extra-key"],
)
def test_hf_config_errors_name_the_field(client, model, field):
    if isinstance(model["hf_config"], str):
        model = {**model, "hf_config": json.loads((HF_CONFIGS / model["hf_config"]).read_text())}
    stack = {"training__stack": "deepspeed"} if field == "training.stack" else {}
    r = client.post("/v1/plans", json=plan_request(model=model, training__seq_len=1024, **stack))
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith(PROBLEM)
    assert r.json()["errors"][0]["field"] == field, r.json()


def test_estimate_with_cp_pinned_is_priced_and_a_bad_cp_is_a_problem_naming_parallel_cp(client):
    """Context parallelism is priced (cost model 14): a pinned cp is estimated with its exchange in the breakdown;
    a cp that does not divide the GPUs is a 422 on ``parallel.cp``."""
    parallel = {"tp": 2, "pp": 1, "dp": 2, "cp": 2, "micro_batch_size": 1}
    r = client.post("/v1/estimates", json=plan_request(parallel=parallel, model="tiny-llama"))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["parallel"]["cp"] == 2 and body["estimate"]["breakdown"]["cp_comm_s"] > 0
    parallel = {"tp": 2, "pp": 1, "dp": 1, "cp": 3, "micro_batch_size": 1}
    r = client.post("/v1/estimates", json=plan_request(parallel=parallel, model="tiny-llama"))
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "parallel.cp", r.text
