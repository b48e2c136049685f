"""websub.rocks' hub test harness, ported to a site on 127.0.0.1 (for test_websub_rocks.py).

websub.rocks (github.com/aaronpk/websub.rocks, ``app/Hub.php``) tests a hub by playing
both of its other parties. Its publisher serves a small feed at
``/hub/{num}/pub/{token}`` (HTML for tests 100-104, plain text for 105, JSON for 106), with
``Link`` headers naming itself and the hub, and pings the hub (``hub.mode=publish``,
``hub.topic``) after adding a post; or, given a topic instead of a hub, it discovers the hub
and the topic from the topic's ``Link`` headers and the user publishes. Its subscriber, at
``/hub/{num}/sub/{token}``, checks the verification GET and each delivery. This module
is that site, check for check: what the suite reports (``streaming_publish``) is recorded
as :class:`Run.events`, with the suite's own error codes, so a test asserts what the suite
would show its user.

Where the port departs from the PHP, it says so: ``similar_text`` (the loose body
comparison for a topic the suite does not publish) is :mod:`difflib`'s matching-blocks
ratio, the same longest-common-substring recursion up to ties; discovery reads ``Link``
headers only (p3k's also reads HTML and feed ``<link>`` elements); and the suite's second
``Link`` check compares ``rel=hub`` again where it means ``rel=self`` (a slip in
``post_subscriber``), which the port keeps and :meth:`Run.self_link_ok` completes.
"""

from __future__ import annotations

import difflib
import hashlib
import hmac
import json
import re
import secrets
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import aiohttp
from aiohttp import web

#: The suite's ``quotes`` table, a few rows of it: what its feeds publish.
QUOTES = [
    ("Grace Hopper", "It's easier to ask forgiveness than it is to get permission."),
    ("Alan Kay", "The best way to predict the future is to invent it."),
    ("Ada Lovelace", "The more I study, the more insatiable do I feel my genius for it."),
    ("Edsger Dijkstra", "Simplicity is prerequisite for reliability."),
    ("Donald Knuth", "Premature optimization is the root of all evil."),
    ("Barbara Liskov", "The most important thing is to keep things simple."),
    ("Tim Berners-Lee", "The Web does not just connect machines, it connects people."),
    ("Margaret Hamilton", "There was no choice but to be pioneers."),
    ("Ken Thompson", "When in doubt, use brute force."),
    ("Frances Allen", "We have to go where the hard problems are."),
    ("Radia Perlman", "Don't make it more complicated than it needs to be."),
    ("John McCarthy", "Program designers have a tendency to think of the users as idiots."),
]

#: The Content-Type each of the suite's topics is served with, as PHP sends it: no type
#: set gives the SAPI default, ``text/html; charset=UTF-8``; a ``text/`` type set without
#: a charset gets ``;charset=UTF-8`` appended, without a space (``sapi_apply_default_charset``);
#: ``application/json`` is left alone. A hub must hand each back byte for byte.
CONTENT_TYPES = {105: "text/plain;charset=UTF-8", 106: "application/json"}
HTML = "text/html; charset=UTF-8"

#: PHP's ``trim``.
_TRIM = b" \t\n\r\0\x0b"
_LINK = re.compile(r'<([^>]*)>\s*;\s*rel="?([^";,]+)"?')


def http_rels(header: str) -> dict[str, list[str]]:
    """IndieWeb's ``http_rels``: each rel of a (combined) ``Link`` header, its URLs in order."""
    rels: dict[str, list[str]] = {}
    for url, names in _LINK.findall(header):
        for rel in names.split():
            rels.setdefault(rel.lower(), []).append(url)
    return rels


def verify_signature(body: bytes, header: str, secret: str) -> bool:
    """p3k's ``WebSub\\Client::verify_signature``: ``sha1|256|384|512=<hex HMAC>``."""
    match = re.search(r"(sha(?:1|256|384|512))=(.+)", header)
    if not header or match is None:
        return False
    algorithm, sig = match.group(1), match.group(2)
    return sig == hmac.new(secret.encode(), body, getattr(hashlib, algorithm)).hexdigest()


def similar_percent(a: bytes, b: bytes) -> float:
    """PHP's ``similar_text($a, $b, $percent)`` percent (see the module docstring)."""
    if not a and not b:
        return 0.0
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    same = sum(block.size for block in matcher.get_matching_blocks())
    return same * 2 * 100 / (len(a) + len(b))


@dataclass
class Run:
    """One started test (the suite's ``hubs`` row and its stream of events)."""

    num: int
    token: str
    hub: str
    topic: str
    #: ``local``: the suite publishes the topic; ``remote``: it only subscribes to it.
    publisher: str
    secret: str = ""
    posts: list[dict[str, str]] = field(default_factory=list)
    #: What the suite shows its user (``streaming_publish``), in order.
    events: list[dict[str, Any]] = field(default_factory=list)
    #: The ``Link`` header of each delivery, as the suite combines it.
    links: list[str] = field(default_factory=list)

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == kind]

    @property
    def notifications(self) -> list[dict[str, Any]]:
        return self.of("notification")

    def self_link_ok(self) -> bool:
        """Every delivery named the topic as ``rel=self`` (the check the suite meant)."""
        return all(
            http_rels("Link: " + link).get("self", [""])[0] == self.topic for link in self.links
        )


class RocksSite:
    """websub.rocks' hub tests on ``http://127.0.0.1:{port}``: publisher and subscriber."""

    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}/"
        self.port = port
        self.runs: dict[str, Run] = {}
        self._quote = 0
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> RocksSite:
        app = web.Application()
        app.router.add_get("/hub/{num}/pub/{token}", self.get_publisher)
        app.router.add_get("/hub/{num}/sub/{token}", self.get_subscriber)
        app.router.add_post("/hub/{num}/sub/{token}", self.post_subscriber)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        self._session = aiohttp.ClientSession()
        return self

    async def stop(self) -> None:
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def session(self) -> aiohttp.ClientSession:
        assert self._session is not None
        return self._session

    # -- the suite's steps ---------------------------------------------------------------

    async def post_start(
        self, num: int, *, hub: str | None = None, topic: str | None = None
    ) -> Run | dict[str, str]:
        """Start test ``num`` against a hub (the suite publishes) or a topic (discovered)."""
        token = secrets.token_hex(10)
        if topic is not None:
            async with self.session.get(topic, allow_redirects=False) as resp:
                rels = http_rels("Link: " + ", ".join(resp.headers.getall("Link", [])))
            if not rels.get("hub"):
                return {"error": "missing_hub"}
            if not rels.get("self"):
                return {"error": "missing_self"}
            run = Run(num, token, rels["hub"][0], rels["self"][0], "remote")
        elif hub is not None:
            run = Run(num, token, hub, f"{self.base}hub/{num}/pub/{token}", "local")
            for _ in range(3):
                self._add_post(run)
        else:
            return {"error": "bad_request"}
        if num == 101:
            run.secret = secrets.token_hex(10)
        self.runs[token] = run
        return run

    async def post_subscribe(self, run: Run, action: str = "subscribe") -> dict[str, Any]:
        """Ask the hub to (un)subscribe the test's callback, as ``post_subscribe`` does."""
        params = {
            "hub.mode": "unsubscribe" if action == "unsubscribe" else "subscribe",
            "hub.topic": run.topic,
            "hub.callback": self.callback(run),
        }
        if run.secret:
            params["hub.secret"] = run.secret
        if run.num == 102:
            params["foo"] = "bar"
            params["hub.foo"] = "hub.bar"
        async with self.session.post(
            run.hub,
            data=urlencode(params),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        ) as resp:
            body = await resp.text()
            queued = resp.status == 202
        return {"result": "Queued" if queued else "Hub Error", "hub_response": body}

    async def post_publisher(self, run: Run) -> tuple[int, str]:
        """Add a post to the suite's feed and ping the hub (``post_publisher``); the ping's
        status and answer (the suite ignores them, the tests do not)."""
        self._add_post(run)
        form = {"hub.mode": "publish", "hub.topic": run.topic}
        async with self.session.post(run.hub, data=urlencode(form), headers=_FORM) as resp:
            return resp.status, await resp.text()

    def follower(self, run: Run) -> Run:
        """Another of the suite's subscribers to ``run``'s topic (a callback of its own)."""
        other = Run(run.num, secrets.token_hex(10), run.hub, run.topic, run.publisher)
        other.posts = run.posts  # the topic is ``run``'s feed
        self.runs[other.token] = other
        return other

    def callback(self, run: Run) -> str:
        return f"{self.base}hub/{run.num}/sub/{run.token}"

    def _add_post(self, run: Run) -> None:
        author, content = QUOTES[self._quote % len(QUOTES)]
        self._quote += 1
        published = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
        run.posts.insert(
            0,
            {"id": str(self._quote), "author": author, "content": content, "published": published},
        )
        del run.posts[10:]

    # -- the suite's pages ---------------------------------------------------------------

    async def get_publisher(self, request: web.Request) -> web.Response:
        num, token = int(request.match_info["num"]), request.match_info["token"]
        run = self.runs.get(token)
        if run is None or not run.posts:
            return web.json_response({"error": "no_posts"}, status=404)
        own = f"{self.base}hub/{num}/pub/{token}"
        headers = {"Content-Type": CONTENT_TYPES.get(num, HTML)}
        response = web.Response(body=self._feed(num, own, run.posts), headers=headers)
        response.headers.add("Link", f'<{own}>; rel="self"')
        response.headers.add("Link", f'<{run.hub}>; rel="hub"')
        return response

    @staticmethod
    def _feed(num: int, own: str, posts: list[dict[str, str]]) -> bytes:
        title = f"WebSub Rocks! Test {num}"
        if num == 105:
            text = f"{title}\n=============\n\n" + "".join(
                f"{p['content']}\n\nby {p['author']}\non {p['published']}  \n\n" for p in posts
            )
            return text.encode()
        if num == 106:
            items = [
                {
                    "id": i,
                    "content_text": p["content"],
                    "url": f"{own}#{i}",
                    "date_published": p["published"],
                    "author": {"name": p["author"]},
                }
                for i, p in enumerate(posts)
            ]
            feed = {"title": title, "home_page_url": own, "feed_url": own, "items": items}
            return json.dumps(feed, indent=4).encode()
        entries = "".join(
            f'<div class="h-entry"><p class="e-content">{p["content"]}</p>'
            f'<a class="p-author">{p["author"]}</a> <time>{p["published"]}</time></div>\n'
            for p in posts
        )
        return (
            f"<!doctype html>\n<html><head><title>{title}</title></head><body>\n"
            f'<div class="h-feed"><span class="p-name">WebSub.rocks Test {num}</span>\n'
            f"{entries}</div></body></html>\n"
        ).encode()

    async def get_subscriber(self, request: web.Request) -> web.Response:
        """The verification of intent, checked as ``get_subscriber`` checks it."""
        run = self.runs.get(request.match_info["token"])
        if run is None:
            return web.json_response({"error": "not_found"}, status=404)
        params = request.query
        mode = params.get("hub.mode")
        if mode is None:
            return self._verify_error(
                run, "The verification request was missing the hub.mode parameter"
            )
        if mode not in ("subscribe", "unsubscribe"):
            return self._verify_error(
                run, 'The hub.mode parameter was not set to "subscribe" or "unsubscribe"'
            )
        if "hub.topic" not in params:
            return self._verify_error(
                run, "The verification request was missing the hub.topic parameter"
            )
        if params["hub.topic"] != run.topic:
            return self._verify_error(run, "The hub.topic parameter was incorrect")
        if "hub.challenge" not in params:
            return self._verify_error(
                run, "The verification request was missing the hub.challenge parameter"
            )
        if mode == "subscribe" and "hub.lease_seconds" not in params:
            return self._verify_error(
                run, "The verification request was missing the hub.lease_seconds parameter"
            )
        run.events.append(
            {
                "type": "verify_success",
                "mode": mode,
                "lease_seconds": params.get("hub.lease_seconds"),
            }
        )
        return web.Response(
            body=params["hub.challenge"].encode(),
            headers={"Content-Type": "application/octet-stream"},
        )

    @staticmethod
    def _verify_error(run: Run, description: str) -> web.Response:
        run.events.append({"type": "verify_error", "description": description})
        return web.json_response(
            {"error": "bad_request", "error_description": description}, status=404
        )

    async def post_subscriber(self, request: web.Request) -> web.Response:
        """A delivery, checked as ``post_subscriber`` checks it."""
        run = self.runs.get(request.match_info["token"])
        if run is None:
            return web.json_response({"error": "not_found"}, status=404)
        # Fetch the topic URL so we know what the notification should look like.
        async with self.session.get(run.topic, allow_redirects=False) as resp:
            topic_body = await resp.read()
            topic_type = resp.headers.get("Content-Type", "")
        body = await request.read()
        link = ", ".join(request.headers.getall("Link", []))
        run.links.append(link)

        def report(error: str | bool, description: str = "") -> web.Response:
            run.events.append(
                {
                    "type": "notification",
                    "error": error,
                    "description": description,
                    "body": body,
                    "content_type": request.headers.get("Content-Type"),
                }
            )
            return web.Response()

        if body.strip(_TRIM) == b"":
            return report("empty_payload")
        if run.publisher == "remote":
            invalid = similar_percent(body, topic_body) < 5
        else:
            invalid = body.strip(_TRIM) != topic_body.strip(_TRIM)
        if invalid:
            return report(
                "body_mismatch",
                f"Length of topic URL: ({len(topic_body)}) "
                f"Length of notification body: ({len(body)})",
            )
        if request.headers.get("Content-Type", "") != topic_type:
            return report(
                "content_type_mismatch",
                f"Topic Content-Type: {topic_type}\nContent-Type sent:  "
                f"{request.headers.get('Content-Type', '')}\n",
            )
        rels = http_rels("Link: " + link)
        if "hub" not in rels:
            return report("link_header", "missing rel=hub")
        if rels["hub"][0] != run.hub:
            return report("link_header", "rel=hub was not set to the correct value")
        if "self" not in rels:
            return report("link_header", "missing rel=self")
        if rels["hub"][0] != run.hub:  # the suite's own check, as written (see the docstring)
            return report("link_header", "rel=self was not set to the correct value")
        sent = request.headers.get("X-Hub-Signature", "")
        if run.secret == "":
            if sent:
                return report(
                    "signature",
                    "The hub sent a signature, but the subscriber was not expecting one.",
                )
        else:
            if not sent:
                return report("signature", "The hub did not send a signature")
            if not verify_signature(body, sent, run.secret):
                return report("signature_mismatch", f"Signature: {sent}")
        return report(
            False, "Great! Your hub sent a valid WebSub notification payload to the subscriber!"
        )


_FORM = {"Content-Type": "application/x-www-form-urlencoded"}
