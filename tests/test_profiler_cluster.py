"""`meshplan profile cluster`: the α-β least-squares fit, and a real 2-process gloo run under torchrun."""

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from planner.specs import LinkFit, NetworkProfile
from profiler.cluster import fit_alpha_beta

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "samples, alpha, beta",
    [
        # exact line: recovered exactly
        ([(1_000, 5e-6 + 1e-9 * 1_000), (10_000, 5e-6 + 1e-9 * 10_000), (100_000, 5e-6 + 1e-9 * 100_000)], 5e-6, 1e-9),
        # noisy line: ordinary least squares, checked against numpy's normal equations below
        ([(1_000, 2.1e-5), (4_000, 2.4e-5), (16_000, 3.9e-5), (64_000, 9.6e-5)], None, None),
        # would fit a negative intercept: refit through the origin, β = Σst / Σs²
        (
            [(1_000, 1e-7), (2_000, 3e-6), (4_000, 7e-6)],
            0.0,
            (1_000 * 1e-7 + 2_000 * 3e-6 + 4_000 * 7e-6) / (1e6 + 4e6 + 16e6),
        ),
        # would fit a negative slope: constant time
        ([(1_000, 3e-5), (2_000, 2e-5), (4_000, 1e-5 + 1e-6)], None, 0.0),
    ],
)
def test_fit_alpha_beta(samples, alpha, beta):
    import numpy as np

    a, b = fit_alpha_beta(samples)
    assert a >= 0 and b >= 0
    if alpha is None and beta is None:
        s = np.array([x for x, _ in samples], float)
        t = np.array([y for _, y in samples], float)
        X = np.stack([np.ones_like(s), s], axis=1)
        ref_alpha, ref_beta = np.linalg.solve(X.T @ X, X.T @ t)
        assert (a, b) == pytest.approx((ref_alpha, ref_beta), rel=1e-9)
    if alpha is not None:
        assert a == pytest.approx(alpha, rel=1e-9, abs=1e-15)
    if beta is not None:
        assert b == pytest.approx(beta, rel=1e-9, abs=1e-18)
    if beta == 0.0:
        assert a == pytest.approx(sum(t for _, t in samples) / len(samples))


def test_cluster_profile_two_processes_gloo(tmp_path):
    out = tmp_path / "net.json"
    sizes = [4096, 65536, 1048576]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path)}
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "api.cli",
            "profile",
            "cluster",
            "--nproc-per-node",
            "2",
            "--backend",
            "gloo",
            "--sizes",
            ",".join(map(str, sizes)),
            "--iters",
            "5",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    prof = NetworkProfile.model_validate_json(out.read_text())
    assert (prof.backend, prof.world_size, prof.nodes) == ("gloo", 2, 1)
    assert {f.collective for f in prof.links} == {"all_reduce", "all_gather", "reduce_scatter", "send_recv"}
    for f in prof.links:
        assert f.link == "intra_node" and f.group_size == 2
        assert [s for s, _ in f.samples] == sizes and all(t > 0 for _, t in f.samples)
        check_fit(f)


def check_fit(f: LinkFit) -> None:
    """What holds whatever the machine's load (timing figures are in bench/bench_profile.py): the fit
    is well-formed and is the fit of the measurements it carries, so the planner prices exactly them."""
    import numpy as np

    assert math.isfinite(f.alpha_s) and math.isfinite(f.beta_s_per_byte), f
    assert f.alpha_s >= 0 and f.beta_s_per_byte >= 0, f
    # Reproduces its own measurements: refitting the stored samples gives the stored (α, β) ...
    assert fit_alpha_beta(f.samples) == pytest.approx((f.alpha_s, f.beta_s_per_byte), rel=1e-12, abs=0), f
    s = np.array([x for x, _ in f.samples], float)
    t = np.array([y for _, y in f.samples], float)
    # ... which, off the α ≥ 0, β ≥ 0 boundary, is numpy's least-squares line through them.
    if f.alpha_s > 0 and f.beta_s_per_byte > 0:
        (ref_alpha, ref_beta), *_ = np.linalg.lstsq(np.stack([np.ones_like(s), s], axis=1), t, rcond=None)
        assert (f.alpha_s, f.beta_s_per_byte) == pytest.approx((ref_alpha, ref_beta), rel=1e-6), f
    # Predicted time is positive and never falls as the message grows.
    predicted = f.alpha_s + f.beta_s_per_byte * s
    assert all(predicted > 0) and all(np.diff(predicted) >= 0), f


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_cluster_profile_two_nodes_on_one_host(tmp_path):
    """Two torchrun launchers (--nnodes 2, 2 processes each) on this host: both link classes are
    measured, each with its own groups (intra: the 2 ranks of a node; inter: one rank per node)."""
    out = tmp_path / "net.json"
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path)}
    launchers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes",
                "2",
                "--nproc-per-node",
                "2",
                "--node-rank",
                str(node),
                "--master-addr",
                "127.0.0.1",
                "--master-port",
                str(port),
                "-m",
                "profiler.cluster",
                "--backend",
                "gloo",
                "--sizes",
                "4096,262144",
                "--iters",
                "3",
                "--out",
                str(out),
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for node in (0, 1)
    ]
    logs = [p.communicate(timeout=300)[0] for p in launchers]
    assert all(p.returncode == 0 for p in launchers), "\n".join(logs)
    prof = NetworkProfile.model_validate_json(out.read_text())
    assert (prof.world_size, prof.nodes) == (4, 2)
    assert {(f.link, f.collective) for f in prof.links} == {
        (link, c)
        for link in ("intra_node", "inter_node")
        for c in ("all_reduce", "all_gather", "reduce_scatter", "send_recv")
    }
    for f in prof.links:
        assert f.group_size == 2 and [s for s, _ in f.samples] == [4096, 262144]
        check_fit(f)


@pytest.mark.parametrize(
    "args, option",
    [
        (["--backend", "mpi"], "--backend"),
        (["--sizes", "1024,big"], "--sizes"),
        (["--sizes", "2"], "--sizes"),
        (["--out", "/nonexistent-dir/net.json"], "--out"),
    ],
)
def test_cluster_bad_input_exits_2_naming_the_option(args, option, tmp_path, capsys):
    from api.cli import main

    if "--out" not in args:
        args = [*args, "--out", str(tmp_path / "net.json")]
    with pytest.raises(SystemExit) as exc:
        main(["profile", "cluster", *args])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert option in err and "Traceback" not in err
