"""A CPU "GPU" for tests that price host runs (the same figures ``runtime.report.host_spec`` would give a
slow host): shared by the calibration and host-dispatch tests."""

from __future__ import annotations

from planner.specs import GpuSpec, PeakTflops

CPU = GpuSpec(
    id="cpu",
    memory_gib=16.0,
    peak_tflops=PeakTflops(fp32=0.05),
    hbm_bandwidth_GBps=5.0,
    nvlink_bandwidth_GBps=1.0,
    nic_bandwidth_GBps=1.0,
    source="test host",
)
