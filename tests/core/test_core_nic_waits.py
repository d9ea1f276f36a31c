"""Creates waiting for their pod's NIC lookup (core/nic_waits.py): parked, with the wait's limit armed; the
lookup's end or the limit, whichever comes first, ends the wait with one `CreateNow` (``late`` at the limit)
and makes the other moot. The wait decides nothing else: the create itself comes after it, as any other."""

from __future__ import annotations

from core_harness import Edge, container, create, make_core, of_type, park_token, pod, resize, timers

from nri_pinner.core import events as ev
from nri_pinner.core.effects import CreateNow
from nri_pinner.core.nic_waits import TIMER
from nri_pinner.nri.gen import api_pb2 as api
from nri_pinner.nri.handlers import CreateReply

NPOD, GPOD = pod("net"), pod("gold")
N = container(NPOD, "app", 2000, 2000)
G = container(GPOD, "app", 2000, 2000)


def park(e: Edge, c: api.Container, sandbox: api.PodSandbox, wait: float = 0.2) -> int:
    out = e.handle(ev.AwaitNics(create(sandbox, c).req, wait))
    token = park_token(out.reply)
    assert timers(out) == [(f"{TIMER}{token}", wait)]
    assert not of_type(out.effects, CreateNow)  # nothing is created while it waits
    assert c.id not in e.core.node.containers
    return token


def test_the_lookup_ending_first_lets_the_create_go_on_with_its_nics() -> None:
    e = make_core()
    token = park(e, N, NPOD)
    out = e.handle(ev.NicsLookedUp(token))
    [now] = of_type(out.effects, CreateNow)
    assert (now.token, now.req.container.id, now.late) == (token, N.id, False)
    assert not of_type(e.fire(f"{TIMER}{token}").effects, CreateNow)  # the limit is moot now
    assert not of_type(e.handle(ev.NicsLookedUp(token)).effects, CreateNow)  # and so is a second word


def test_the_limit_passing_first_lets_the_create_go_on_late() -> None:
    e = make_core()
    token = park(e, N, NPOD, wait=0.05)
    [now] = of_type(e.fire(f"{TIMER}{token}").effects, CreateNow)
    assert (now.token, now.late) == (token, True)
    assert not of_type(e.handle(ev.NicsLookedUp(token)).effects, CreateNow)  # the lookup ending later: moot


def test_waits_are_apart_and_their_tokens_are_the_cores_own() -> None:
    e = make_core()
    e.run(GPOD, G)
    grown = park_token(e.handle(resize(GPOD, G, 4000)).reply)  # a reply parked for a pass
    first, second = park(e, N, NPOD), park(e, container(NPOD, "side", 1000, 1000), NPOD)
    assert len({grown, first, second}) == 3  # the edge keys every parked reply by its token
    [now] = of_type(e.handle(ev.NicsLookedUp(second)).effects, CreateNow)
    assert now.req.container.name == "side" and first in e.core.nic_waits.waiting
    # the wait over, the create is one like any other
    reply = e.handle(ev.CreateContainer(now.req)).reply
    assert isinstance(reply, CreateReply) and now.req.container.id in e.core.node.containers
