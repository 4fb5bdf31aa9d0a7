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
