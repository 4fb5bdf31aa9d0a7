"""The end of a torchrun worker that has done its work: ``finish_ranks()``.

A gloo worker that returns normally tears its process group down twice over: ``destroy_process_group`` and then
interpreter finalization, while gloo's C++ threads still hold their pairs and pending work. On this test bench
(torch 2.13, gloo, 2 ranks on 2 cores) that teardown now and then aborts a rank *after* every result was
written: "terminate called without an active exception", SIGABRT, exit -6 (CI of stop 38,
``tests/test_host_dispatch.py``, after the last barrier; stop 37 saw a SIGSEGV the same way). Upstream knows
the finalization race (pytorch/pytorch PR 179291, "Gloo's C++ worker threads may still hold AsyncWork objects
... crashes with SIGABRT because the interpreter is being torn down"; abandoned 2026-04-16 as "much more
complicated than anticipated").

So a worker that succeeded ends the way a finished MPI rank does: every rank meets in a barrier (no collective
is in flight on any rank after it), flushes its output, and leaves with ``os._exit(0)``, skipping the C++
teardown; the operating system closes the sockets. A failing worker still raises through the ordinary path, so
its traceback and torchrun's error report are unchanged."""

from __future__ import annotations

import os
import sys
from typing import NoReturn


def finish_ranks() -> NoReturn:
    """Barrier with every rank of the default group, flush stdout and stderr, and end this process with exit
    status 0 without running the process group's or the interpreter's teardown."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
