"""What ``rshub serve`` pays before it serves: no module it does not need, and no cyclic
garbage collection while it imports. Guards, not timings: each checks a state that a
regression changes, whatever the machine's speed."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
import trustme

from tests.support import TIME_SCALE, free_port

#: Modules a hub without a JWT key never uses (PyJWT and the cryptography it loads: ~36 ms
#: of CPU), nor the client commands, nor anything before it serves (prometheus_client; the
#: parser's process pool and its multiprocessing, made for the first large document; ctypes,
#: loaded when a child process is first started; xml.sax, whose escaping rendering does).
NOT_BEFORE_SERVING = (
    "prometheus_client",
    "multiprocessing",
    "concurrent.futures.process",
    "ctypes",
    "xml.sax",
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


#: ``rshub serve`` itself (the command, in this process), probed from a thread once it
#: listens: what is held back while it serves its first publish, and that it all comes later.
SERVE_PROBE = """
import asyncio, gc, os, signal, socket, sys, threading, time
import rshub.cli
from hub.live import client_trust, runtime
from tests.support import changes, notification, wait_for

runtime.AFTER_START_SECONDS = {after!r}
port, redis_url, admin = int(sys.argv[1]), sys.argv[2], "adm"
seen = {{}}


def state():
    import aiohttp.connector
    import resourcesync.models as models

    return {{
        "aiohttp trusts": aiohttp.connector._SSL_CONTEXT_VERIFIED.cert_store_stats()["x509_ca"],
        "held back": client_trust.pending(),
        "models built": [m.__pydantic_complete__ for m in (models.Document, models.ChangeList)],
        "multiprocessing": "multiprocessing" in sys.modules,
    }}


async def probe():
    import aiohttp

    url = f"http://127.0.0.1:{{port}}"
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{{url}}/topics/t/events") as stream:
            body = notification(changes(1))
            headers = {{"Content-Type": "application/xml"}}
            async with session.post(f"{{url}}/topics/t", data=body, headers=headers) as r:
                seen["publish"] = r.status
            line = await asyncio.wait_for(stream.content.readline(), 10)
            while line and not line.startswith(b"data:"):
                line = await asyncio.wait_for(stream.content.readline(), 10)
            seen["event"] = line.startswith(b"data:")
            seen["when served"] = state()
        if {after!r} < 60:
            await wait_for(lambda: state()["held back"] == 0 and all(state()["models built"]))
            seen["later"] = state()
        auth = {{"Authorization": f"Bearer {{admin}}"}}
        for path in ("/healthz", "/metrics", "/admin/topics", "/openapi.json", "/",
                     "/topics/t/changelist.xml"):
            async with session.get(url + path, headers=auth) as r:
                seen[path] = [r.status, len(await r.read()) > 0]


def client():
    deadline = time.monotonic() + 30  # the hub listens (aiohttp then imported by it)
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            break
        except OSError:
            time.sleep(0.01)
    try:
        asyncio.run(probe())
    except BaseException as exc:
        seen["error"] = repr(exc)
    finally:
        os.kill(os.getpid(), signal.SIGINT)


def audit(event, args):  # the app's import: with the collector paused, as all of them
    if event == "import" and args[0] == "hub.web.app":
        seen.setdefault("collecting while the app imports", gc.isenabled())


sys.addaudithook(audit)
threading.Thread(target=client, daemon=True).start()
argv = ["serve", "--port", str(port), "--redis-url", redis_url, "--admin-token", admin]
seen["status"] = rshub.cli.main(argv + ["--log-level", "WARNING"])
print(repr(seen))
"""


def _rshub_serve(redis_url: str, after: float, ca_file: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", SERVE_PROBE.format(after=after), str(free_port()), redis_url],
        capture_output=True,
        text=True,
        timeout=60 * TIME_SCALE,
        env={**os.environ, "SSL_CERT_FILE": ca_file},  # the system trust: one CA, counted
    )
    assert done.returncode == 0, done.stderr
    seen = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    assert isinstance(seen, dict)
    return seen


@pytest.fixture
def ca_file(tmp_path: Path) -> str:
    path = tmp_path / "ca.pem"
    trustme.CA().cert_pem.write_to_path(str(path))
    return str(path)


def test_rshub_serve_serves_before_aiohttps_client_trust_and_the_document_models(
    redis_url: str, ca_file: str
) -> None:
    seen = _rshub_serve(redis_url, 3600.0, ca_file)
    assert seen.get("error") is None
    assert seen["publish"] == 202 and seen["event"] is True
    # aiohttp's two default client contexts exist, but no CA file was read for them ...
    assert seen["when served"] == {
        "aiohttp trusts": 0,
        "held back": 2,
        "models built": [False, False],
        "multiprocessing": False,  # no process pool for a small publish
    }
    # ... and the rarer routes answer all the same (the models built on their first use).
    assert {path: seen[path] for path in ("/healthz", "/metrics", "/admin/topics")} == {
        "/healthz": [200, True],
        "/metrics": [200, True],
        "/admin/topics": [200, True],
    }
    assert seen["/openapi.json"] == [200, True] and seen["/"] == [200, True]
    assert seen["/topics/t/changelist.xml"] == [200, True]
    assert seen["collecting while the app imports"] is False
    assert seen["status"] == 0


def test_rshub_serve_loads_aiohttps_client_trust_and_builds_the_models_after_the_start(
    redis_url: str, ca_file: str
) -> None:
    seen = _rshub_serve(redis_url, 0.2, ca_file)
    assert seen.get("error") is None
    assert seen["when served"]["aiohttp trusts"] == 0  # type: ignore[index]
    assert seen["later"] == {
        "aiohttp trusts": 1,
        "held back": 0,
        "models built": [True, True],
        "multiprocessing": False,
    }


TRUST_PROBE = """
import asyncio, ssl, sys, threading
from hub.live import client_trust

made_elsewhere = []
with client_trust.deferred():
    import aiohttp  # its connector makes its two default contexts now
    from aiohttp import connector, web
    thread = threading.Thread(target=lambda: made_elsewhere.append(ssl.create_default_context()))
    thread.start()
    thread.join()

verified = connector._SSL_CONTEXT_VERIFIED
seen = {
    "patch gone": "set_default_verify_paths" not in vars(ssl.SSLContext),
    "held back": client_trust.pending(),
    "another thread's context trusts": made_elsewhere[0].cert_store_stats()["x509_ca"],
    "a context made after trusts": ssl.create_default_context().cert_store_stats()["x509_ca"],
}


async def fetch(port):
    async with aiohttp.ClientSession() as session:
        try:
            async with session.get(f"https://localhost:{port}/") as r:
                return r.status
        except aiohttp.ClientConnectorCertificateError:
            return "certificate not trusted"


async def main(cert_dir):
    app = web.Application()
    app.router.add_get("/", lambda request: web.Response(text="ok"))
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(f"{cert_dir}/server.pem")
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        seen["before load"] = [verified.cert_store_stats()["x509_ca"], await fetch(port)]
        await asyncio.to_thread(client_trust.load)
        seen["after load"] = [verified.cert_store_stats()["x509_ca"], await fetch(port)]
        seen["held back after"] = client_trust.pending()
    finally:
        await runner.cleanup()


asyncio.run(main(sys.argv[1]))
print(repr(seen))
"""


def test_aiohttps_client_fails_closed_until_the_held_back_trust_is_loaded(tmp_path: Path) -> None:
    # A real HTTPS server (on 127.0.0.1, a certificate for localhost from a test CA that
    # SSL_CERT_FILE names as the system's trust) and aiohttp's own client in that process.
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    ca.issue_cert("localhost").private_key_and_cert_chain_pem.write_to_path(
        str(tmp_path / "server.pem")
    )
    done = subprocess.run(
        [sys.executable, "-c", TRUST_PROBE, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60 * TIME_SCALE,
        env={**os.environ, "SSL_CERT_FILE": str(tmp_path / "ca.pem")},
    )
    assert done.returncode == 0, done.stderr
    seen = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    assert seen == {
        "patch gone": True,
        "held back": 2,  # aiohttp's verified and unverified default contexts
        # Only this thread's contexts, only inside the block.
        "another thread's context trusts": 1,
        "a context made after trusts": 1,
        # Fail closed: never an unverified connection, then the same client verifies.
        "before load": [0, "certificate not trusted"],
        "after load": [1, 200],
        "held back after": 0,
    }
