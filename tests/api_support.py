"""Shared pieces of the service tests: request bodies, an app on a temporary SQLite file, a real
uvicorn server in a subprocess, and the deliberately slow solver the concurrency tests use."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from api.app import create_app
from api.settings import Settings
from planner.specs import PlanRequest, PlanResponse, SolverInfo, version
from planner.specs.catalog import MODELS

ROOT = Path(__file__).resolve().parents[1]


def plan_request(**changes: object) -> dict:
    """A small request the real planner solves in well under a second: an 8-layer GPT on 8 GPUs."""
    body: dict = {
        "model": "tiny-gpt",
        "cluster": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "gpus_per_node": 8},
        "training": {"global_batch_size": 32, "seq_len": 128},
        "top_k": 2,
        "options": {"time_limit_s": 5.0, "num_workers": 1},
    }
    for path, value in changes.items():
        node = body
        keys = path.split("__")
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value
    return body


def profile_body(device: str = "cpu") -> dict:
    model = MODELS["tiny-gpt"].model_dump()
    layer = {
        "micro_batch_size": 1,
        "seq_len": 128,
        "tp": 1,
        "sequence_parallel": False,
        "fwd_flops": 1.0e6,
        "bwd_flops": 2.0e6,
        "param_count": 1000,
        "param_bytes": 2000,
        "saved_activation_bytes": {"none": 4096, "selective": 2048, "full": 256},
        "output_activation_bytes": 256,
        "fwd_time_s": 1e-4,
        "bwd_time_s": 2e-4,
    }
    kinds = ("embedding", "transformer_block", "lm_head")
    return {
        "model": model,
        "device": device,
        "dtype": "bf16",
        "source": "measured",
        "layers": [{"kind": k, **layer} for k in kinds],
    }


def run_report_body(step_time: float = 0.5) -> dict:
    return {
        "model": "tiny-gpt",
        "parallel": {"tp": 2, "pp": 2, "dp": 2, "micro_batch_size": 1, "stage_layers": [4, 4]},
        "world_size": 8,
        "device": "cpu",
        "torch_version": "2.13.0",
        "steps": 4,
        "global_batch_size": 8,
        "seq_len": 128,
        "losses": [5.5, 5.4, 5.3, 5.2],
        "step_times_s": [1.0, step_time, step_time, step_time],
        "measured_step_time_s": step_time,
        "tokens_per_s": 2048.0,
        "peak_memory_gib_per_rank": [0.1] * 8,
        "predicted_step_time_s": 0.4,
        "step_time_ratio": 0.8,
    }


def make_settings(tmp_path: Path, **overrides: object) -> Settings:
    return Settings(database_url=f"sqlite:///{tmp_path / 'meshplan.db'}", **overrides)


def make_app(tmp_path: Path, **overrides: object):
    return create_app(make_settings(tmp_path, **overrides))


class SlowSolver:
    """A stand-in for the planner that takes ``delay`` seconds per solve, or with a ``gate`` holds
    every solve until the test opens it (so a test can reason about "still solving" without timing
    anything), and records what it was asked (only for tests of concurrency and limits)."""

    def __init__(self, delay: float = 0.0, gate: threading.Event | None = None) -> None:
        self.delay = delay
        self.gate = gate
        self.requests: list[PlanRequest] = []
        self.lock = threading.Lock()

    def plan(self, request: PlanRequest) -> PlanResponse:
        with self.lock:
            self.requests.append(request)
        if self.gate is not None:
            self.gate.wait(300)
        time.sleep(self.delay)
        model = MODELS[request.model] if isinstance(request.model, str) else request.model
        return PlanResponse(
            cost_model_version=version.COST_MODEL_VERSION,
            model=model,
            cluster=request.cluster,
            training=request.training,
            plans=[],
            solver=SolverInfo(status="UNKNOWN", wall_time_s=self.delay),
        )

    def estimate_plan(self, request: PlanRequest):
        raise NotImplementedError

    def trace(self, plan):
        raise NotImplementedError


def wait_until(condition, what: str, timeout: float = 120.0) -> None:
    """Poll ``condition`` until it holds (a hang guard, not a timing claim: ``timeout`` is far above
    what any machine needs)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"still waiting after {timeout:g} s for {what}")
        time.sleep(0.01)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiveServer:
    """``meshplan serve`` (uvicorn) in a subprocess on 127.0.0.1 and a free port."""

    def __init__(self, tmp_path: Path, db: Path, *, database_url: str | None = None, **env: str) -> None:
        self.tmp_path = tmp_path
        self.db = db
        self.database_url = database_url or f"sqlite:///{db}"
        self.env = env
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.starts = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> LiveServer:
        self.port = free_port()
        self.starts += 1
        env = {k: v for k, v in os.environ.items() if not k.startswith("MESHPLAN_")}
        env.update(PYTHONPATH=str(ROOT), MESHPLAN_DATABASE_URL=self.database_url, **self.env)
        self.stdout = open(self.tmp_path / f"server{self.starts}.out", "wb")
        self.stderr = open(self.tmp_path / f"server{self.starts}.err", "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "api.cli", "serve", "--host", "127.0.0.1", "--port", str(self.port)],
            cwd=ROOT,
            env=env,
            stdout=self.stdout,
            stderr=self.stderr,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: {self.read_stderr()[-2000:]}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"server did not answer within {timeout} s: {self.read_stderr()[-2000:]}")

    def read_stdout(self) -> str:
        return (self.tmp_path / f"server{self.starts}.out").read_text()

    def read_stderr(self) -> str:
        return (self.tmp_path / f"server{self.starts}.err").read_text()

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        self.stdout.close()
        self.stderr.close()
