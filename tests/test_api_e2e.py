"""End to end against real `meshplan serve` (uvicorn) processes on 127.0.0.1: plans survive a
restart, a kill -9 during writes loses nothing that was acknowledged, logs are JSON lines, and the
Docker image's HEALTHCHECK command probes a live server."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading

import httpx
import pytest

from api.client import MeshplanClient
from tests.api_support import ROOT, LiveServer, plan_request, profile_body, run_report_body, wait_until

TOKEN = "e2e-token-0123456789abcdef"


def test_plan_survives_a_restart(tmp_path):
    server = LiveServer(tmp_path, tmp_path / "data" / "meshplan.db").start()
    try:
        assert f"dashboard at http://127.0.0.1:{server.port}/" in server.read_stdout()
        with MeshplanClient(server.url) as mc:
            stored = mc.plan(plan_request())
            assert not stored.cached and stored.response.plans
            assert mc.get_plan(stored.id) == stored.model_copy(update={"cached": True})
            trace = mc.trace(stored.id)
            assert any(e.get("ph") == "X" for e in trace["traceEvents"])
    finally:
        server.stop()
    logs = [json.loads(line) for line in server.read_stderr().splitlines() if line.strip()]
    assert logs and all({"ts", "level", "logger", "msg"} <= set(entry) for entry in logs)
    assert any(e.get("path") == "/v1/plans" and e.get("method") == "POST" and e.get("status") == 201 for e in logs)

    server.start()  # same SQLite file, new process
    try:
        with MeshplanClient(server.url) as mc:
            again = mc.get_plan(stored.id)
            assert again.response == stored.response and again.created_at == stored.created_at
            assert mc.plan(plan_request()).cached  # answered from the store, not re-solved
            assert mc.list_plans().total == 1
    finally:
        server.stop()


def test_kill_9_during_writes_loses_nothing_acknowledged(tmp_path):
    server = LiveServer(tmp_path, tmp_path / "meshplan.db", MESHPLAN_API_TOKEN=TOKEN).start()
    acknowledged: dict[str, list[str]] = {"runs": [], "profiles": [], "plans": []}
    stop = threading.Event()
    url = server.url
    headers = {"Authorization": f"Bearer {TOKEN}"}

    def writer(kind: str, make_body) -> None:
        i = 0
        with httpx.Client(base_url=url, headers=headers, timeout=30) as http:
            while not stop.is_set():
                i += 1
                try:
                    r = http.post(f"/v1/{kind}", json=make_body(i))
                except httpx.HTTPError:
                    return  # the server died mid-request: that write was never acknowledged
                if r.status_code in (200, 201):
                    acknowledged[kind].append(r.json()["id"])

    threads = [
        threading.Thread(target=writer, args=("runs", lambda i: run_report_body(step_time=0.1 + i * 1e-4))),
        threading.Thread(target=writer, args=("runs", lambda i: run_report_body(step_time=0.2 + i * 1e-4))),
        threading.Thread(target=writer, args=("profiles", lambda i: profile_body(device=f"cpu-{i}"))),
        threading.Thread(target=writer, args=("plans", lambda i: plan_request(training__global_batch_size=8 * i))),
    ]
    for t in threads:
        t.start()
    # Kill once enough writes were acknowledged, however slowly a loaded machine gets there.
    wait_until(lambda: len(acknowledged["runs"]) >= 100 and acknowledged["plans"], "100 runs and a plan acknowledged")
    server.stop(signal.SIGKILL)  # mid-stream: writers are still sending
    stop.set()
    for t in threads:
        t.join(30)
    assert len(acknowledged["runs"]) >= 100 and acknowledged["profiles"] and acknowledged["plans"]

    server.start()
    try:
        with MeshplanClient(server.url, token=TOKEN) as mc:
            for run_id in acknowledged["runs"]:
                mc.get_run(run_id)  # raises MeshplanAPIError (404) if lost
            for profile_id in acknowledged["profiles"]:
                mc.get_profile(profile_id)
            for plan_id in acknowledged["plans"]:
                assert mc.get_plan(plan_id).response.plans
            assert mc.list_runs(limit=1).total >= len(acknowledged["runs"])
    finally:
        server.stop()


def _dockerfile() -> str:
    return (ROOT / "Dockerfile").read_text()


def _healthcheck_command() -> str:
    match = re.search(r"^HEALTHCHECK[^\n]*\\\n\s*CMD (.+)$", _dockerfile(), re.M)
    assert match, "Dockerfile needs a HEALTHCHECK ... CMD line"
    return match.group(1)


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        (r"^FROM python:3\.11-slim", "slim Python 3.11 base"),
        (r"download\.pytorch\.org/whl/cpu", "CPU build of PyTorch"),
        (r"-c constraints\.txt", "versions pinned by constraints.txt"),
        (r"^USER (?!root\b|0\b)\S+", "runs as a non-root user"),
        (r'^ENTRYPOINT \["meshplan", "serve"\]', "meshplan serve is the entry point"),
        (r"^ENV MESHPLAN_DATABASE_URL=sqlite:////data/", "SQLite on the /data volume"),
    ],
)
def test_dockerfile_has(pattern, why):
    assert re.search(pattern, _dockerfile(), re.M), why


def test_several_workers_auth_and_the_docker_healthcheck(tmp_path):
    # The image's own probe command, run by sh as Docker does (with this interpreter as `python`).
    command = _healthcheck_command().replace("python ", f"{sys.executable} ", 1)

    def probe(port: int) -> int:
        return subprocess.run(
            ["sh", "-c", command], env={"MESHPLAN_PORT": str(port)}, capture_output=True, timeout=30
        ).returncode

    server = LiveServer(tmp_path, tmp_path / "meshplan.db", MESHPLAN_API_TOKEN=TOKEN, MESHPLAN_WORKERS="2").start()
    try:
        assert probe(server.port) == 0  # open without the token
        assert httpx.get(f"{server.url}/v1/plans").status_code == 401
        assert httpx.get(f"{server.url}/metrics").status_code == 200
        with MeshplanClient(server.url, token=TOKEN) as mc:
            ids = {mc.upload_run(run_report_body(step_time=0.1 * i)).id for i in range(1, 9)}
            assert {mc.get_run(i).id for i in ids} == ids  # whichever worker answers, one database
    finally:
        server.stop()
    assert probe(server.port) != 0  # nothing listening: unhealthy


@pytest.mark.parametrize(("variable", "value"), [("MESHPLAN_DATABASE_URL", "nonsense")])
def test_serve_refuses_a_bad_setting_with_exit_code_2(tmp_path, variable, value):
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), variable: value}
    done = subprocess.run(
        [sys.executable, "-m", "api.cli", "serve"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert variable in done.stderr and "Traceback" not in done.stderr
