"""Benchmark resourcesync parsing and serialization against bare lxml.

Run ``python bench/documents.py`` from the repository root (no arguments, about 15 s). It
generates a 1,000-entry ``changelist-notification`` and a 1-entry one (the common single-change
publish) and reports for each, best of N rounds, entries/s and documents/s of:

* bare lxml (the baseline): ``etree.fromstring`` plus reading every element's tag, text and
  attributes, with the same hardened parser;
* the same extraction through ``etree.iterparse`` and through ``etree.XMLPullParser``
  (the two streaming alternatives to building the tree first);
* parse+validate: :func:`resourcesync.parse` with validation, returning models;
* hub ingest: :func:`hub.core.events.packed_from_root` after ``parse_root``, parse and
  validate down to the bytes the hub's append script takes, through the models (the full
  path), and through
  :func:`hub.core.quick_ingest.packed_from_document` (what a publish costs before Redis);
* their ratio to bare lxml (targets: parse+validate >= 0.5);
* serialize: :func:`resourcesync.serialize` of the parsed 1,000-entry document.

``--profile DIR`` instead records bare lxml and parse+validate of each document under
``py-spy --native`` (a child process looping over one of them, sampled after its imports for
``PROFILE_SECONDS``) and writes ``DIR/documents-profile.md``: the top 20 frames by own time
(Python and C: libxml2, lxml, pydantic-core, the interpreter), and the share of the stages of
a parse, the cyclic GC and deallocation.
"""

from __future__ import annotations

import argparse
import collections
import io
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyspy_raw
from lxml import etree

from hub.core.events import packed_from_root
from hub.core.quick_ingest import packed_from_document as quick_packed
from resourcesync import (
    Change,
    ChangeListNotification,
    Entry,
    Link,
    Metadata,
    parse,
    parse_root,
    serialize,
)

ENTRIES = 1_000
ROUNDS = 7
#: Each round runs for about this long.
ROUND_SECONDS = 0.2
_PARSER_OPTIONS = {
    "resolve_entities": False,
    "no_network": True,
    "load_dtd": False,
    "huge_tree": False,
    "remove_comments": True,
    "remove_pis": True,
}


def make_notification(n: int = ENTRIES) -> bytes:
    """A realistic notification: loc, lastmod, rs:md change/hash/length/type, one link."""
    start = datetime(2013, 1, 2, tzinfo=UTC)
    changes = list(Change)
    entries = [
        Entry(
            loc=f"http://example.com/resources/{i}?rev={i * 7}",
            lastmod=start + timedelta(seconds=i),
            md=Metadata(
                change=changes[i % 3],
                hash=f"md5:{i:032x}",
                length=1_000 + i,
                type="text/html",
            ),
            links=(Link(rel="alternate", href=f"http://example.com/resources/{i}.pdf"),)
            if i % 4 == 0
            else (),
        )
        for i in range(n)
    ]
    up = Link(rel="up", href="http://example.com/capabilitylist.xml")
    return serialize(ChangeListNotification(links=(up,), entries=tuple(entries)))


def best_of(funcs: list[Callable[[], object]]) -> list[float]:
    """Best mean seconds per call of each function over ROUNDS rounds of about ROUND_SECONDS.

    Rounds are interleaved (each round runs every function in turn) so that a busy machine
    slows all of them alike and the ratios stay meaningful.
    """
    repeats = []
    for func in funcs:
        start = time.perf_counter()
        func()
        repeats.append(max(1, int(ROUND_SECONDS / max(time.perf_counter() - start, 1e-7))))
    best = [float("inf")] * len(funcs)
    for _ in range(ROUNDS):
        for n, (func, repeat) in enumerate(zip(funcs, repeats, strict=True)):
            start = time.perf_counter()
            for _ in range(repeat):
                func()
            best[n] = min(best[n], (time.perf_counter() - start) / repeat)
    return best


def bare_lxml(data: bytes) -> Callable[[], None]:
    parser = etree.XMLParser(**_PARSER_OPTIONS)  # type: ignore[arg-type]

    def run() -> None:
        root = etree.fromstring(data, parser)
        for element in root.iter():
            _ = element.tag, element.text, element.items()

    return run


def iterparse(data: bytes) -> Callable[[], None]:
    def run() -> None:
        for _, element in etree.iterparse(io.BytesIO(data), events=("end",), **_PARSER_OPTIONS):
            _ = element.tag, element.text, element.items()

    return run


def pull_parser(data: bytes) -> Callable[[], None]:
    def run() -> None:
        parser = etree.XMLPullParser(events=("end",), **_PARSER_OPTIONS)
        parser.feed(data)
        parser.close()
        for _, element in parser.read_events():
            _ = element.tag, element.text, element.items()

    return run


def report(label: str, data: bytes, entries: int) -> None:
    assert len(parse(data).entries) == entries
    names = [
        "bare lxml (fromstring)",
        "lxml iterparse",
        "lxml XMLPullParser",
        "parse+validate",
        "hub ingest, full path",
        "hub ingest (quick_ingest)",
    ]
    times = best_of(
        [
            bare_lxml(data),
            iterparse(data),
            pull_parser(data),
            lambda: parse(data),
            lambda: packed_from_root(parse_root(data, max_bytes=len(data))),
            lambda: quick_packed(data, len(data)),
        ]
    )
    baseline = times[0]
    rows = list(zip(names, times, strict=True))
    print(f"\n{label}: {entries:,} entries, {len(data):,} bytes; best of {ROUNDS} rounds")
    print(f"  {'':24} {'entries/s':>12} {'docs/s':>10} {'per doc':>11} {'vs bare':>8}")
    for name, seconds in rows:
        print(
            f"  {name:24} {entries / seconds:>12,.0f} {1 / seconds:>10,.0f}"
            f" {seconds * 1e6:>9,.1f}us {baseline / seconds:>8.2f}"
        )


#: How long each profile samples its loop.
PROFILE_SECONDS = 6.0
#: Stages of :func:`resourcesync.parse` (and more), by a frame name a stack holds.
_STAGES = {
    "parse_root: fromstring and the safety checks": "parse_root (",
    "the walk (_entries, _attributes)": "_entries (",
    "model_validate (pydantic-core)": "model_validate (",
    "check_document (the ResourceSync rules)": "check_document (",
    "the cyclic GC": "gc_collect_main (",
    "deallocation (anywhere)": "_dealloc (",
}


def loop(which: str, entries: int) -> None:
    """The profiled child: say ready, then run one variant until killed."""
    data = make_notification(entries)
    run = bare_lxml(data) if which == "bare" else lambda: parse(data)
    run()
    print("ready", flush=True)
    while True:
        run()


def profile(directory: Path) -> Path:
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    lines = [
        "# bench/documents.py --profile: py-spy --native, top 20 frames by own time",
        "",
        f"A child process loops over one variant; py-spy samples it for {PROFILE_SECONDS:.0f} s"
        " at 500 Hz after its imports. Own = samples whose innermost frame (C or Python) is",
        "this one; a stage's share counts every sample whose stack holds it.",
    ]
    for entries in (ENTRIES, 1):
        for which in ("bare", "parse"):
            child = subprocess.Popen(
                [sys.executable, __file__, "--loop", which, "--entries", str(entries)],
                stdout=subprocess.PIPE,
                text=True,
            )
            assert child.stdout is not None
            try:
                if child.stdout.readline().strip() != "ready":
                    raise RuntimeError(f"the {which} loop did not start")
                raw = directory / f"documents-{which}-{entries}.txt"
                subprocess.run(
                    [pyspy, "record", "--native", "--format", "raw", "--rate", "500",
                     "--duration", str(int(PROFILE_SECONDS)), "--pid", str(child.pid),
                     "--output", str(raw)],
                    check=True, capture_output=True,
                )  # fmt: skip
            finally:
                child.kill()
                child.wait()
            lines += _profile_tables(raw, f"{which}, {entries:,}-entry notification")
    out = directory / "documents-profile.md"
    out.write_text("\n".join(lines) + "\n")
    return out


def _profile_tables(raw: Path, title: str) -> list[str]:
    stages: collections.Counter[str] = collections.Counter()
    for frames, n in pyspy_raw.samples(raw):
        for stage, marker in _STAGES.items():
            if any(marker in f for f in frames):
                stages[stage] += n
    own, total = pyspy_raw.top_own([raw])
    if not total:
        return ["", f"## {title}", "", "no samples"]
    lines = ["", f"## {title}", "", f"{total:,} samples.", "", "| # | frame | own % |"]
    lines += ["|---:|---|---:|"]
    lines += [f"| {i} | `{frame}` | {100 * n / total:.1f} |" for i, (frame, n) in enumerate(own, 1)]
    lines += ["", "| stage | % of samples |", "|---|---:|"]
    lines += [f"| {stage} | {100 * stages[stage] / total:.1f} |" for stage in _STAGES]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--profile", metavar="DIR", help="py-spy the parses into DIR instead")
    parser.add_argument("--loop", choices=("bare", "parse"), help=argparse.SUPPRESS)
    parser.add_argument("--entries", type=int, default=ENTRIES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.loop:
        loop(args.loop, args.entries)
        return
    if args.profile:
        directory = Path(args.profile)
        directory.mkdir(parents=True, exist_ok=True)
        print(f"profile: {profile(directory)}")
        return
    print(
        f"python {platform.python_version()}, lxml {etree.__version__}, "
        f"{platform.machine()}, {platform.processor() or platform.platform()}"
    )
    big = make_notification()
    report("1,000-entry notification", big, ENTRIES)
    report("1-entry notification", make_notification(1), 1)
    doc = parse(big)
    (serialize_s,) = best_of([lambda: serialize(doc)])
    print(f"\nserialize (1,000 entries) {ENTRIES / serialize_s:>12,.0f} entries/s")


if __name__ == "__main__":
    main()
