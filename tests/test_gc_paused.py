"""``planner.api.gc_paused`` under concurrency: the service plans requests in threads and the collector is
process-wide, so overlapping pauses must share one — disabled from the first entry, re-enabled at the last exit and
only if it ran before the first entry — whatever the order of exits and whether they raise."""

from __future__ import annotations

import gc
import threading
from contextlib import nullcontext

import pytest

from planner.api import gc_paused


class Worker:
    """A thread inside ``gc_paused`` from ``enter()`` until ``leave()``; ``raises``: it leaves by an exception."""

    def __init__(self, raises: bool) -> None:
        self.raises, self.inside, self.go = raises, threading.Event(), threading.Event()
        self.seen: list[bool] = []  # gc.isenabled() as seen from inside
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        try:
            with gc_paused():
                self.seen.append(gc.isenabled())
                self.inside.set()
                assert self.go.wait(10)
                self.seen.append(gc.isenabled())
                if self.raises:
                    raise RuntimeError("planning failed")
        except RuntimeError as e:
            self.error = e

    def enter(self) -> None:
        self.thread.start()
        assert self.inside.wait(10)

    def leave(self) -> None:
        self.go.set()
        self.thread.join(10)
        assert not self.thread.is_alive()


@pytest.fixture
def restore_gc():
    before = gc.isenabled()
    yield
    (gc.enable if before else gc.disable)()


# (gc enabled before, steps: +X enters, -X leaves, !X leaves by raising); the workers named in a case overlap
CASES = [
    (True, "+a -a"),
    (True, "+a +b -a -b"),  # the first out leaves the other inside: still paused
    (True, "+a +b -b -a"),
    (True, "+a +b !a -b"),
    (True, "+a !a +b -b"),
    (True, "+a +b +c !b -a !c"),
    (True, "+a +b -a +c -b -c"),  # a pause that never drops to zero depth while threads come and go
    (False, "+a +b -a -b"),  # the collector was off: it stays off
    (False, "+a !a"),
]


@pytest.mark.parametrize("enabled, steps", CASES)
def test_overlapping_pauses_share_one(restore_gc, enabled, steps):
    (gc.enable if enabled else gc.disable)()
    workers: dict[str, Worker] = {}
    inside: set[str] = set()
    for step in steps.split():
        op, name = step[0], step[1:]
        if op == "+":
            workers[name] = Worker(raises=False)
            workers[name].enter()
            inside.add(name)
        else:
            workers[name].raises = op == "!"
            workers[name].leave()
            inside.discard(name)
            assert isinstance(workers[name].error, RuntimeError) == (op == "!")
        # independent of the implementation: the collector runs iff it ran before and no thread is inside
        assert gc.isenabled() == (enabled and not inside), (step, sorted(inside))
    for w in workers.values():
        assert w.seen == [False, False]  # paused for the whole time each was inside


def test_many_threads_nested_and_racing(restore_gc):
    """64 threads entering and leaving (some nested, some raising) at once: every one sees the collector off while
    inside, and it is back on once all have left."""
    gc.enable()
    start, seen, lock = threading.Barrier(64), [], threading.Lock()

    def run(i: int) -> None:
        start.wait(10)
        for j in range(200):
            try:
                with gc_paused():
                    with gc_paused() if (i + j) % 3 == 0 else nullcontext():
                        ok = not gc.isenabled()
                        if (i + j) % 7 == 0:
                            raise ValueError
                    ok = ok and not gc.isenabled()
            except ValueError:
                ok = True
            with lock:
                seen.append(ok)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(seen) == 64 * 200 and all(seen)
    assert gc.isenabled()
