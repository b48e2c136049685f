"""``bench/hub.py``'s bookkeeping and baselines: an incomplete figure fails the run, the
bare broadcaster writes pre-encoded frames, the XADD baseline runs as many clients as the
hub has publishers."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import orjson
import pytest
import redis
from aiohttp import web

from bench.hub import (
    Row,
    bare_app,
    bare_frames,
    exit_status,
    notification,
    print_repeats,
    stored_payloads,
    xadd_baseline,
)
from hub.core.frames import text_frame
from tests.support import TIME_SCALE


def test_an_incomplete_figure_fails_whatever_its_value() -> None:
    met = Row("p99", 5.0, "ms", target=("max", 10))
    lost = Row("p99", 5.0, "ms", target=("max", 10), note="INCOMPLETE min 9/10", complete=False)
    info_lost = Row("p50", 1.0, "ms", complete=False)
    assert met.passed is True
    assert lost.passed is False
    assert info_lost.passed is False
    assert lost.cells()[-1] == "FAIL"
    assert exit_status([met, Row("p50", 1.0, "ms")]) == 0
    assert exit_status([met, info_lost]) == 2
    assert exit_status([lost]) == 2


def test_repeat_summary_fails_when_one_run_lost_events() -> None:
    def run(complete: bool) -> list[Row]:
        return [Row("p99", 5.0, "ms", target=("max", 10), complete=complete)]

    assert print_repeats([run(True) for _ in range(5)])
    # every target met in 5 of 5 by value, but run 3 never got all its events
    assert not print_repeats([run(k != 2) for k in range(5)])


def test_bare_frames_are_the_hubs_text_frames_of_the_event_arrays() -> None:
    frames = bare_frames(250, 100, "t")
    assert len(frames) == 3
    for frame, count in zip(frames, (100, 100, 50), strict=True):
        payload = frame[frame.index(b"[") :]
        assert frame == text_frame(payload)
        events = orjson.loads(payload)
        assert len(events) == count and all(e["topic"] == "t" for e in events)


async def test_bare_broadcast_writes_every_frame_to_every_client_after_building() -> None:
    runner = web.AppRunner(bare_app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as session:
            sockets = [
                await session.ws_connect(f"{base}/topics/t/ws", max_msg_size=0) for _ in range(3)
            ]
            before = time.perf_counter_ns()
            async with session.post(f"{base}/ctl/broadcast?n=2500&batch=100&topic=t") as resp:
                started = await resp.json()
            assert started["clients"] == 3 and started["frames"] == 25
            # the timed span starts after the frames were built, inside the request
            assert before < started["t0_ns"] < time.perf_counter_ns()
            for ws in sockets:
                ids: list[str] = []
                while len(ids) < 2500:
                    msg = await asyncio.wait_for(ws.receive(), 10 * TIME_SCALE)
                    assert msg.type is aiohttp.WSMsgType.TEXT
                    ids += [e["id"] for e in orjson.loads(msg.data)]
                assert [int(i.split("-")[1]) for i in ids] == list(range(2500))
                await ws.close()
    finally:
        await runner.cleanup()


async def test_xadd_baseline_spreads_the_rounds_over_client_processes(redis_url: str) -> None:
    payloads = [stored_payloads(notification(k * 10, 10)) for k in range(3)]
    result = await xadd_baseline(redis_url, payloads, rounds=8, clients=4, key="test:xadd")
    assert result.changes == 80  # 8 rounds of 10, the warm-up rounds not counted
    assert result.seconds > 0 and result.cpu_seconds > 0
    client = redis.Redis.from_url(redis_url)
    try:
        assert client.exists("test:xadd") == 0  # cleaned up
    finally:
        client.close()


async def test_the_bare_fan_out_posts_each_change_to_every_callback_at_its_pace() -> None:
    """Figure 4's baseline: each tick's one stamped change reaches every callback as a whole
    POST with the hub's Link header, on kept-alive connections, and the stamps are fresh."""
    from bench.hub import RawCallback, bare_fanout

    got: list[tuple[int, bytes, bytes, int]] = []
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: RawCallback(lambda _t, _i: None, lambda *post: got.append(post)), "127.0.0.1", 0
    )
    port = server.sockets[0].getsockname()[1]
    link = '<http://hub.invalid/>; rel="hub", <http://hub.invalid/topics/t>; rel="self"'
    try:
        began = time.perf_counter_ns()
        sent = await bare_fanout(f"http://127.0.0.1:{port}", 3, 0.01, 0.05, 40, link)
        assert sent == 5

        deadline = time.monotonic() + 10 * TIME_SCALE
        while len(got) < 15 and time.monotonic() < deadline:  # noqa: ASYNC110 (a plain list)
            await asyncio.sleep(0.005)
    finally:
        server.close()
        await server.wait_closed()
    assert sorted(i for i, *_ in got) == [0] * 5 + [1] * 5 + [2] * 5
    for _, head, body, received in got:
        assert b"\r\nlink: " + link.lower().encode() in head
        assert body.count(b"<url>") == 1
        stamp = int(body.split(b"?t=")[1].split(b"<")[0])
        assert began <= stamp <= received
    for i in range(3):  # each callback got the five changes in order
        locs = [body.split(b"<loc>")[1].split(b"?")[0] for j, _, body, _ in got if j == i]
        assert locs == [b"http://bench/x/%d" % n for n in range(40, 45)]


async def test_paced_raw_publishes_stamp_right_before_writing_and_fail_on_a_refusal() -> None:
    """Figure 4's publisher (``bench/rawload.post_paced``): every tick's POST arrives, its
    stamp taken at the tick (not earlier), on a few kept-alive connections; an answer other
    than 202 fails the run."""
    from bench.rawload import post_paced

    arrivals: list[tuple[int, bytes]] = []
    peers: set[tuple[str, int]] = set()
    status = 202

    async def publish(request: web.Request) -> web.Response:
        body = await request.read()
        arrivals.append((time.perf_counter_ns(), body))
        peers.add(request.transport.get_extra_info("peername"))  # type: ignore[union-attr]
        return web.Response(status=status, body=b'{"ok": true}')

    app = web.Application()
    app.router.add_post("/topics/t", publish)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        stamps: list[int] = []

        def body_at(k: int, stamp: int) -> bytes:
            stamps.append(stamp)
            return notification(k, 1, stamp)

        began = time.perf_counter_ns()
        sent = await post_paced("127.0.0.1", port, "/topics/t", body_at, 0.01, 0.2)
        assert sent == 20 == len(arrivals) == len(stamps)
        assert began < stamps[0] and stamps == sorted(stamps)
        for (arrived, body), stamp in zip(arrivals, stamps, strict=True):
            assert f"t={stamp}".encode() in body and stamp < arrived
        # paced, not sent at once: the last tick ~0.19 s after the first
        assert stamps[-1] - stamps[0] >= 0.18e9
        assert len(peers) <= 4  # kept alive, not a connection per POST
        status = 503
        with pytest.raises(RuntimeError, match="HTTP 503"):
            await post_paced("127.0.0.1", port, "/topics/t", body_at, 0.01, 0.03)
    finally:
        await runner.cleanup()
