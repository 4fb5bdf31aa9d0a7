"""The dashboard's pure JavaScript helpers, run as the browser runs them: the ES modules served by a
plain static file server (no service needed) and called in headless Chromium. Each case is checked
against an independent computation (the planner's own parameter count, arithmetic on the degrees)."""

from __future__ import annotations

import dataclasses
import functools
import http.server
import threading
from pathlib import Path

import pytest

from planner.specs import MeshLayout
from planner.specs.catalog import MODELS
from planner.specs.config import SCHEDULES
from planner.specs.layout import mesh_groups
from planner.workload.analytic import num_parameters

ROOT = Path(__file__).resolve().parents[1]
STATIC = ROOT / "api" / "static"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def page():
    from playwright.sync_api import sync_playwright

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(STATIC))
    handler.log_message = lambda *a, **k: None
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        pg = browser.new_page()
        # A blank page on the same origin, so the modules import without running the app.
        pg.route(
            "**/blank", lambda route: route.fulfill(body="<!doctype html><title>t</title>", content_type="text/html")
        )
        pg.goto(f"http://127.0.0.1:{httpd.server_address[1]}/blank")
        yield pg
        browser.close()
    httpd.shutdown()


def call(page, module: str, fn: str, *args):
    return page.evaluate(
        """async ([module, fn, args]) => {
            const m = await import(module);
            try { return {ok: m[fn](...args)}; } catch (e) { return {error: e.field || String(e)}; }
        }""",
        [module, fn, list(args)],
    )


#: GET /v1/catalog/schedules, as the service serves it.
SCHEDULE_CATALOG = [dataclasses.asdict(s) for s in SCHEDULES]
BASE = {
    "tp": 8,
    "pp": 4,
    "dp": 2,
    "micro_batch_size": 1,
    "schedule": "1f1b",
    "virtual_stages": 1,
    "recompute": "none",
    "sequence_parallel": True,
    "zero_stage": 1,
    "stage_layers": [20, 20, 20, 20],
}


@pytest.mark.parametrize(
    ("knob", "value", "expect"),
    [
        ("tp", 4, {"tp": 4, "pp": 4, "dp": 4, "stage_layers": [20, 20, 20, 20]}),
        ("tp", 1, {"tp": 1, "dp": 16, "sequence_parallel": False}),
        ("pp", 8, {"pp": 8, "dp": 1, "stage_layers": None}),
        ("pp", 2, {"pp": 2, "dp": 4, "stage_layers": None}),
        ("tp", 3, "parallel.tp"),  # 3 × 4 does not divide 64 GPUs
        ("pp", 128, "parallel.pp"),
        ("micro_batch_size", 4, {"micro_batch_size": 4, "dp": 2, "stage_layers": [20, 20, 20, 20]}),
        ("schedule", "interleaved-1f1b", {"virtual_stages": 2, "stage_layers": None}),
        ("schedule", "zbv-zero-bubble", {"virtual_stages": 2, "stage_layers": None}),
        ("schedule", "gpipe", {"virtual_stages": 1, "stage_layers": None}),
        ("schedule", "pipedream", "parallel.schedule"),  # not in GET /v1/catalog/schedules
        ("recompute", "full", {"recompute": "full", "dp": 2}),
        ("zero_stage", 3, {"zero_stage": 3}),
    ],
)
def test_what_if_changes_one_setting_and_keeps_the_gpu_count(page, knob, value, expect):
    out = call(page, "./js/pages/whatif.js", "changedConfig", BASE, knob, value, SCHEDULE_CATALOG)
    if isinstance(expect, str):
        assert out == {"error": expect}
        return
    cfg = out["ok"]
    assert cfg["tp"] * cfg["pp"] * cfg["dp"] == BASE["tp"] * BASE["pp"] * BASE["dp"]
    for k, v in expect.items():
        assert cfg.get(k) == v, (k, cfg)
    for k in BASE:  # nothing else moved
        if k not in expect and k not in ("dp", knob):
            assert cfg[k] == BASE[k], k


@pytest.mark.parametrize("name", ["gpt3-175b", "llama2-70b", "llama3-8b", "llama3-70b", "llama3-405b", "tiny-gpt"])
def test_model_picker_parameter_count_matches_the_planner(page, name):
    spec = MODELS[name].model_dump(mode="json")
    assert call(page, "./js/pages/new-plan.js", "paramCount", spec)["ok"] == num_parameters(MODELS[name])


@pytest.mark.parametrize(
    ("maximum", "count", "expect"),
    [
        (26612, 8, [0, 5000, 10000, 15000, 20000, 25000, 30000]),
        (79.6, 5, [0, 20, 40, 60, 80]),
        (0.3, 5, [0, 0.1, 0.2, 0.3]),
        (1, 5, [0, 0.2, 0.4, 0.6, 0.8, 1]),
        (0, 5, [0, 1]),
    ],
)
def test_axis_ticks_are_round_and_cover_the_data(page, maximum, count, expect):
    ticks = call(page, "./js/charts.js", "niceTicks", maximum, count)["ok"]
    assert ticks == pytest.approx(expect)
    assert ticks[0] == 0 and ticks[-1] >= maximum


@pytest.mark.parametrize(
    ("fill", "ink"), [("#0072B2", "#fff"), ("#F0E442", "#111"), ("#56B4E9", "#111"), ("#332288", "#fff")]
)
def test_labels_on_coloured_blocks_pick_the_readable_ink(page, fill, ink):
    assert call(page, "./js/charts.js", "inkOn", fill)["ok"] == ink


@pytest.mark.parametrize("shape", [[2, 2, 2], [4, 2, 8], [1, 16, 1], [3, 1, 2], [1, 1, 1]])
def test_mesh_groups_in_the_browser_are_the_planners(page, shape):
    """The dashboard derives the rank groups from the plan's mesh shape exactly as planner.specs.layout does
    (and as init_device_mesh forms them)."""
    mesh = MeshLayout(dim_names=["pp", "dp", "tp"], shape=shape)
    for dim in mesh.dim_names:
        assert call(page, "./js/pages/plan-parts.js", "meshGroups", mesh.model_dump(), dim)["ok"] == mesh_groups(
            mesh, dim
        )


# ---- context parallelism, FP8, MoE and breakdown terms (issues 23, 24) ----------------------------


@pytest.mark.parametrize(
    ("par", "knob", "value", "expect"),
    [
        ({"cp": 1}, "cp", 2, {"cp": 2, "dp": 1}),  # 8 × 4 × 2 = 64 GPUs kept
        ({"cp": 2, "dp": 1}, "tp", 4, {"tp": 4, "cp": 2, "dp": 2}),
        ({"cp": 2, "dp": 1}, "cp", 1, {"cp": 1, "dp": 2}),
        ({"cp": 1}, "cp", 3, "parallel.cp"),
        ({}, "cp", 2, {"cp": 2, "dp": 1}),  # a plan from before cp: cp 1
    ],
)
def test_what_if_with_context_parallelism_keeps_the_gpu_count(page, par, knob, value, expect):
    base = {**BASE, **par}
    out = call(page, "./js/pages/whatif.js", "changedConfig", base, knob, value, SCHEDULE_CATALOG)
    if isinstance(expect, str):
        assert out == {"error": expect}
        return
    cfg = out["ok"]
    gpus = lambda c: c["tp"] * c["pp"] * c["dp"] * c.get("cp", 1)  # noqa: E731
    assert gpus(cfg) == gpus(base) == 64
    assert {k: cfg.get(k) for k in expect} == expect


def test_time_breakdown_draws_every_term_the_api_returns(page):
    """Known terms keep their words and order; a term the dashboard has never heard of (here ep_comm_s,
    cp_comm_s and a made-up one) is drawn too, with a label made from its name; communication sums every
    term but compute, bubble and optimizer."""
    known = {"compute_s": 1.0, "tp_comm_s": 0.1, "pp_bubble_s": 0.2, "pp_p2p_s": 0.01, "dp_sync_s": 0.02}
    extra = {"optimizer_s": 0.03, "cp_comm_s": 0.04, "ep_comm_s": 0.05, "fp8_cast_overhead_s": 0.06, "note": "x"}
    parts = call(page, "./js/pages/plan-parts.js", "breakdownParts", [known, extra])["ok"]
    keys = [p[0] for p in parts]
    assert set(keys) == {k for k in {**known, **extra} if k.endswith("_s")}
    assert keys[:3] == ["compute_s", "tp_comm_s", "cp_comm_s"] and keys[-1] == "fp8_cast_overhead_s"
    labels = dict((k, label) for k, label, _ in parts)
    assert labels["cp_comm_s"] == "context-parallel comm." and labels["ep_comm_s"] == "expert-parallel all-to-all"
    assert labels["fp8_cast_overhead_s"] == "fp8 cast overhead"
    assert len({c for _, _, c in parts}) == len(parts)  # one colour each
    comm = call(page, "./js/pages/plan-parts.js", "commSeconds", {**known, **extra})["ok"]
    assert comm == pytest.approx(0.1 + 0.01 + 0.02 + 0.04 + 0.05 + 0.06)


@pytest.mark.parametrize("stack", ["meshplan", "megatron", "torchtitan", "deepspeed"])
def test_fp8_recipe_and_cp_exchange_choices_are_the_stacks(page, stack):
    from planner.specs.stacks import STACKS

    body = STACKS[stack].model_dump(mode="json")  # as GET /v1/catalog/stacks serves it
    recipes = call(page, "./js/pages/new-plan.js", "recipeOptions", body)["ok"]
    comms = call(page, "./js/pages/new-plan.js", "cpCommOptions", body)["ok"]
    assert [v for v, _ in recipes[1:]] == list(STACKS[stack].fp8_recipes)
    assert [v for v, _ in comms[1:]] == list(STACKS[stack].cp_comms)
    assert recipes[0][0] == "" and (
        STACKS[stack].fp8_recipes[0] in recipes[0][1] if STACKS[stack].fp8_recipes else "no FP8" in recipes[0][1]
    )


@pytest.mark.parametrize(
    "stack", ["meshplan", "megatron", "torchtitan", "deepspeed", "megatron-2020", "megatron-2021", "megatron-2022"]
)
def test_precision_choices_are_the_stacks(page, stack):
    """The precision picker offers what the stack trains in (Stack.precisions: no fp16 for the bundled runtime,
    no bf16 for Megatron-LM v2.0), its first the default, and fp8 (the server answers for the GPU and stack)."""
    from planner.specs.stacks import STACKS

    body = STACKS[stack].model_dump(mode="json")
    options = call(page, "./js/pages/new-plan.js", "precisionOptions", body)["ok"]
    assert [v for v, _ in options] == [*STACKS[stack].precisions, "fp8"]


@pytest.mark.parametrize("name", ["mixtral-8x7b", "deepseek-v3", "qwen3-30b-a3b", "llama3-8b"])
def test_model_picker_line_shows_moe_total_and_active_parameters(page, name):
    from planner.workload.analytic import num_active_parameters, num_parameters

    spec = MODELS[name]
    body = {
        **spec.model_dump(mode="json"),
        "total_parameters": num_parameters(spec),
        "active_parameters": num_active_parameters(spec),
    }
    label = call(page, "./js/pages/new-plan.js", "modelLabel", body)["ok"]
    total, active = page.evaluate(
        "async ([t, a]) => { const {fmt} = await import('./js/dom.js'); return [fmt.count(t), fmt.count(a)]; }",
        [body["total_parameters"], body["active_parameters"]],
    )
    assert f"≈{total}" in label
    if spec.moe:
        assert f"{spec.moe.num_experts} experts" in label and f"top-{spec.moe.top_k}" in label
        assert f"{active} active" in label
    else:
        assert "MoE" not in label and "active" not in label


@pytest.mark.parametrize(("tp", "cp", "dp", "pp", "gpn"), [(2, 2, 2, 1, 8), (1, 4, 2, 2, 8), (4, 2, 1, 1, 4)])
def test_mesh_view_draws_the_cp_axis_of_a_cp_plan(page, tp, cp, dp, pp, gpn):
    """A plan with cp > 1 (mesh pp, dp, cp, tp): every GPU names its cp rank, one dashed line per CP group
    (per node it spans), the cp ranks those of planner.specs.layout.mesh_groups."""
    from runtime.testing import make_plan

    plan = make_plan("tiny-llama", tp=tp, cp=cp, dp=dp, pp=pp, seq_len=64).model_dump(mode="json")
    n = tp * cp * dp * pp
    plan["cluster"] |= {"num_nodes": n // gpn, "gpus_per_node": gpn}
    mesh = MeshLayout.model_validate(plan["mesh"])
    assert mesh.dim_names == ["pp", "dp", "cp", "tp"]
    drawn = page.evaluate(
        """async (plan) => {
            const {meshFigure} = await import('./js/pages/plan-parts.js');
            const fig = meshFigure(plan);
            document.body.replaceChildren(fig);
            return {
                cp: [...fig.querySelectorAll('rect.gpu')].map((e) => +e.dataset.cp),
                links: [...fig.querySelectorAll('.cp-link')].map((e) => +e.dataset.cpGroup),
                labels: [...fig.querySelectorAll('text.cell-sub')].map((e) => e.textContent),
                legend: fig.querySelector('.legend').textContent,
            };
        }""",
        plan,
    )
    groups = mesh_groups(mesh, "cp")
    cp_of = {r: i for grp in groups for i, r in enumerate(grp)}
    assert drawn["cp"] == [cp_of[r] for r in range(n)]
    per_node = [{r // gpn for r in grp} for grp in groups]
    assert sorted(drawn["links"]) == sorted(g for g, nodes in enumerate(per_node) for _ in nodes)
    assert all(label.endswith(f"c{cp_of[r]}") for r, label in enumerate(drawn["labels"]))
    assert "context-parallel group" in drawn["legend"]
