"""https callbacks on real TLS servers with ``trustme`` certificates: a private CA
(RSHUB_CALLBACK_CA_FILE), an untrusted certificate, and a client certificate (mTLS)."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trustme

from tests.conftest import Hub
from tests.hub.callback_server import CallbackServer
from tests.hub.test_hostile_answers import publish, subscribe
from tests.support import wait_for
from tests.watchdog import Watchdog

ADMIN = {"Authorization": "Bearer admin-secret"}


class Pki:
    def __init__(self, root: Path) -> None:
        self.ca = trustme.CA()  # the callbacks' private CA, trusted by the hub
        self.client_ca = trustme.CA()  # the CA the callbacks trust for client certificates
        self.ca_file = root / "ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_file))
        client = self.client_ca.issue_cert("rshub.example.org")
        self.client_cert, self.client_key = root / "client.pem", root / "client.key"
        client.cert_chain_pems[0].write_to_path(str(self.client_cert))
        client.private_key_pem.write_to_path(str(self.client_key))

    def server_context(
        self, ca: trustme.CA, *, require_client_cert: bool = False
    ) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("127.0.0.1").configure_cert(context)
        if require_client_cert:
            self.client_ca.configure_trust(context)
            context.verify_mode = ssl.CERT_REQUIRED
        return context


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return Pki(tmp_path)


@pytest.fixture
def hub_settings(pki: Pki) -> dict[str, Any]:
    return {
        "retry_base_seconds": 0.05,
        "retry_max_seconds": 0.2,
        "admin_token": "admin-secret",
        "callback_ca_file": pki.ca_file,
        "callback_client_cert": pki.client_cert,
        "callback_client_key": pki.client_key,
    }


@pytest.fixture
async def servers() -> AsyncIterator[list[CallbackServer]]:
    started: list[CallbackServer] = []
    yield started
    for server in started:
        await server.stop()


async def test_delivery_over_https_to_a_callback_of_the_private_ca(
    hub: Hub, pki: Pki, servers: list[CallbackServer]
) -> None:
    callback = await CallbackServer().start(ssl_context=pki.server_context(pki.ca))
    servers.append(callback)
    assert callback.url.startswith("https://127.0.0.1:")
    async with Watchdog():
        await subscribe(hub, callback.url)
        ids = await publish(hub, 0) + await publish(hub, 1)
        await wait_for(lambda: callback.ids == ids)
        assert callback.peer_certs[0] is None  # this callback asks for no client certificate


async def test_an_untrusted_certificate_fails_with_a_clear_last_error(
    hub: Hub, pki: Pki, servers: list[CallbackServer]
) -> None:
    callback = await CallbackServer().start(ssl_context=pki.server_context(pki.ca))
    servers.append(callback)
    await subscribe(hub, callback.url)
    ids = await publish(hub, 0)
    await wait_for(lambda: callback.ids == ids)
    # The callback comes back on the same port with a certificate of a CA nobody trusts.
    await callback.stop()
    servers.remove(callback)
    stranger = trustme.CA()
    impostor = await CallbackServer().start(
        ssl_context=pki.server_context(stranger), port=callback.port
    )
    servers.append(impostor)
    await publish(hub, 1)

    async def last_error() -> str:
        async with hub.session.get(hub.url + "/admin/subscriptions?topic=t", headers=ADMIN) as resp:
            assert resp.status == 200
            rows = (await resp.json())["subscriptions"]
        return str(rows[0]["last_error"] or "")

    await wait_for(last_error)
    error = await last_error()
    assert error.startswith(f"TLS certificate of 127.0.0.1:{callback.port} not trusted:"), error
    assert "RSHUB_CALLBACK_CA_FILE" in error
    assert not impostor.deliveries


async def test_a_callback_that_requires_a_client_certificate_gets_the_hubs(
    hub: Hub, pki: Pki, servers: list[CallbackServer]
) -> None:
    context = pki.server_context(pki.ca, require_client_cert=True)
    callback = await CallbackServer().start(ssl_context=context)
    servers.append(callback)
    await subscribe(hub, callback.url)  # the verification GET presents it too
    ids = await publish(hub, 0)
    await wait_for(lambda: callback.ids == ids)
    subject = dict(pair[0] for pair in callback.peer_certs[0]["subject"])
    assert subject.get("commonName") == "rshub.example.org" or any(
        value == "rshub.example.org"
        for kind, value in callback.peer_certs[0].get("subjectAltName", ())
        if kind == "DNS"
    )
