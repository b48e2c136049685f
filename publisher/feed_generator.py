"""Generate a *synthetic* Wikimedia ``recentchange`` feed in the real event format.

The events are made up: users, titles, comments and revision ids are invented by a seeded
random walk over a few wikis, so the result is reproducible and contains no real data.
What is real is the format: each event follows the EventStreams
``/mediawiki/recentchange/1.0.0`` schema (``meta``, ``type``, ``namespace``, ``title``,
``revision``, ``length``, ``log_type``/``log_action``/``log_params``, ...), and each
carries an SSE id in the form EventStreams sends (a JSON list of Kafka topic positions).

File format (JSON Lines, gzipped): a first header line ``{"generated": true, "note": ...}``
labels the file as generated, then one line per SSE event: ``{"id": <SSE id>, "data":
<recentchange event>}``. :mod:`publisher.editfeed` replays it.

Regenerate the shipped sample with::

    python -m publisher.feed_generator publisher/data/recentchange-sample.jsonl.gz
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from .wikipedia import page_url

__all__ = ["generate", "write"]

NOTE = (
    "GENERATED sample of the Wikimedia EventStreams recentchange feed for rshub demos and "
    "tests: synthetic users, titles and revisions in the real event format; not real edits."
)

#: (wiki dbname, server name, language) of the wikis in the sample.
WIKIS = (
    ("enwiki", "en.wikipedia.org", "en"),
    ("dewiki", "de.wikipedia.org", "de"),
    ("frwiki", "fr.wikipedia.org", "fr"),
    ("jawiki", "ja.wikipedia.org", "ja"),
    ("commonswiki", "commons.wikimedia.org", "en"),
    ("wikidatawiki", "www.wikidata.org", "en"),
)
#: Weights of each kind of event, roughly as on the live feed.
KINDS = (
    ("edit", 56),
    ("new", 8),
    ("categorize", 20),
    ("delete", 4),
    ("restore", 2),
    ("move", 4),
    ("upload", 2),
    ("patrol", 2),
    ("block", 1),
    ("protect", 1),
)
_NAMESPACES = {
    0: "",
    1: "Talk:",
    2: "User:",
    4: "Project:",
    6: "File:",
    10: "Template:",
    14: "Category:",
}
_WORDS = (
    "River",
    "History",
    "Museum",
    "Station",
    "Album",
    "Bridge",
    "Festival",
    "Castle",
    "Library",
    "Mountain",
    "Garden",
    "Railway",
    "Theatre",
    "Island",
    "Village",
    "Comet",
    "Harbour",
    "Orchestra",
    "Valley",
    "Lighthouse",
    "Cathedral",
    "Forest",
    "Mill",
    "Ode",
)
_FIRST_ID = 1_700_000_000


@dataclass
class _Page:
    title: str
    namespace: int
    revision: int
    length: int


class _Wiki:
    def __init__(self, dbname: str, server: str, rng: random.Random) -> None:
        self.dbname, self.server, self.rng = dbname, server, rng
        self.pages: dict[str, _Page] = {}
        self.deleted: dict[str, _Page] = {}
        self.next_rev = rng.randrange(100_000_000, 900_000_000)

    def new_title(self, namespace: int) -> str:
        while True:
            if self.dbname == "wikidatawiki" and namespace == 0:
                title = f"Q{self.rng.randrange(1, 130_000_000)}"
            else:
                words = " ".join(self.rng.sample(_WORDS, self.rng.choice((1, 2, 3))))
                suffix = self.rng.choice(
                    (
                        "",
                        "",
                        f" ({self.rng.randrange(1800, 2030)})",
                        " & Co.",
                        " – Übersicht",
                        "/Archive 1",
                    )
                )
                title = _NAMESPACES[namespace] + words + suffix
            if title not in self.pages and title not in self.deleted:
                return title

    def revision(self) -> int:
        self.next_rev += self.rng.randrange(1, 40)
        return self.next_rev


def _base(
    wiki: _Wiki, when: datetime, offset: int, kind: str, page: _Page, rng: random.Random
) -> dict[str, Any]:
    user = f"Generated{rng.choice(('Editor', 'Bot', 'User'))}{rng.randrange(1, 400)}"
    title_url = page_url(f"https://{wiki.server}", page.title)
    dt = when.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return {
        "$schema": "/mediawiki/recentchange/1.0.0",
        "meta": {
            "uri": title_url,
            "request_id": uuid.UUID(int=rng.getrandbits(128)).hex,
            "id": str(uuid.UUID(int=rng.getrandbits(128))),
            "dt": dt,
            "domain": wiki.server,
            "stream": "mediawiki.recentchange",
            "topic": "eqiad.mediawiki.recentchange",
            "partition": 0,
            "offset": _FIRST_ID + offset,
        },
        "id": 3_000_000_000 + offset,
        "type": kind,
        "namespace": page.namespace,
        "title": page.title,
        "title_url": title_url,
        "comment": "generated sample event",
        "timestamp": int(when.timestamp()),
        "user": user,
        "bot": "Bot" in user,
        "server_url": f"https://{wiki.server}",
        "server_name": wiki.server,
        "server_script_path": "/w",
        "wiki": wiki.dbname,
        "parsedcomment": "generated sample event",
    }


def _edit_fields(event: dict[str, Any], wiki: _Wiki, page: _Page, old: _Page | None) -> None:
    event["minor"] = wiki.rng.random() < 0.2
    event["patrolled"] = wiki.rng.random() < 0.5
    event["length"] = {"new": page.length} | ({"old": old.length} if old else {})
    event["revision"] = {"new": page.revision} | ({"old": old.revision} if old else {})
    oldid = f"&oldid={old.revision}" if old else ""
    event["notify_url"] = f"https://{wiki.server}/w/index.php?diff={page.revision}{oldid}"


def _log_fields(
    event: dict[str, Any],
    log_type: str,
    action: str,
    params: dict[str, Any] | list[Any],
    rng: random.Random,
) -> None:
    event.update(
        {
            "log_id": rng.randrange(100_000_000, 999_999_999),
            "log_type": log_type,
            "log_action": action,
            "log_params": params,
            "log_action_comment": f"generated {log_type}/{action}",
        }
    )


def generate(
    count: int = 2400,
    *,
    seed: int = 5,
    start: datetime | None = None,
) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield ``count`` (SSE id, recentchange event) pairs in time order."""
    rng = random.Random(seed)
    when = start or datetime(2026, 1, 5, 12, 0, 0, tzinfo=UTC)
    wikis = [_Wiki(db, server, rng) for db, server, _lang in WIKIS]
    kinds, weights = zip(*KINDS, strict=True)
    for wiki in wikis:  # some existing pages to edit, delete and move
        for _ in range(25):
            namespace = rng.choice((0, 0, 0, 1, 2, 14))
            title = wiki.new_title(namespace)
            wiki.pages[title] = _Page(title, namespace, wiki.revision(), rng.randrange(200, 90_000))
    produced = 0
    while produced < count:
        wiki = rng.choice(wikis)
        kind = rng.choices(kinds, weights)[0]
        when += timedelta(milliseconds=rng.randrange(5, 120))
        event = _event(wiki, kind, when, produced, rng)
        if event is None:
            continue
        millis = int(when.timestamp() * 1000)
        sse_id = json.dumps(
            [
                {"topic": "eqiad.mediawiki.recentchange", "partition": 0, "timestamp": millis},
                {"topic": "codfw.mediawiki.recentchange", "partition": 0, "offset": -1},
            ],
            separators=(",", ":"),
        )
        yield sse_id, event
        produced += 1


def _event(
    wiki: _Wiki, kind: str, when: datetime, offset: int, rng: random.Random
) -> dict[str, Any] | None:
    pages = list(wiki.pages.values())
    if kind == "new" or (not pages and kind in ("edit", "move", "delete", "categorize")):
        namespace = (
            6
            if wiki.dbname == "commonswiki" and rng.random() < 0.5
            else rng.choice((0, 0, 1, 2, 4, 10, 14))
        )
        page = _Page(
            wiki.new_title(namespace), namespace, wiki.revision(), rng.randrange(50, 20_000)
        )
        wiki.pages[page.title] = page
        event = _base(wiki, when, offset, "new", page, rng)
        _edit_fields(event, wiki, page, None)
        return event
    if kind == "edit":
        old = rng.choice(pages)
        page = _Page(
            old.title,
            old.namespace,
            wiki.revision(),
            max(0, old.length + rng.randrange(-900, 2500)),
        )
        wiki.pages[page.title] = page
        event = _base(wiki, when, offset, "edit", page, rng)
        _edit_fields(event, wiki, page, old)
        return event
    if kind == "categorize":
        member = rng.choice(pages)
        category = _Page(f"Category:{rng.choice(_WORDS)} {rng.choice(_WORDS)}", 14, 0, 0)
        event = _base(wiki, when, offset, "categorize", category, rng)
        event["comment"] = f"[[:{member.title}]] added to category"
        event["parsedcomment"] = event["comment"]
        return event
    if kind == "delete":
        page = wiki.pages.pop(rng.choice(pages).title)
        wiki.deleted[page.title] = page
        event = _base(wiki, when, offset, "log", page, rng)
        _log_fields(event, "delete", "delete", [], rng)
        return event
    if kind == "restore":
        if not wiki.deleted:
            return None
        page = wiki.deleted.pop(rng.choice(list(wiki.deleted)))
        wiki.pages[page.title] = page
        event = _base(wiki, when, offset, "log", page, rng)
        _log_fields(event, "delete", "restore", {"count": {"revisions": 1, "files": 0}}, rng)
        return event
    if kind == "move":
        page = wiki.pages.pop(rng.choice(pages).title)
        target = wiki.new_title(page.namespace)
        noredir = rng.random() < 0.3
        wiki.pages[target] = _Page(target, page.namespace, wiki.revision(), page.length)
        if not noredir:  # a redirect stays behind at the old title
            wiki.pages[page.title] = _Page(page.title, page.namespace, wiki.revision(), 40)
        event = _base(wiki, when, offset, "log", page, rng)
        _log_fields(
            event,
            "move",
            rng.choice(("move", "move", "move_redir")),
            {"target": target, "noredir": "1" if noredir else "0"},
            rng,
        )
        return event
    if kind == "upload":
        title = wiki.new_title(6)
        page = _Page(title, 6, wiki.revision(), rng.randrange(100, 3000))
        action = "upload"
        files = [p for p in pages if p.namespace == 6]
        if files and rng.random() < 0.4:
            page, action = rng.choice(files), "overwrite"
        wiki.pages[page.title] = page
        event = _base(wiki, when, offset, "log", page, rng)
        _log_fields(
            event,
            "upload",
            action,
            {
                "img_sha1": f"{rng.getrandbits(160):040x}",
                "img_timestamp": when.strftime("%Y%m%d%H%M%S"),
            },
            rng,
        )
        return event
    # patrol, block, protect: logged, but no page content changes
    page = rng.choice(pages)
    if kind == "block":
        page = _Page(f"User:GeneratedVandal{rng.randrange(1, 99)}", 2, 0, 0)
    event = _base(wiki, when, offset, "log", page, rng)
    actions = {"patrol": "patrol", "block": "block", "protect": "protect"}
    _log_fields(event, kind, actions[kind], {"auto": 0}, rng)
    return event


def write(path: str | Path, count: int = 2400, *, seed: int = 5) -> int:
    """Write a generated feed to ``path`` (gzipped if it ends in ``.gz``); return ``count``."""
    lines = [
        json.dumps(
            {
                "generated": True,
                "generator": "publisher.feed_generator",
                "seed": seed,
                "events": count,
                "note": NOTE,
            },
            ensure_ascii=False,
        )
    ]
    for sse_id, event in generate(count, seed=seed):
        lines.append(
            json.dumps({"id": sse_id, "data": event}, ensure_ascii=False, separators=(",", ":"))
        )
    data = ("\n".join(lines) + "\n").encode()
    target = Path(path)
    if target.suffix == ".gz":
        # mtime=0 keeps the file byte-for-byte reproducible.
        data = gzip.compress(data, mtime=0)
    target.write_bytes(data)
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate a synthetic recentchange feed.")
    parser.add_argument("path", help="output file (.jsonl or .jsonl.gz)")
    parser.add_argument("--count", type=int, default=2400)
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args(argv)
    write(args.path, args.count, seed=args.seed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
