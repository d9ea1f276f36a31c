"""HandlerThread idle work: it runs on the handler thread only once no call has arrived for a while,
so never ahead of queued calls (a reply on its way out); dropped when the thread stops first."""

from __future__ import annotations

import threading
import time

from nri_pinner.nri.stub.handler_calls import HandlerThread


def test_idle_work_runs_after_every_queued_call_on_the_handler_thread() -> None:
    thread = HandlerThread("idle-order", idle_after=0.0)
    order: list[str] = []
    where: list[int] = []
    done = threading.Event()

    def idle() -> None:
        order.append("idle")
        where.append(threading.get_ident())
        done.set()

    def first() -> None:  # a handler call queues idle work, then another call arrives behind it
        thread.submit_idle(idle)
        thread.submit(lambda: order.append("queued"))

    try:
        thread.submit(first)
        assert done.wait(5)
        assert order == ["queued", "idle"]
        assert where == [thread.ident]
    finally:
        thread.stop()


def test_idle_work_from_another_thread_runs_once_the_thread_is_quiet() -> None:
    thread = HandlerThread("idle-quiet", idle_after=0.01)
    ran = threading.Event()
    try:
        thread.submit_idle(ran.set)  # from the test thread: handed over through the queue
        assert ran.wait(5)
    finally:
        thread.stop()


def test_idle_work_waits_while_calls_keep_arriving_and_is_dropped_at_stop() -> None:
    thread = HandlerThread("idle-busy", idle_after=30.0)  # far longer than the test: never quiet enough
    ran: list[str] = []
    calls = threading.Event()
    try:
        thread.submit_idle(lambda: ran.append("idle"))
        for _ in range(20):
            thread.submit(lambda: None)
        thread.submit(calls.set)
        assert calls.wait(5)  # every call ran ...
        time.sleep(0.2)
        assert ran == []  # ... the idle work did not
    finally:
        thread.stop()
    assert ran == []
