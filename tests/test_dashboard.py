"""The dashboard end to end: the real service (`meshplan serve` on a temporary SQLite file) and a
real headless Chromium (Debian's, never a downloaded one) driving the pages as a user would.

Each test checks what a person would look at — the configuration, charts drawn with data, errors
next to the right field — against the API's own JSON, and saves screenshots under artifacts/.
Set MESHPLAN_DASHBOARD_URL to drive an already running server instead of starting one.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from planner.specs import MeshLayout
from planner.specs.layout import mesh_groups

ROOT = Path(__file__).resolve().parents[1]
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
TOKEN = "dashboard-test-token"
LLAMA_ON_64_H100 = {"model": "llama3-70b", "gpu": "h100-sxm5-80gb", "nodes": 8, "gpus_per_node": 8}

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_server(tmp: Path, token: str | None = None):
    if not (ROOT / "api" / "serve_cli.py").exists() and not os.environ.get("MESHPLAN_REQUIRE_BROWSER"):
        pytest.skip("the service (api/serve_cli.py) is not on this branch yet")
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MESHPLAN_DATABASE_URL": f"sqlite:///{tmp / f'dash-{port}.db'}"}
    env.pop("MESHPLAN_API_TOKEN", None)
    if token:
        env["MESHPLAN_API_TOKEN"] = token
    log = open(tmp / f"server-{port}.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "api.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"server exited with {proc.returncode}: {(tmp / f'server-{port}.log').read_text()[-2000:]}"
            )
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                return proc, base
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("server did not become healthy within 60 s")


def _stop(proc) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if os.environ.get("MESHPLAN_DASHBOARD_URL"):
        yield os.environ["MESHPLAN_DASHBOARD_URL"].rstrip("/")
        return
    proc, base = _start_server(tmp_path_factory.mktemp("dash"))
    yield base
    _stop(proc)


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


class Page:
    """A browser tab that records console errors and uncaught exceptions."""

    def __init__(self, browser, base: str, width: int = 1280):
        self.ctx = browser.new_context(viewport={"width": width, "height": 900}, accept_downloads=True)
        self.page = self.ctx.new_page()
        self.page.set_default_timeout(20_000)
        self.base = base
        self.errors: list[str] = []
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        self.page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))
        # Everything must come from the service itself: no CDN, no internet.
        self.external: list[str] = []
        self.page.on(
            "request", lambda r: None if r.url.startswith((base, "data:", "blob:")) else self.external.append(r.url)
        )

    def goto(self, route: str):
        self.page.goto(f"{self.base}/#{route}")
        self.page.wait_for_selector("main .page > *:not(.state-loading)")
        self.page.wait_for_function("!document.querySelector('main .state-loading')")
        return self.page

    def shot(self, artifacts: Path, name: str):
        self.page.screenshot(path=str(artifacts / f"dashboard-{name}.png"), full_page=True)

    def assert_clean(self, allowed_statuses: tuple[int, ...] = ()):
        allowed = [f"status of {s}" for s in allowed_statuses]
        bad = [e for e in self.errors if not any(a in e for a in allowed)]
        assert not bad, f"console errors: {bad}"
        assert not self.external, f"requests outside the service: {self.external}"
        # No leaked placeholders from missing data.
        text = self.page.inner_text("main")
        for junk in ("undefined", "NaN", "[object Object]", "Infinity"):
            assert junk not in text, f"{junk!r} shown on the page"
        assert not re.search(r"\bnull\b", text), "'null' shown on the page"

    def close(self):
        self.ctx.close()


@pytest.fixture
def tab(browser, server):
    t = Page(browser, server)
    yield t
    t.close()


def _svg_rects_with_area(page, selector: str) -> int:
    return page.eval_on_selector_all(
        selector, "els => els.filter(e => { const b = e.getBBox(); return b.width > 0 && b.height > 0; }).length"
    )


def _make_plan_through_form(tab: Page, time_limit: str = "5") -> str:
    page = tab.goto("/new")
    page.select_option("#f-model", LLAMA_ON_64_H100["model"])
    page.select_option("#f-cluster-gpu", LLAMA_ON_64_H100["gpu"])
    page.fill("#f-cluster-num_nodes", str(LLAMA_ON_64_H100["nodes"]))
    page.fill("#f-cluster-gpus_per_node", str(LLAMA_ON_64_H100["gpus_per_node"]))
    assert "64 GPUs" in page.inner_text("output.total")
    page.fill("#f-options-time_limit_s", time_limit)
    page.click("#plan-submit")
    page.wait_for_url(re.compile(r".*#/plans/[^/?]+$"), timeout=120_000)
    page.wait_for_selector("#alternatives-table")
    page.wait_for_selector("#schedule .block")
    return page.url.rsplit("/", 1)[-1]


@pytest.fixture(scope="module")
def llama_plan(browser, server, tmp_path_factory):
    """Llama 3 70B on 8 × 8 H100, made through the form once; the tests below read it."""
    tab = Page(browser, server)
    try:
        plan_id = _make_plan_through_form(tab)
        tab.assert_clean()
    finally:
        tab.close()
    stored = httpx.get(f"{server}/v1/plans/{plan_id}", timeout=30).json()
    return plan_id, stored


def test_form_makes_a_plan_and_the_page_explains_it(tab, llama_plan, artifacts_dir):
    plan_id, stored = llama_plan
    best = stored["response"]["plans"][0]
    par, est = best["parallel"], best["estimate"]
    page = tab.goto(f"/plans/{plan_id}")
    page.wait_for_selector("#schedule .block")

    # The configuration and the reasons.
    assert "llama3-70b" in page.inner_text("h1") and "h100-sxm5-80gb" in page.inner_text("h1")
    config = page.inner_text("#chosen .config-line")
    for text in (
        f"tp {par['tp']}",
        f"pp {par['pp']}",
        f"dp {par['dp']}",
        f"micro-batch {par['micro_batch_size']}",
        par["schedule"],
    ):
        assert text in config
    why = page.inner_text("#why")
    if best.get("explanation"):
        assert best["explanation"]["summary"] in why
        assert best["explanation"]["binding_constraint"] in why
    assert "Solver:" in why and stored["response"]["solver"]["status"] in why

    # Alternatives side by side: one column per plan.
    n_plans = len(stored["response"]["plans"])
    assert page.locator("#alternatives-table thead th").count() == n_plans + 1

    # Mesh: one cell per GPU in use, stage from the mesh's pp groups, one outline per TP group (tp > 1).
    cells = page.locator("#mesh rect.gpu:not(.gpu-unused)")
    assert cells.count() == est["gpus_used"] == par["tp"] * par["pp"] * par["dp"]
    mesh = MeshLayout.model_validate(best["mesh"])
    stage_of = {r: i for grp in mesh_groups(mesh, "pp") for i, r in enumerate(grp)}
    drawn = page.eval_on_selector_all("#mesh rect.gpu[data-stage]", "els => els.map(e => +e.dataset.stage)")
    assert drawn == [stage_of[r] for r in range(len(drawn))]
    if par["tp"] > 1:
        assert page.locator("#mesh rect.tp-outline").count() >= len(mesh_groups(mesh, "tp"))

    # Memory: stacked bars with area, the capacity line, and totals that match the estimate.
    assert _svg_rects_with_area(page, "#memory rect.bar") >= par["pp"]
    assert page.locator("#memory line.ref-line").count() == 1
    page.click("#memory summary")
    totals = page.eval_on_selector_all(
        "#memory tbody tr td:last-child", "els => els.map(e => parseFloat(e.textContent))"
    )
    expected = [s["total_gib"] for s in est["memory_per_stage"]]
    assert totals == pytest.approx(expected, abs=0.051)

    # Time breakdown: one stacked bar per alternative.
    assert _svg_rects_with_area(page, "#time rect.bar") >= n_plans

    # Schedule: every compute event of the trace is drawn, one row per pipeline rank.
    trace = httpx.get(f"{tab.base}/v1/plans/{plan_id}/trace", timeout=30).json()
    compute = [
        e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") in ("forward", "backward", "weight")
    ]
    assert page.locator(
        "#schedule rect.block-forward, #schedule rect.block-backward, #schedule rect.block-weight"
    ).count() == len(compute)
    assert page.locator("#schedule text.row-label").count() == len({e["tid"] for e in compute})
    assert _svg_rects_with_area(page, "#schedule rect.block") == page.locator("#schedule rect.block").count()

    # Exports: one link per server format, plus the trace.
    formats = httpx.get(f"{tab.base}/v1/catalog/export-formats", timeout=30).json()
    assert page.locator("#exports a[data-format]").count() == len(formats) + 1
    with page.expect_download() as dl:
        page.click('#exports a[data-format="trace"]')
    saved = json.loads(Path(dl.value.path()).read_text())
    assert len(saved["traceEvents"]) == len(trace["traceEvents"])

    tab.shot(artifacts_dir, "plan-1280")
    page.set_viewport_size({"width": 820, "height": 900})
    # Narrower than a laptop: wide charts and tables scroll inside their box, the page does not.
    assert page.evaluate("document.documentElement.scrollWidth") <= 820
    tab.shot(artifacts_dir, "plan-820")
    tab.assert_clean()


def test_what_if_compares_side_by_side(tab, llama_plan, artifacts_dir):
    plan_id, stored = llama_plan
    best = stored["response"]["plans"][0]
    page = tab.goto(f"/plans/{plan_id}")
    page.select_option("#whatif-knob", "recompute")
    other = next(r for r in ("full", "selective", "none") if r != best["parallel"]["recompute"])
    page.select_option("#whatif-value", other)
    page.click("#whatif button[type=submit]")
    page.wait_for_selector("#whatif .whatif-table")
    body = page.inner_text("#whatif .whatif-table")
    assert f"recompute {other}" in body and f"recompute {best['parallel']['recompute']}" in body
    assert page.locator("#whatif figure.chart").count() == 3  # two memory charts and the time comparison
    assert _svg_rects_with_area(page, "#whatif rect.bar") > 0
    page.locator("#whatif").screenshot(path=str(artifacts_dir / "dashboard-what-if.png"))
    tab.assert_clean()


def test_what_if_offers_the_priced_schedules_and_estimates_one(tab, llama_plan, server):
    """The what-if's schedule choices come from GET /v1/catalog/schedules (priced only): each is one
    the planner estimates, so picking one gives a comparison, not a 422."""
    plan_id, stored = llama_plan
    priced = [s["id"] for s in httpx.get(f"{server}/v1/catalog/schedules", timeout=30).json() if s["priced"]]
    page = tab.goto(f"/plans/{plan_id}")
    page.select_option("#whatif-knob", "schedule")
    page.wait_for_function("document.querySelectorAll('#whatif-value option').length > 0")
    assert page.eval_on_selector_all("#whatif-value option", "els => els.map(e => e.value)") == priced
    other = "gpipe" if stored["response"]["plans"][0]["parallel"]["schedule"] != "gpipe" else "1f1b"
    page.select_option("#whatif-value", other)
    page.click("#whatif button[type=submit]")
    page.wait_for_selector("#whatif .whatif-table")
    assert other in page.inner_text("#whatif .whatif-table")
    tab.assert_clean()


def test_edit_and_replan_prefills_the_form(tab, llama_plan):
    plan_id, stored = llama_plan
    page = tab.goto(f"/plans/{plan_id}")
    page.click("text=Edit and re-plan")
    page.wait_for_selector("#f-model")
    page.wait_for_function("!document.querySelector('main .state-loading')")
    req = stored["request"]
    assert page.input_value("#f-model") == req["model"]
    assert page.input_value("#f-cluster-gpu") == req["cluster"]["gpu"]
    assert int(page.input_value("#f-cluster-num_nodes")) == req["cluster"]["num_nodes"]
    assert int(page.input_value("#f-training-global_batch_size")) == req["training"]["global_batch_size"]
    assert float(page.input_value("#f-options-time_limit_s")) == req["options"]["time_limit_s"]
    tab.assert_clean()


def _bad_tiny_llama() -> str:
    from planner.specs.catalog import MODELS

    return json.dumps({**MODELS["tiny-llama"].model_dump(mode="json"), "num_layers": 0})


@pytest.mark.parametrize(
    ("actions", "field"),
    [
        ([("fill", "#f-cluster-num_nodes", "0")], "cluster.num_nodes"),
        ([("fill", "#f-training-seq_len", "-5")], "training.seq_len"),
        ([("fill", "#f-parallel-stage_layers", "40, x")], "parallel.stage_layers"),
        ([("select", "#f-model", "__custom__"), ("fill", "#f-model_json", "_bad_tiny_llama")], "model_json"),
        ([("click", ".paste summary", None), ("fill", "#f-request_json", "{not json")], "request_json"),
    ],
    ids=["nodes", "seq_len", "stage_cuts", "pasted_model_spec", "pasted_request"],
)
def test_validation_errors_sit_next_to_their_field(tab, artifacts_dir, actions, field):
    page = tab.goto("/new")
    for action, sel, value in actions:
        if action == "fill":
            page.fill(sel, _bad_tiny_llama() if value == "_bad_tiny_llama" else value)
        elif action == "select":
            page.select_option(sel, value)
        else:
            page.click(sel)
    page.click("#plan-submit")
    control = f'[data-field="{field}"]'
    page.wait_for_selector(f'{control}[aria-invalid="true"]')
    err_id = page.get_attribute(control, "id") + "-err"
    assert page.is_visible(f"#{err_id}") and page.inner_text(f"#{err_id}").strip()
    assert page.locator(".form-summary [role=alert]").count() == 1
    assert "#/new" in page.url  # stayed on the form
    tab.shot(artifacts_dir, f"validation-{field}")
    tab.assert_clean(allowed_statuses=(422,))


def test_plans_list_filters_by_gpu(tab, llama_plan, artifacts_dir):
    plan_id, _ = llama_plan
    page = tab.goto("/plans")
    assert page.locator(f'a[href="#/plans/{plan_id}"]').count() == 1
    tab.shot(artifacts_dir, "plans")
    page.select_option("#filter-gpu", "a100-sxm4-40gb")
    page.wait_for_selector(".state-empty")
    assert page.locator(f'a[href="#/plans/{plan_id}"]').count() == 0
    page.select_option("#filter-gpu", "h100-sxm5-80gb")
    page.wait_for_selector(f'a[href="#/plans/{plan_id}"]')
    page.fill("#filter-text", "no-such-plan-anywhere")
    assert page.is_hidden(f'a[href="#/plans/{plan_id}"]')
    tab.assert_clean()


def test_infeasible_request_says_what_to_change(tab, artifacts_dir):
    body = {
        "model": "llama3-405b",
        "cluster": {"gpu": "a100-sxm4-40gb", "num_nodes": 1, "gpus_per_node": 2},
        "training": {"global_batch_size": 8, "seq_len": 8192},
        "options": {"time_limit_s": 2},
    }
    r = httpx.post(f"{tab.base}/v1/plans", json=body, timeout=120)
    assert r.status_code in (200, 201), r.text
    inf = r.json()["response"]["infeasible"]
    assert r.json()["response"]["plans"] == [] and inf
    page = tab.goto(f"/plans/{r.json()['id']}")
    box = page.inner_text(".state-error[role=alert]")
    assert "No configuration fits" in box and inf["field"] in box and inf["suggestion"] in box
    tab.shot(artifacts_dir, "infeasible")
    tab.assert_clean()


def test_keyboard_reaches_the_form_with_a_visible_focus(tab):
    page = tab.goto("/new")
    # The skip link is the first stop and shows itself when focused.
    page.focus(".brand a")
    page.keyboard.press("Shift+Tab")
    assert page.evaluate("document.activeElement.className") == "skip-link"
    assert page.evaluate("document.activeElement.getBoundingClientRect().left") >= 0
    page.keyboard.press("Enter")
    # From the top of the page, Tab reaches the first form control, and the focus is drawn.
    reached = []
    for _ in range(20):
        page.keyboard.press("Tab")
        reached.append(page.evaluate("document.activeElement.id || document.activeElement.textContent.trim()"))
        if reached[-1] == "f-model":
            break
    assert reached[-1] == "f-model", reached
    assert page.evaluate("getComputedStyle(document.activeElement).outlineStyle") not in ("", "none")
    tab.assert_clean()


def test_schedule_choices_are_the_schedules_the_planner_prices(tab, server):
    """The form offers exactly the priced schedules of GET /v1/catalog/schedules (a runtime-only
    zero-bubble schedule would be refused by the planner with 422)."""
    from planner.specs.config import PRICED_SCHEDULES

    catalog = httpx.get(f"{server}/v1/catalog/schedules", timeout=30).json()
    priced = [s["id"] for s in catalog if s["priced"]]
    assert priced == list(PRICED_SCHEDULES) and any(not s["priced"] for s in catalog)
    page = tab.goto("/new")
    offered = page.eval_on_selector_all("#f-parallel-schedule option", "els => els.map(e => e.value)")
    assert offered == ["", *priced]
    tab.assert_clean()


def test_unknown_plan_is_an_error_state(tab):
    page = tab.goto("/plans/does-not-exist")
    assert page.locator(".state-error[role=alert]").count() == 1
    assert "404" in page.inner_text(".state-error")
    tab.assert_clean(allowed_statuses=(404,))


def _tiny_profiles() -> tuple[dict, dict]:
    """The planner's analytic profile of tiny-llama, and a 'measured' one that differs from it by known
    factors (FLOPs ×1.1, parameters ×1, activations ×1.25) and carries timings."""
    from planner.specs.catalog import MODELS
    from planner.workload.analytic import analytic_profile

    analytic = analytic_profile(MODELS["tiny-llama"], micro_batch_sizes=[1, 2], seq_len=128, tps=[1, 2]).model_dump(
        mode="json"
    )
    measured = json.loads(json.dumps(analytic))
    measured.update(source="measured", device="cpu", torch_version="2.13.0")
    for layer in measured["layers"]:
        layer["fwd_flops"] *= 1.1
        layer["bwd_flops"] *= 1.1
        layer["saved_activation_bytes"]["none"] = int(layer["saved_activation_bytes"]["none"] * 1.25)
        layer["fwd_time_s"] = layer["fwd_flops"] / 1e11
        layer["bwd_time_s"] = layer["bwd_flops"] / 1e11
    return analytic, measured


def test_profile_page_charts_measured_against_analytic(tab, artifacts_dir):
    analytic, measured = _tiny_profiles()
    post = lambda body: httpx.post(f"{tab.base}/v1/profiles", json=body, timeout=30)  # noqa: E731
    assert post(analytic).status_code == 201
    stored = post(measured)
    assert stored.status_code == 201, stored.text
    page = tab.goto(f"/profiles/{stored.json()['id']}")
    shapes = {(lp["micro_batch_size"], lp["seq_len"], lp["tp"], lp["sequence_parallel"]) for lp in measured["layers"]}
    assert page.locator("#profile-point option").count() == len(shapes)
    for option in page.eval_on_selector_all("#profile-point option", "os => os.map(o => o.value)"):
        page.select_option("#profile-point", option)
        for sid in ("flops", "time", "params", "activations"):
            assert _svg_rects_with_area(page, f"#{sid} rect.bar") >= 3, (option, sid)
        # Like is compared with like: the known factors come back, shape by shape.
        rows = page.eval_on_selector_all(
            "#measured-vs-analytic tbody tr",
            "trs => trs.map(t => [...t.querySelectorAll('td')].map(td => td.textContent))",
        )
        mbs, seq, tp, sp = option.split("|")
        expected = []
        for kind in ("embedding", "transformer_block", "lm_head"):
            a = next(
                lp
                for lp in analytic["layers"]
                if (lp["kind"], lp["micro_batch_size"], lp["seq_len"], lp["tp"], lp["sequence_parallel"])
                == (kind, int(mbs), int(seq), int(tp), sp == "1")
            )
            ratio = lambda base, factor: f"{factor:.3f}" if base else "—"  # noqa: E731  (no analytic value: no ratio)
            expected.append(
                [
                    ratio(a["fwd_flops"], 1.1),
                    ratio(a["bwd_flops"], 1.1),
                    ratio(a["param_count"], 1.0),
                    ratio(a["saved_activation_bytes"]["none"], 1.25),
                ]
            )
        assert [r[:3] for r in rows] == [e[:3] for e in expected], option
        assert all(r[3] == e[3] == "—" or abs(float(r[3]) - 1.25) < 0.002 for r, e in zip(rows, expected)), (
            option,
            rows,
        )
    tab.shot(artifacts_dir, "profile")
    page = tab.goto("/profiles")
    assert page.locator("table.list tbody tr").count() >= 2
    tab.assert_clean()


RUN_REPORT = {
    "model": "tiny-llama",
    "parallel": {"tp": 2, "pp": 2, "dp": 1, "micro_batch_size": 2, "stage_layers": [4, 4]},
    "world_size": 4,
    "device": "cpu",
    "torch_version": "2.13.0",
    "steps": 20,
    "global_batch_size": 8,
    "seq_len": 128,
    "losses": [5.5 - 0.2 * i for i in range(20)],
    "step_times_s": [0.9] + [0.2] * 19,
    "measured_step_time_s": 0.2,
    "tokens_per_s": 8 * 128 / 0.2,
    "peak_memory_gib_per_rank": [0.3, 0.3, 0.25, 0.25],
}


@pytest.mark.parametrize("kind", ["cpu-run", "gpu-run"])
def test_run_report_shows_predicted_against_measured_on_the_same_hardware(tab, artifacts_dir, kind):
    """A CPU run is compared with the plan re-priced for the CPU; the plan's GPU prediction is shown,
    labelled with its GPU and as not comparable, never drawn against the CPU measurement. A run on the
    plan's GPU is compared with the plan's own prediction."""
    if kind == "cpu-run":
        report = RUN_REPORT | {
            "predicted_step_time_s": 1.8e-05,
            "predicted_peak_memory_gib": 0.28,
            "predicted_on": "h100-sxm5-80gb",
            "local_prediction": {
                "predicted_on": "cpu",
                "basis": "cpu layer profile measured after the run",
                "step_time_s": 0.25,
                "peak_memory_gib": 0.3,
                "step_time_ratio": 1.25,
                "memory_ratio": 1.0,
            },
        }
    else:
        report = RUN_REPORT | {
            "device": "NVIDIA H100 80GB HBM3",
            "predicted_on": "h100-sxm5-80gb",
            "predicted_step_time_s": 0.16,
            "predicted_peak_memory_gib": 0.28,
            "step_time_ratio": 0.8,
            "memory_ratio": 0.93,
        }
    r = httpx.post(f"{tab.base}/v1/runs", json=report, timeout=30)
    assert r.status_code == 201, r.text
    page = tab.goto(f"/runs/{r.json()['id']}")
    assert _svg_rects_with_area(page, "#run-time rect.bar") == 2
    assert _svg_rects_with_area(page, "#run-memory rect.bar") == 4
    assert page.locator("#run-loss path.series-line").count() == 1
    assert page.locator("#run-memory line.ref-line").count() == 1
    stats = " ".join(page.inner_text(".stats").split())
    time_section = " ".join(page.inner_text("#run-time").split())
    if kind == "cpu-run":
        assert "Predicted for cpu (this run's hardware)" in stats and "1.25" in stats
        assert "Plan's prediction for h100-sxm5-80gb" in stats and "not comparable with a run on cpu" in stats
        assert "measured vs. predicted for cpu" in time_section and "h100" not in time_section.split("The plan")[0]
        assert "cpu layer profile" in page.inner_text("#run-basis")
    else:
        assert "Plan's prediction for h100-sxm5-80gb (this run's hardware)" in stats and "0.80" in stats
        assert "measured vs. predicted for h100-sxm5-80gb" in time_section
    tab.shot(artifacts_dir, f"run-{kind}")
    assert page.locator("table.list").count() == 0
    page = tab.goto("/runs")
    assert page.locator(f'a[href="#/runs/{r.json()["id"]}"]').count() == 1
    tab.assert_clean()


def test_token_field_unlocks_a_protected_server(browser, tmp_path, artifacts_dir):
    if os.environ.get("MESHPLAN_DASHBOARD_URL"):
        pytest.skip("needs a server of its own")
    proc, base = _start_server(tmp_path, token=TOKEN)
    tab = Page(browser, base)
    try:
        page = tab.goto("/new")
        assert "401" in page.inner_text(".state-error") and "API token" in page.inner_text(".state-error")
        page.click(".token summary")
        page.fill("#token-input", TOKEN)
        page.click("#token-form button[type=submit]")
        page.wait_for_selector("#f-model")
        page = tab.goto("/plans")
        assert "No plans yet" in page.inner_text(".state-empty")  # fresh database: the empty state
        tab.shot(artifacts_dir, "empty-plans")
        tab.assert_clean(allowed_statuses=(401,))
    finally:
        tab.close()
        _stop(proc)


def test_plan_of_an_older_cost_model_is_marked_and_replanned_in_one_click(tab, server, tmp_path_factory, artifacts_dir):
    """A stored plan made before the current cost model (here: a row as meshplan wrote it before schema 2,
    cost-model version unknown) is marked in the list and on its page; the button POSTs its request
    again and lands on a current plan."""
    import sqlite3

    from tests.test_api_versions import OLD_REQUEST, insert_old_plan

    if os.environ.get("MESHPLAN_DASHBOARD_URL"):
        pytest.skip("writes a row into the server's own SQLite file")
    port = server.rsplit(":", 1)[1]
    [db] = list(tmp_path_factory.getbasetemp().rglob(f"dash-{port}.db"))  # the module's server's file
    old_id = insert_old_plan(f"sqlite:///{db}")
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT cost_model_version FROM plans WHERE id = ?", (old_id,)).fetchone() == (None,)

    page = tab.goto("/plans")
    row = page.locator("tr", has=page.locator(f'a[href="#/plans/{old_id}"]'))
    assert row.locator(".badge.stale").count() == 1
    assert page.locator("tbody tr.stale").count() == 1  # the only stale one

    page = tab.goto(f"/plans/{old_id}")
    notice = page.inner_text("#stale-notice")
    assert "older cost model" in notice and "before versioning" in notice
    page.wait_for_selector("#schedule .block")  # the old plan still draws
    tab.shot(artifacts_dir, "plan-stale")
    page.click("#replan-current")
    page.wait_for_url(re.compile(r".*#/plans/(?!" + old_id + r")[0-9a-f]{32}$"), timeout=60_000)
    page.wait_for_selector("#alternatives-table")
    new_id = page.url.rsplit("/", 1)[-1]
    assert page.locator("#stale-notice").count() == 0
    stored = httpx.get(f"{server}/v1/plans/{new_id}", timeout=30).json()
    assert (
        not stored["stale"]
        and stored["request"] == httpx.get(f"{server}/v1/plans/{old_id}", timeout=30).json()["request"]
    )
    assert OLD_REQUEST["cluster"].items() <= stored["request"]["cluster"].items()
    tab.assert_clean()


def test_form_defaults_are_the_readme_quick_start_and_the_cli_defaults(tab):
    """The form as it opens is the README's quick-start case (its first `meshplan plan` command and
    examples/request.json), and its search settings are the request's own defaults (as the CLI's)."""
    from test_readme import quick_start_flags

    from planner.specs import PlanRequest, SearchOptions, TrainingSpec

    flags = quick_start_flags()
    page = tab.goto("/new")
    page.wait_for_selector("#f-model")
    form = {
        flag: page.input_value(sel)
        for flag, sel in [
            ("--model", "#f-model"),
            ("--gpu", "#f-cluster-gpu"),
            ("--nodes", "#f-cluster-num_nodes"),
            ("--gpus-per-node", "#f-cluster-gpus_per_node"),
            ("--global-batch-size", "#f-training-global_batch_size"),
            ("--seq-len", "#f-training-seq_len"),
        ]
    }
    assert form == flags
    assert page.input_value("#f-training-precision") == TrainingSpec.model_fields["precision"].default
    assert int(page.input_value("#f-top_k")) == PlanRequest.model_fields["top_k"].default
    assert float(page.input_value("#f-options-time_limit_s")) == SearchOptions.model_fields["time_limit_s"].default
    tab.assert_clean()


# ---- training stacks and calibrations (issue 11 §2, §4) ------------------------------------


def _store_calibration(base: str, **changes: object) -> dict:
    body = {
        "gpu": "h100-sxm5-80gb",
        "stack": "meshplan",
        "residuals": {"compute_scale": 1.3, "memory_scale": 1.2, "kernel_overhead_us": 20.0, "comm_scale": 1.5},
        "runs": [
            {
                "label": "tiny-llama tp2 pp2",
                "measured_step_time_s": 0.2,
                "predicted_before_s": 0.15,
                "predicted_after_s": 0.19,
            }
        ],
        "in_sample_mape": 0.05,
        "cross_validated_mape": 0.09,
        **changes,
    }
    r = httpx.post(f"{base}/v1/calibrations", json=body, timeout=30)
    assert r.status_code in (200, 201), r.text
    return r.json()


def test_form_picks_the_training_stack_and_a_stored_calibration(tab, server, artifacts_dir):
    """The form offers the stacks of GET /v1/catalog/stacks (meshplan first chosen) and the stored
    calibrations; the plan made with them names both, its explanation says which stack priced it, and
    each export that runs another stack is flagged (and the download repeats the server's warning)."""
    cal = _store_calibration(server, stack="megatron", notes=["dashboard form"])
    stacks = [x["id"] for x in httpx.get(f"{server}/v1/catalog/stacks", timeout=30).json()]
    page = tab.goto("/new")
    assert page.eval_on_selector_all("#f-training-stack option", "os => os.map(o => o.value)") == stacks
    assert page.input_value("#f-training-stack") == "meshplan"
    assert page.input_value("#f-calibration_id") == ""  # none unless chosen
    offered = page.eval_on_selector_all("#f-calibration_id option", "os => os.map(o => [o.value, o.textContent])")
    [label] = [text for value, text in offered if value == cal["id"]]
    assert "h100-sxm5-80gb" in label and "megatron" in label and "9.0 %" in label
    page.select_option("#f-model", "tiny-gpt")
    page.fill("#f-cluster-num_nodes", "1")
    page.fill("#f-training-global_batch_size", "32")
    page.fill("#f-training-seq_len", "128")
    page.fill("#f-options-time_limit_s", "5")
    page.select_option("#f-training-stack", "megatron")
    page.select_option("#f-calibration_id", cal["id"])
    page.click("#plan-submit")
    page.wait_for_url(re.compile(r".*#/plans/[^/?]+$"), timeout=120_000)
    page.wait_for_selector("#alternatives-table")
    plan_id = page.url.rsplit("/", 1)[-1]
    stored = httpx.get(f"{server}/v1/plans/{plan_id}", timeout=30).json()
    assert stored["request"]["training"]["stack"] == "megatron" and stored["request"]["calibration_id"] == cal["id"]

    priced = " ".join(page.inner_text("#priced-for").split())
    assert "Priced for the training stack megatron" in priced and cal["id"] in priced
    assert "priced for the training stack megatron" in page.inner_text("#why")  # the planner's explanation

    formats = httpx.get(f"{server}/v1/catalog/export-formats", timeout=30).json()
    flagged = page.eval_on_selector_all(
        "#exports [data-format-warning]", "els => els.map(e => e.dataset.formatWarning)"
    )
    assert sorted(flagged) == sorted(f["id"] for f in formats if f["stack"] != "megatron") and "megatron" not in flagged
    with page.expect_download():
        page.click('#exports a[data-format="torchrun"]')
    page.wait_for_selector("#exports .state-warning.stack-warning")
    header = httpx.get(f"{server}/v1/plans/{plan_id}/export/torchrun", timeout=30).headers["x-meshplan-stack-warning"]
    assert page.inner_text("#exports .state-warning.stack-warning") == f"Warning: {header}"
    with page.expect_download():
        page.click('#exports a[data-format="megatron"]')
    page.wait_for_selector("#exports .note:has-text('Downloaded')")
    assert page.locator("#exports .state-warning").count() == 0  # priced for the stack it runs
    tab.shot(artifacts_dir, "plan-stack")

    # A what-if is priced like the plan: same stack, same calibration.
    posted: list[dict] = []
    page.on(
        "request",
        lambda q: (
            posted.append(json.loads(q.post_data)) if q.method == "POST" and q.url.endswith("/v1/estimates") else None
        ),
    )
    page.select_option("#whatif-knob", "recompute")
    other = next(
        x for x in ("full", "selective", "none") if x != stored["response"]["plans"][0]["parallel"]["recompute"]
    )
    page.select_option("#whatif-value", other)
    page.click("#whatif button[type=submit]")
    page.wait_for_selector("#whatif .whatif-table")
    assert [(b["training"]["stack"], b.get("calibration_id")) for b in posted] == [("megatron", cal["id"])]

    # Editing the plan keeps its stack and calibration.
    page.click("text=Edit and re-plan")
    page.wait_for_selector("#f-model")
    page.wait_for_function("!document.querySelector('main .state-loading')")
    assert (page.input_value("#f-training-stack"), page.input_value("#f-calibration_id")) == ("megatron", cal["id"])
    tab.assert_clean()


def _estimate(request: dict, calibration: dict | None = None) -> float:
    from planner.api import estimate_plan
    from planner.specs import PlanRequest

    return estimate_plan(PlanRequest.model_validate({**request, "calibration": calibration})).estimate.step_time_s


@pytest.mark.parametrize("kind", ["gpu-run", "cpu-run"])
def test_run_page_shows_predicted_against_measured_before_and_after_calibration(tab, server, artifacts_dir, kind):
    """The run page re-prices the run's configuration with the built-in constants and with a chosen
    stored calibration (POST /v1/estimates, calibration_id): its figures are planner.api.estimate_plan
    of the same request without and with the calibration inline, set against the measurement only on the
    hardware that ran."""
    cal = _store_calibration(server, notes=[f"run page {kind}"])
    report = RUN_REPORT | {"predicted_on": "h100-sxm5-80gb", "predicted_step_time_s": 0.16}
    if kind == "gpu-run":
        report |= {"device": "NVIDIA H100 80GB HBM3", "step_time_ratio": 0.8}
    r = httpx.post(f"{server}/v1/runs", json=report, timeout=30)
    assert r.status_code == 201, r.text
    run = httpx.get(f"{server}/v1/runs/{r.json()['id']}", timeout=30).json()["report"]
    posted: list[dict] = []
    tab.page.on(
        "request",
        lambda q: (
            posted.append(json.loads(q.post_data)) if q.method == "POST" and q.url.endswith("/v1/estimates") else None
        ),
    )
    page = tab.goto(f"/runs/{r.json()['id']}")
    page.select_option("#cal-pick", cal["id"])
    assert (page.input_value("#cal-gpu"), page.input_value("#cal-nodes"), page.input_value("#cal-gpn")) == (
        "h100-sxm5-80gb",
        "1",
        "4",
    )
    page.click("#calibrate-submit")
    page.wait_for_selector("#calibration-table")

    request = {
        "model": "tiny-llama",
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "gpus_per_node": 4},
        "training": {"global_batch_size": 8, "seq_len": 128, "precision": "bf16", "stack": "meshplan"},
        "parallel": run["parallel"],
        "options": {"allow_tp_across_nodes": True},
    }
    assert sorted(posted, key=lambda b: "calibration_id" in b) == [request, {**request, "calibration_id": cal["id"]}]
    shown = dict(
        page.eval_on_selector_all(
            "#calibration-table tbody tr",
            "trs => trs.map(t => [t.dataset.row, +t.querySelector('td').dataset.seconds])",
        )
    )
    before, after = _estimate(request), _estimate(request, cal)
    assert shown == pytest.approx({"measured": 0.2, "plan": 0.16, "before": before, "after": after}, rel=1e-12)
    ratios = dict(
        page.eval_on_selector_all(
            "#calibration-table tbody tr",
            "trs => trs.map(t => [t.dataset.row, t.querySelectorAll('td')[1].textContent])",
        )
    )
    if kind == "gpu-run":
        assert 1e-4 < before / 0.2 < 0.1  # an H100 estimate of a tiny model far below the made-up measurement

        # the page's ratio format (runs.js ratioText): two decimals from 0.1 up, three significant digits below
        def ratio(x: float) -> str:
            return f"{x:.2f}" if x >= 0.1 else f"{x:.3g}"

        assert (ratios["before"], ratios["after"], ratios["plan"]) == (ratio(before / 0.2), ratio(after / 0.2), "0.80")
        assert _svg_rects_with_area(page, "#run-calibration rect.bar") == 3
        assert page.locator("#calibration-not-comparable").count() == 0
    else:  # a CPU run is never set against an H100 estimate
        assert ratios["before"] == ratios["after"] == ratios["plan"] == "—"
        assert _svg_rects_with_area(page, "#run-calibration rect.bar") == 2
        assert "CPU" in page.inner_text("#calibration-not-comparable")
    # The runs the calibration was fitted on, as it records them; this run (same measured step time) marked.
    fit = page.eval_on_selector_all(
        "#calibration-fit tbody tr",
        "trs => trs.map(t => [t.dataset.thisRun || '', ...[...t.querySelectorAll('td')].map(td => td.textContent)])",
    )
    [recorded] = cal["runs"]
    assert recorded["measured_step_time_s"] == run["measured_step_time_s"]
    assert fit == [["true", "200.0 ms", "150.0 ms", "−25.0 %", "190.0 ms", "−5.0 %"]]
    assert "9.0 %" in page.inner_text("#calibration-fit")  # its cross-validated error
    page.locator("#run-calibration").screenshot(path=str(artifacts_dir / f"dashboard-run-calibration-{kind}.png"))
    tab.assert_clean()


# ---- FP8, context parallelism, MoE models and Hugging Face configs (issues 23, 24) ----------------

HF_CONFIGS = ROOT / "tests" / "data" / "hf_configs"


def _small_form(page, model: str = "tiny-gpt") -> None:
    """A request the planner answers in well under a second: a tiny model on one node."""
    if model:
        page.select_option("#f-model", model)
    page.fill("#f-cluster-num_nodes", "1")
    page.fill("#f-training-global_batch_size", "32")
    page.fill("#f-training-seq_len", "128")
    page.fill("#f-options-time_limit_s", "5")


def _submit_expecting_error(page, field: str) -> str:
    page.click("#plan-submit")
    control = f'[data-field="{field}"]'
    page.wait_for_selector(f'{control}[aria-invalid="true"]')
    err_id = page.get_attribute(control, "id") + "-err"
    assert page.is_visible(f"#{err_id}")
    return page.inner_text(f"#{err_id}")


def test_fp8_recipe_picker_offers_the_chosen_stacks_recipes(tab, server, artifacts_dir):
    """fp8 in the precision picker opens a recipe picker with the recipes of the chosen stack (GET
    /v1/catalog/stacks fp8_recipes); a stack without FP8 is the server's problem next to the precision; an
    FP8 plan names its recipe in its summary."""
    stacks = {x["id"]: x for x in httpx.get(f"{server}/v1/catalog/stacks", timeout=30).json()}
    page = tab.goto("/new")
    assert page.is_hidden("#f-training-fp8_recipe")
    page.select_option("#f-training-precision", "fp8")
    assert page.is_visible("#f-training-fp8_recipe")
    for sid, stack in stacks.items():
        page.select_option("#f-training-stack", sid)
        offered = page.eval_on_selector_all("#f-training-fp8_recipe option", "os => os.map(o => o.value)")
        assert offered == ["", *stack["fp8_recipes"]], sid
        comms = page.eval_on_selector_all("#f-parallel-cp_comm option", "os => os.map(o => o.value)")
        assert comms == ["", *stack["cp_comms"]], sid
    _small_form(page)
    page.select_option("#f-training-stack", "deepspeed")  # runs no FP8: refused, next to the precision
    assert "FP8" in _submit_expecting_error(page, "training.precision")
    tab.shot(artifacts_dir, "fp8-refused")
    page.select_option("#f-training-stack", "megatron")
    page.select_option("#f-training-fp8_recipe", "current")
    page.click("#plan-submit")
    page.wait_for_url(re.compile(r".*#/plans/[^/?]+$"), timeout=120_000)
    page.wait_for_selector("#alternatives-table")
    stored = httpx.get(f"{server}/v1/plans/{page.url.rsplit('/', 1)[-1]}", timeout=30).json()
    assert stored["request"]["training"]["precision"] == "fp8"
    assert stored["request"]["training"]["fp8_recipe"] == "current"
    assert "fp8 (current)" in page.inner_text(".page-head") and "fp8 (current)" in page.inner_text("#chosen")
    page.click("text=Edit and re-plan")  # the form comes back with the recipe
    page.wait_for_selector("#f-model")
    page.wait_for_function("!document.querySelector('main .state-loading')")
    assert (page.input_value("#f-training-precision"), page.input_value("#f-training-fp8_recipe")) == ("fp8", "current")
    tab.assert_clean(allowed_statuses=(422,))


def test_a_pinned_cp_is_the_servers_problem_next_to_the_field(tab, llama_plan, artifacts_dir):
    """A cp that does not divide the GPUs, pinned in the form or in a what-if estimate, shows the problem (field
    parallel.cp) under that field (cp itself is priced since cost model 14)."""
    page = tab.goto("/new")
    _small_form(page, "tiny-llama")
    page.fill("#f-parallel-cp", "3")
    assert "does not divide" in _submit_expecting_error(page, "parallel.cp")
    tab.shot(artifacts_dir, "cp-refused")

    plan_id, stored = llama_plan
    par = stored["response"]["plans"][0]["parallel"]
    page = tab.goto(f"/plans/{plan_id}")
    page.select_option("#whatif-knob", "cp")
    page.fill("#whatif-value", "3")
    page.click("#whatif button[type=submit]")
    page.wait_for_selector('#whatif-value[aria-invalid="true"]')
    message = page.inner_text("#whatif-value-err")
    assert "does not divide" in message  # said before sending, or the server's words
    assert par["dp"] % 3 != 0
    tab.assert_clean(allowed_statuses=(422,))


def test_model_picker_lists_moe_models_with_total_and_active_parameters(tab, server, artifacts_dir):
    catalog = httpx.get(f"{server}/v1/catalog/models", timeout=30).json()
    page = tab.goto("/new")
    offered = dict(page.eval_on_selector_all("#f-model option", "os => os.map(o => [o.value, o.textContent])"))
    moe = [m for m in catalog if m.get("moe")]
    assert len(moe) >= 5
    for m in moe:
        label = offered[m["name"]]
        assert f"{m['moe']['num_experts']} experts" in label and f"top-{m['moe']['top_k']}" in label
        assert "total" in label and "active" in label
    assert "671" in offered["deepseek-v3"] and "37." in offered["deepseek-v3"]  # ≈671 B total, 37.6 B active
    page.select_option("#f-model", "mixtral-8x7b")
    assert page.is_visible("#moe-note")
    _small_form(page, "")
    # a stack without a MoE block (deepspeed): the server's problem, next to the stack; the default stack (the
    # bundled runtime) runs MoE since issue 23's runtime part, and is among the stacks the message names
    page.select_option("#f-training-stack", "deepspeed")
    message = _submit_expecting_error(page, "training.stack")
    assert "mixture-of-experts" in message and "megatron" in message and "meshplan" in message
    tab.shot(artifacts_dir, "moe-refused")
    tab.assert_clean(allowed_statuses=(422,))


def test_hugging_face_config_json_is_a_model(tab, server, artifacts_dir):
    """Upload a real config.json (Llama 3.2 3B Instruct) as the model: the request carries it as hf_config, the
    plan is of the model it describes; a config of an unsupported architecture is refused next to the box."""
    from planner.specs.hf import from_hf_config

    path = HF_CONFIGS / "llama-3.2-3b-instruct.json"
    page = tab.goto("/new")
    page.select_option("#f-model", "__hf__")
    page.fill("#f-model_hf", '{"model_type": "bert", "architectures": ["BertModel"]}')
    _small_form(page, "")
    assert "bert" in _submit_expecting_error(page, "model_hf")
    page.set_input_files("#f-model_hf_file", str(path))
    page.wait_for_function("document.querySelector('#f-model_hf').value.includes('llama')")
    assert page.input_value("#f-model_hf_name") == "llama-3.2-3b-instruct"
    posted: list[dict] = []
    page.on("request", lambda q: posted.append(json.loads(q.post_data)) if q.method == "POST" else None)
    page.click("#plan-submit")
    page.wait_for_url(re.compile(r".*#/plans/[^/?]+$"), timeout=120_000)
    page.wait_for_selector("#alternatives-table")
    assert posted[-1]["model"] == {"hf_config": json.loads(path.read_text()), "name": "llama-3.2-3b-instruct"}
    assert "llama-3.2-3b-instruct" in page.inner_text("h1")
    stored = httpx.get(f"{server}/v1/plans/{page.url.rsplit('/', 1)[-1]}", timeout=30).json()
    expected = from_hf_config(json.loads(path.read_text()), "llama-3.2-3b-instruct").model_dump(mode="json")
    assert stored["request"]["model"] == expected
    tab.shot(artifacts_dir, "hf-config-plan")
    tab.assert_clean(allowed_statuses=(422,))


def test_a_cp_plan_file_opens_with_the_cp_axis_drawn(tab, artifacts_dir):
    """A plan with cp > 1 (written by hand: the planner does not make one yet) opens in the mesh view with a
    dashed line per CP group and every GPU's cp rank; the time chart draws a term it has no words for."""
    from runtime.testing import make_plan

    plan = make_plan("tiny-llama", tp=2, cp=2, dp=2, pp=2, seq_len=64).model_dump(mode="json")
    plan["cluster"] |= {"num_nodes": 2, "gpus_per_node": 8}
    plan["estimate"]["breakdown"] |= {"compute_s": 0.5, "cp_comm_s": 0.1, "future_term_s": 0.05}
    mesh = MeshLayout.model_validate(plan["mesh"])
    page = tab.goto("/open")
    page.fill("#open-plan-json", json.dumps(plan))
    page.click("#open-plan-submit")
    page.wait_for_selector("#mesh .cp-link", state="attached")
    groups = mesh_groups(mesh, "cp")
    assert page.locator("#mesh .cp-link").count() == len(groups)  # each group on one node here
    cp_of = {r: i for grp in groups for i, r in enumerate(grp)}
    drawn = page.eval_on_selector_all("#mesh rect.gpu", "els => els.map(e => +e.dataset.cp)")
    assert drawn == [cp_of[r] for r in range(16)]
    assert "cp 2 (p2p)" in page.inner_text("#opened .config-line")
    page.click("#time summary")
    numbers = page.inner_text("#time")
    assert "context-parallel comm." in numbers and "future term" in numbers
    tab.shot(artifacts_dir, "open-cp-plan")
    page.fill("#open-plan-json", '{"parallel": {}}')
    page.click("#open-plan-submit")
    assert "cluster.num_nodes" in page.inner_text(".opened-plan .state-error")
    tab.assert_clean()


def _expert_ranks(par: dict) -> tuple[list[int], list[int]]:
    """Each rank's expert-parallel rank and expert-data-parallel replica, as Megatron-core lays out expert layers
    (its RankGenerator for experts: order tp-ep-dp-pp with tp = etp, over the tp · cp · dp ranks of each pipeline
    stage), written here from that rule alone."""
    stage = par["tp"] * par.get("cp", 1) * par["dp"]
    etp, ep = par["etp"], par["ep"]
    ep_of, edp_of = [], []
    for r in range(stage * par["pp"]):
        j = r % stage
        ep_of.append((j // etp) % ep)
        edp_of.append(j // (etp * ep))
    return ep_of, edp_of


def _qwen3_moe_form(page) -> None:
    """The form for Qwen3-30B-A3B's real config.json on Megatron, 2 × 8 H100, 512 × 4096 tokens."""
    page.select_option("#f-model", "__hf__")
    page.set_input_files("#f-model_hf_file", str(HF_CONFIGS / "qwen3-30b-a3b.json"))
    page.wait_for_function("document.querySelector('#f-model_hf').value.includes('qwen3_moe')")
    page.select_option("#f-training-stack", "megatron")
    page.fill("#f-cluster-num_nodes", "2")
    page.fill("#f-cluster-gpus_per_node", "8")
    page.fill("#f-training-global_batch_size", "512")
    page.fill("#f-training-seq_len", "4096")
    page.fill("#f-options-time_limit_s", "10")


def test_moe_ep_pin_and_what_if(tab, server, llama_plan, artifacts_dir):
    """EP in the form and the what-if: an ep that does not divide the 128 experts is the server's parallel.ep problem
    under the ep field; ep 4 pinned plans with it; the what-if evaluates ep 2 exactly (its configuration and the
    all-to-all side by side); a dense plan offers no ep knob."""
    page = tab.goto("/new")
    _qwen3_moe_form(page)
    page.fill("#f-parallel-ep", "3")
    assert "does not divide" in _submit_expecting_error(page, "parallel.ep")
    page.fill("#f-parallel-ep", "4")
    page.click("#plan-submit")
    page.wait_for_url(re.compile(r".*#/plans/[^/?]+$"), timeout=120_000)
    page.wait_for_selector("#whatif-knob")
    stored = httpx.get(f"{server}/v1/plans/{page.url.rsplit('/', 1)[-1]}", timeout=30).json()
    assert stored["request"]["parallel"]["ep"] == 4
    assert {p["parallel"]["ep"] for p in stored["response"]["plans"]} == {4}
    assert "ep 4" in page.inner_text("#chosen .config-line")
    page.select_option("#whatif-knob", "ep")
    page.fill("#whatif-value", "2")
    page.click("#whatif button[type=submit]")
    page.wait_for_selector("#whatif .whatif-table")
    body = page.inner_text("#whatif .whatif-table")
    assert "ep 2" in body and "ep 4" in body
    assert "expert-parallel all-to-all" in page.inner_text("#whatif")
    tab.shot(artifacts_dir, "moe-what-if")
    plan_id, _ = llama_plan
    page = tab.goto(f"/plans/{plan_id}")
    page.wait_for_selector("#whatif-knob")
    assert "ep" not in page.eval_on_selector_all("#whatif-knob option", "os => os.map(o => o.value)")
    tab.assert_clean(allowed_statuses=(422,))


def test_moe_plan_from_a_config_json_shows_expert_groups_memory_and_the_all_to_all(tab, server, artifacts_dir):
    """Issue 23 through the form: a real Qwen3-30B-A3B config.json uploaded as the model, planned on Megatron over
    2 × 8 H100. The plan page shows EP in the configuration, the expert layers' EP groups in the mesh (each GPU's
    expert-parallel rank and expert-DP replica as Megatron-core's rank order gives them, one dotted line per EP group
    and node), the routed experts' weights, gradients and optimizer state in the memory chart (the API's figures, the
    stage totals unchanged) and the tokens' all-to-all in the time breakdown."""
    page = tab.goto("/new")
    _qwen3_moe_form(page)
    page.click("#plan-submit")
    page.wait_for_url(re.compile(r".*#/plans/[^/?]+$"), timeout=120_000)
    page.wait_for_selector("#mesh rect.gpu")
    stored = httpx.get(f"{server}/v1/plans/{page.url.rsplit('/', 1)[-1]}", timeout=30).json()
    best = stored["response"]["plans"][0]
    par, est = best["parallel"], best["estimate"]
    assert par["ep"] > 1  # the search expert-parallelises this model here (EP8 on 16 H100 today)

    # Configuration: EP named beside TP × PP × DP.
    assert f"ep {par['ep']}" in page.inner_text("#chosen .config-line")
    assert f"EP {par['ep']}" in page.inner_text("#chosen")

    # Mesh: every GPU's expert-parallel rank and expert-DP replica; one dotted line per EP group per node it spans.
    ep_of, edp_of = _expert_ranks(par)
    assert page.eval_on_selector_all("#mesh rect.gpu[data-ep]", "els => els.map(e => +e.dataset.ep)") == ep_of
    assert page.eval_on_selector_all("#mesh rect.gpu[data-edp]", "els => els.map(e => +e.dataset.edp)") == edp_of
    gpn = best["cluster"]["gpus_per_node"]
    groups: dict[tuple, set[int]] = {}
    for r in range(len(ep_of)):  # an EP group: one (stage, expert-DP replica, ETP rank)
        groups.setdefault((r // (len(ep_of) // par["pp"]), edp_of[r], r % par["etp"]), set()).add(r // gpn)
    assert page.locator("#mesh .ep-link").count() == sum(len(nodes) for nodes in groups.values())
    assert f"EP group of {par['ep']}" in page.inner_text("#mesh")

    # Memory: the routed experts' parts, as the API itemises them; the stacked parts add up to each stage's total.
    page.click("#memory summary")
    headers = page.eval_on_selector_all("#memory thead th", "els => els.map(e => e.textContent)")
    rows = page.eval_on_selector_all(
        "#memory tbody tr", "rs => rs.map(r => [...r.querySelectorAll('td')].map(td => parseFloat(td.textContent)))"
    )
    for key, label in (
        ("expert_weights_gib", "expert weights (routed experts)"),
        ("expert_gradients_gib", "expert gradients"),
        ("expert_optimizer_gib", "expert optimizer state"),
    ):
        col = headers.index(label) - 1  # the row header is a th
        assert [row[col] for row in rows] == pytest.approx([s[key] for s in est["memory_per_stage"]], abs=0.051)
        assert all(s[key] > 0 for s in est["memory_per_stage"])
    assert [row[-1] for row in rows] == pytest.approx([s["total_gib"] for s in est["memory_per_stage"]], abs=0.051)
    assert [sum(row[:-1]) for row in rows] == pytest.approx([row[-1] for row in rows], abs=0.5)

    # Time: the tokens' all-to-all is a drawn term with the API's seconds.
    page.click("#time summary")
    time_headers = page.eval_on_selector_all("#time thead th", "els => els.map(e => e.textContent)")
    col = time_headers.index("expert-parallel all-to-all") - 1
    first = page.eval_on_selector_all(
        "#time tbody tr:first-child td", "tds => tds.map(td => parseFloat(td.textContent.replace(/,/g, '')))"
    )
    assert est["breakdown"]["ep_comm_s"] > 0
    assert first[col] == pytest.approx(est["breakdown"]["ep_comm_s"] * 1000, rel=0.01)
    tab.shot(artifacts_dir, "moe-plan")
    tab.assert_clean()
