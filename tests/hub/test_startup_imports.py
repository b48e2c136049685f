"""What ``rshub serve`` pays before it serves (issue 22): no module it does not need, and no
cyclic garbage collection while it imports. Guards, not timings: each checks a state that a
regression changes, whatever the machine's speed."""

from __future__ import annotations

import ast
import subprocess
import sys

from tests.support import TIME_SCALE

#: Modules a hub without a JWT key never uses (PyJWT and the cryptography it loads: ~36 ms
#: of CPU), nor the client commands, nor anything before it serves (prometheus_client).
NOT_BEFORE_SERVING = (
    "prometheus_client",
    "jwt",
    "cryptography.x509",
    "cryptography.hazmat.primitives.asymmetric.ec",
    "publisher.cli",
    "subscriber.cli",
    "shtab",
)


def _probe(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60 * TIME_SCALE
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_serve_imports_leave_out_what_serving_does_not_need() -> None:
    # Everything `rshub serve` imports until it listens: the command, its module and the app
    # (and what the runtime imports when it starts: nothing more of these).
    loaded = ast.literal_eval(
        _probe(
            "import sys, rshub.cli, hub.serve.cli, hub.web.app, hub.live.runtime\n"
            f"print(sorted(m for m in {NOT_BEFORE_SERVING!r} if m in sys.modules))\n"
        )
    )
    assert loaded == []


def test_a_hub_with_a_jwt_key_verifies_tokens_with_pyjwt_loaded_at_start() -> None:
    # The lazy import still happens, and before the first request (not on the event loop).
    out = _probe(
        "import sys\n"
        "from hub.core.read_tokens import SignedReadTokens, mint\n"
        "assert 'jwt' not in sys.modules\n"
        "key = 'k' * 32\n"
        "verifier = SignedReadTokens(key)\n"
        "print('jwt' in sys.modules)\n"
        "print(sorted(verifier.topics(mint(key, ['a', 'b'], 60).encode())))\n"
    )
    assert out.split("\n")[:2] == ["True", "['a', 'b']"]


GC_PROBE = """
import gc, sys
import rshub.cli
import hub.web.app as web_app
from hub.core import collector

seen = {}
tune = collector.tune


def spy_tune(young_threshold):
    seen["collecting before tune"] = gc.isenabled()
    tune(young_threshold)


def spy_run(*args, **kwargs):
    seen["collecting when serving"] = gc.isenabled()
    seen["young threshold"] = gc.get_threshold()[0]


collector.tune = spy_tune
web_app.run = spy_run
seen["status"] = rshub.cli.main(["serve", "--redis-url", "redis://127.0.0.1:9/0"])
seen["collecting after"] = gc.isenabled()
try:
    rshub.cli.main(["serve", "--port", "not-a-port"])
except SystemExit:
    pass
seen["collecting after a usage error"] = gc.isenabled()
seen["status of a bad setting"] = rshub.cli.main(["serve", "--port", "70000"])
seen["collecting after a bad setting"] = gc.isenabled()
print(repr(seen))
"""


def test_rshub_serve_pauses_the_collector_only_until_its_imports_are_done() -> None:
    seen = ast.literal_eval(_probe(GC_PROBE).strip())
    assert seen == {
        # Paused from the command line's parse through the imports ...
        "collecting before tune": False,
        # ... and on again, tuned, once the hub runs.
        "collecting when serving": True,
        "young threshold": 50_000,
        "status": 0,
        # And never left off when `rshub serve` returns or exits early.
        "collecting after": True,
        "collecting after a usage error": True,
        "status of a bad setting": 2,
        "collecting after a bad setting": True,
    }


#: Imported only after the hub serves: the Prometheus series (their library, and the
#: http.server and wsgiref its exposition brings).
DEFERRED = ("prometheus_client", "prometheus_client.exposition", "wsgiref.simple_server")

SERVING_PROBE = """
import asyncio, sys
import aiohttp
from hub.core import metrics
from hub.core.settings import Settings
from hub.live import runtime
from hub.web.app import RUNTIME, create_app, start
from tests.support import changes, free_port, notification, wait_for

DEFERRED = {deferred!r}
runtime.AFTER_START_SECONDS = {after!r}


async def main(redis_url):
    settings = Settings(host="127.0.0.1", port=free_port())
    app = create_app(settings, redis_url)
    runner, _ = await start(app, shutdown_timeout=2.0)
    connections = app[RUNTIME].client.connections
    seen = {{}}
    try:
        async with aiohttp.ClientSession() as session:
            url = settings.public_url
            async with session.get(f"{{url}}/topics/t/events") as stream:
                body = notification(changes(1))
                headers = {{"Content-Type": "application/xml"}}
                async with session.post(f"{{url}}/topics/t", data=body, headers=headers) as r:
                    seen["publish"] = r.status
                async def an_event():
                    line = await asyncio.wait_for(stream.content.readline(), 10)
                    return line.startswith(b"data:") or line == b""
                await wait_for(an_event)
                seen["loaded when served"] = sorted(m for m in DEFERRED if m in sys.modules)
                seen["TLS context when served"] = connections._ssl is not None
                if {after!r} < 60:  # the runtime loads them by itself, soon after the start
                    await wait_for(metrics.loaded)
                    seen["loaded later"] = sorted(m for m in DEFERRED if m in sys.modules)
                    seen["TLS context later"] = connections._ssl is not None
                async with session.get(f"{{url}}/metrics") as r:
                    text = await r.text()
                seen["series"] = [line for line in text.splitlines() if line.startswith((
                    'rshub_publishes_total{{result="accepted"}}',
                    'rshub_changes_accepted_total',
                    'rshub_stream_clients{{transport="sse"}}',
                    'rshub_http_request_duration_seconds_count{{method="POST"',
                ))]
    finally:
        await runner.cleanup()
    print(repr(seen))


asyncio.run(main(sys.argv[1]))
"""


def _serve_once(redis_url: str, after: float) -> dict[str, object]:
    code = SERVING_PROBE.format(deferred=DEFERRED, after=after)
    done = subprocess.run(
        [sys.executable, "-c", code, redis_url],
        capture_output=True,
        text=True,
        timeout=60 * TIME_SCALE,
    )
    assert done.returncode == 0, done.stderr
    seen = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    assert isinstance(seen, dict)
    return seen


def test_the_hub_serves_a_publish_to_a_subscriber_before_its_tls_context_and_prometheus(
    redis_url: str,
) -> None:
    # The runtime's own load put off for good: only the scrape loads the series, and what
    # was counted before (the publish, the stream client, the requests) is all there.
    seen = _serve_once(redis_url, after=3600.0)
    assert seen["publish"] == 202
    assert seen["loaded when served"] == []
    assert seen["TLS context when served"] is False  # not even in a thread: the GIL
    assert seen["series"] == [
        'rshub_publishes_total{result="accepted"} 1.0',
        "rshub_changes_accepted_total 1.0",
        'rshub_stream_clients{transport="sse"} 1.0',
        'rshub_http_request_duration_seconds_count{method="POST",route="/topics/{name}",'
        'status="202"} 1.0',
    ]


def test_the_runtime_makes_the_tls_context_and_the_prometheus_series_after_the_start(
    redis_url: str,
) -> None:
    seen = _serve_once(redis_url, after=0.2)
    assert seen["loaded later"] == list(DEFERRED)
    assert seen["TLS context later"] is True
    assert 'rshub_publishes_total{result="accepted"} 1.0' in seen["series"]


NAMING_PROBE = """
import asyncio, sys
from importlib import metadata
from hub.store.redis_connection import Connections

looked_up = []
version = metadata.version


def spy(name):
    looked_up.append(name)
    return version(name)


metadata.version = spy


async def main(url):
    connections = Connections(url)
    try:
        # Five connections at once from the main pool, and the blocking client's first.
        await asyncio.gather(*(connections.main.ping() for _ in range(5)))
        await connections.blocking.ping()
        pool = connections.main.connection_pool
        named = {{c.driver_info.lib_version for c in pool._available_connections}}
    finally:
        await connections.close()
    print(repr({{"looked up": looked_up, "named": sorted(named), "installed": version("redis")}}))


asyncio.run(main(sys.argv[1]))
"""


def test_new_redis_connections_name_redis_py_without_reading_its_metadata(
    redis_url: str,
) -> None:
    # redis-py read its package metadata for each new connection (~8 ms of CPU, twice on
    # the way to serving); the hub gives it the same version once.
    done = subprocess.run(
        [sys.executable, "-c", NAMING_PROBE.format(), redis_url],
        capture_output=True,
        text=True,
        timeout=60 * TIME_SCALE,
    )
    assert done.returncode == 0, done.stderr
    seen = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    assert seen["looked up"] == []
    assert seen["named"] == [seen["installed"]]


KEPT_PROBE = """
from hub.core import metrics

kept = metrics.REDIS_ERRORS  # a stand-in a caller holds on to past load()
gaps = metrics.DELIVERY_GAPS.labels("t")
kept.inc()
gaps.inc()
metrics.load()
kept.inc()
gaps.inc(2)
metrics.redis_error()
text = metrics.exposition(None).decode()
print(repr([line for line in text.splitlines() if line.startswith(
    ("rshub_redis_errors_total", "rshub_delivery_gaps_total")
)]))
"""


def test_a_stand_in_kept_past_the_load_counts_into_the_real_series() -> None:
    assert sorted(ast.literal_eval(_probe(KEPT_PROBE).strip())) == [
        'rshub_delivery_gaps_total{topic="t"} 3.0',
        "rshub_redis_errors_total 3.0",
    ]
