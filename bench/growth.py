"""The hub's growth curve: the same figures at 10,000 to 10,000,000 resources, and at 1,000
to 100,000 WebSub subscriptions.

Run ``.venv/bin/python bench/growth.py`` from the repository root (``--quick``: 10,000 and
100,000 resources; ``--sizes``, ``--subscriptions``, ``--idle`` to choose; ``--until HH:MM``
starts no size that would end after that UTC time, at the pace of the axis's last size, and
records it as not reached). Each size is one cell,
run in turn on one embedded Redis, emptied between cells, out of ``bench/scale.py``'s parts:

* **N resources**: ``bench_resourcelist`` publishes N URIs to one topic (1,000 per publish,
  4 in flight) beside a fresh topic's publishes before and after: changes/s; Redis bytes per
  resource (``used_memory`` growth over the publishes, and the folded Resource List's own
  ``MEMORY USAGE``); time to first byte of every document of the topic beside the same
  documents of a small topic and ``/healthz``, with the Resource List's first snapshot built
  in the background; restart -> ``/healthz`` beside a hub on an empty database. Then, over
  the same data, ``bench_websocket`` with ``rshub serve --workers 2``: 100 active WebSocket
  clients' publish-to-receive p99 at 1,000 changes/s with 0, then each ``--idle`` count of
  idle WebSocket clients connected, and after they left.
* **S subscriptions**: ``bench_websub`` subscribes S callbacks (100 per topic) through
  ``POST /``: subscriptions/s, Redis bytes per subscription, one change per topic until every
  callback has it (deliveries/s), restart -> ``/healthz`` -> every callback reached. Then a
  hub over them: time to first byte of one topic's documents; and the idle p99 steps as above.

The conductor raises ``RLIMIT_NOFILE`` (soft and hard, when it may) for the idle clients; its
children inherit it. More than 25,000 idle clients come from 127.0.0.2, 127.0.0.3, ...: one
source address reaches the hub's port from ~28,000 ephemeral ports only.

The run is one record in ``bench/results/growth.jsonl`` (``bench/render.py``'s schema; each
figure named ``"<size> resources: <figure>"`` or ``"<size> subscriptions: <figure>"``),
rewritten after every cell, so a run cut short keeps what it measured. ``--render`` draws the
newest record as a table between the growth markers of ``docs/benchmarks.md`` and as
``docs/growth.png`` (matplotlib, log-x, one panel per figure).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import functools
import json
import math
import os
import re
import resource
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

SCRIPT = Path(__file__).resolve()
ROOT = SCRIPT.parent.parent
sys.path.insert(0, str(ROOT))

from bench import render  # noqa: E402
from bench.hub import FAILURES, Processes, bench_run  # noqa: E402
from bench.scale import (  # noqa: E402
    LOG_LEVEL,
    BigTopic,
    Hub,
    Report,
    Sizes,
    bench_resourcelist,
    bench_websocket,
    bench_websub,
    first_byte,
    start_to_healthy,
    until_served,
)

BENCH = "growth"
RESULTS = render.RESULTS / f"{BENCH}.jsonl"
DOCS = ROOT / "docs" / "benchmarks.md"
PLOT = ROOT / "docs" / "growth.png"
BEGIN = "<!-- growth curve: rendered by `bench/growth.py --render` -->"
END = "<!-- end of growth curve -->"

RESOURCES = (10_000, 100_000, 1_000_000, 10_000_000)
QUICK = (10_000, 100_000)
SUBSCRIPTIONS = (1_000, 10_000, 100_000)
IDLE = (0, 10_000, 100_000)
#: Subscriptions per topic in a subscriptions cell (as bench/scale.py's runs: 100,000 over
#: 1,000 topics).
PER_TOPIC = 100
#: The documents of a topic whose first byte is timed (name, path under the topic URL).
DOCUMENTS = (
    ("Capability List", "capabilitylist.xml"),
    ("topic URI (open Change List page)", ""),
    ("Change List index", "changelist.xml"),
    ("Change List page 1", "changelist/1.xml"),
    ("changes.xml", "changes.xml"),
)
AXES = ("resources", "subscriptions")
#: ``rshub serve --workers`` for the idle-client steps.
IDLE_WORKERS = 2


# -- the pure part: a record -> its table ----------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """One size of one axis: its figures by name (the name after ``"<size> <axis>: "``)."""

    axis: str
    size: int
    values: Mapping[str, float]

    def get(self, name: str) -> float | None:
        return self.values.get(name)

    def slowest_document(self) -> tuple[str, float] | None:
        """The document of the topic (the Resource List's index and first page included)
        whose first byte came last, and that time (ms)."""
        found = [
            (name.removeprefix("first byte ms: "), value)
            for name, value in self.values.items()
            if name.startswith("first byte ms: ")
            and not name.endswith(", the small topic")
            and name != "first byte ms: /healthz"
            and "first request" not in name
            and "being built" not in name
            and "after a restart" not in name
        ]
        return max(found, key=lambda item: item[1]) if found else None


def figure_name(axis: str, size: int, name: str) -> str:
    return f"{size:,} {axis}: {name}"


def unit_of(name: str) -> str:
    """The unit of a figure, from how ``bench/scale.py`` names its values."""
    if name.startswith("changes/s"):
        return "changes/s"
    if name.startswith("deliveries/s"):
        return "deliveries/s"
    if "/s" in name:
        return "/s"
    if " ms" in name:
        return "ms"
    if " B " in f" {name} ":
        return "B"
    return "s"


def cells(record: render.Record) -> list[Cell]:
    """The record's figures as cells, in axis then size order."""
    found: dict[tuple[str, int], dict[str, float]] = {}
    for figure in record.figures:
        head, sep, name = figure.name.partition(": ")
        size_text, _, axis = head.partition(" ")
        if not sep or axis not in AXES or figure.numbers.value is None:
            continue
        size = int(size_text.replace(",", ""))
        found.setdefault((axis, size), {})[name] = figure.numbers.value
    order = sorted(found, key=lambda key: (AXES.index(key[0]), key[1]))
    return [Cell(axis, size, found[(axis, size)]) for axis, size in order]


_P99 = re.compile(r"p99 ms, (\d+) idle")


def idle_counts(found: Sequence[Cell]) -> list[int]:
    """The idle-client counts measured in any cell (0 first)."""
    return sorted(
        {int(m.group(1)) for cell in found for name in cell.values if (m := _P99.fullmatch(name))}
    )


def fmt(value: float | None, unit: str = "") -> str:
    """3 significant digits at most, thousands separated; ``—`` when not measured."""
    if value is None or not math.isfinite(value):
        return "—"
    if value >= 100:
        text = f"{value:,.0f}"
    elif value >= 10:
        text = f"{value:.1f}"
    else:
        text = f"{value:.2f}"
    return f"{text} {unit}".rstrip()


def short(count: int) -> str:
    """``10000`` -> ``10k``, ``1000000`` -> ``1M``."""
    for div, suffix in ((1_000_000, "M"), (1_000, "k")):
        if count >= div and count % div == 0:
            return f"{count // div}{suffix}"
    return f"{count:,}"


def table(record: render.Record) -> str:
    """The growth table of ``record``, Markdown: a row per size of each axis; each figure
    with its same-run baseline in brackets."""
    found = cells(record)
    idle = idle_counts(found)
    head = [
        "size",
        "changes/s [fresh topic]",
        "Redis bytes each",
        "slowest first byte, topic documents [/healthz]",
        "Resource List first snapshot",
        "restart → /healthz [empty hub]",
        *(f"active p99, {short(k)} idle" for k in idle),
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for cell in found:
        if cell.axis == "resources":
            rate = fmt(cell.get("changes/s"))
            base = cell.get("changes/s, a fresh topic after")
            rate += f" [{fmt(base)}]" if base is not None else ""
            memory = fmt(cell.get("Redis B per resource"), "B")
            fold = cell.get("Redis B per resource, the fold")
            memory += f" (fold {fmt(fold, 'B')})" if fold is not None else ""
            snapshot = fmt(cell.get("Resource List first snapshot s"), "s")
            restart = fmt(cell.get("restart: start -> /healthz s"), "s")
            empty = cell.get("restart: start -> /healthz s, an empty hub")
            restart += f" [{fmt(empty, 's')}]" if empty is not None else ""
        else:
            rate = fmt(cell.get("deliveries/s"))
            rate = f"{rate} deliveries/s" if rate != "—" else rate
            memory = fmt(cell.get("Redis B per subscription"), "B")
            snapshot = "—"
            restart = fmt(cell.get("restart: start -> /healthz s"), "s")
            every = cell.get("restart: start -> every callback s")
            restart += f" (every callback {fmt(every, 's')})" if every is not None else ""
        slowest = cell.slowest_document()
        first = "—" if slowest is None else f"{fmt(slowest[1], 'ms')} ({slowest[0]})"
        health = cell.get("first byte ms: /healthz")
        first += f" [{fmt(health, 'ms')}]" if slowest is not None and health is not None else ""
        row = [
            f"{cell.size:,} {cell.axis}",
            rate,
            memory,
            first,
            snapshot,
            restart,
            *(fmt(cell.get(f"p99 ms, {k} idle"), "ms") for k in idle),
        ]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |")
    return "\n".join(lines) + "\n"


def section(record: render.Record, plot_name: str = PLOT.name) -> str:
    """What goes between the growth markers: the run, the table, what was not reached, the
    plot."""
    out = [
        f"`{record.command}`: {record.run_text()}, {record.machine.cores} cores.",
        "",
        table(record),
    ]
    if record.note:
        out += [record.note, ""]
    out.append(f"![growth curve: each figure against resources and subscriptions]({plot_name})")
    return "\n".join(out) + "\n"


def put_section(text: str, block: str) -> str:
    """``text`` with ``block`` between the growth markers (added at the end when absent)."""
    if text.count(BEGIN) == 1 and text.count(END) == 1:
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        return f"{head}{BEGIN}\n{block}{END}{tail}"
    if BEGIN in text or END in text:
        raise ValueError(f"the growth markers must appear once each: {BEGIN!r}, {END!r}")
    return f"{text.rstrip()}\n\n## Growth curve\n\n{BEGIN}\n{block}{END}\n"


# -- the plot -----------------------------------------------------------------------------------


#: The plot's panels: title, y label, and per cell the series it draws (label, value); a
#: label with "baseline" is the same run's baseline, drawn dotted. Panels whose figures
#: span orders of magnitude over the sizes have a log y axis too.
Series = Callable[[Cell], list[tuple[str, float | None]]]
LOG_Y = frozenset({"slowest first byte of a topic document", "Resource List first snapshot"})
PANELS: tuple[tuple[str, str, Series], ...] = (
    (
        "publish / delivery rate",
        "changes/s, deliveries/s",
        lambda c: [
            ("changes/s", c.get("changes/s")),
            ("fresh topic (baseline)", c.get("changes/s, a fresh topic after")),
            ("deliveries/s", c.get("deliveries/s")),
        ],
    ),
    (
        "Redis bytes each",
        "B",
        lambda c: [
            ("per resource", c.get("Redis B per resource")),
            ("per resource, fold", c.get("Redis B per resource, the fold")),
            ("per subscription", c.get("Redis B per subscription")),
        ],
    ),
    (
        "slowest first byte of a topic document",
        "ms",
        lambda c: [
            ("slowest document", (c.slowest_document() or ("", None))[1]),
            ("/healthz (baseline)", c.get("first byte ms: /healthz")),
        ],
    ),
    (
        "Resource List first snapshot",
        "s",
        # a subscriptions size's topic is small: its snapshot says nothing of the size
        lambda c: (
            [("first snapshot", c.get("Resource List first snapshot s"))]
            if c.axis == "resources"
            else []
        ),
    ),
    (
        "restart → /healthz",
        "s",
        lambda c: [
            ("restart", c.get("restart: start -> /healthz s")),
            ("empty hub (baseline)", c.get("restart: start -> /healthz s, an empty hub")),
        ],
    ),
    ("active WebSocket p99, 1,000 changes/s", "ms", lambda c: idle_series(c)),
)


def idle_series(cell: Cell) -> list[tuple[str, float | None]]:
    """The cell's active p99 per idle-client count, fewest idle first."""
    found = sorted(
        (int(m.group(1)), value)
        for name, value in cell.values.items()
        if (m := _P99.fullmatch(name)) is not None
    )
    return [(f"{short(k)} idle", value) for k, value in found]


def plot(record: render.Record, path: Path) -> None:
    """``path``: a PNG, one panel per figure, size on a log x axis, resources solid and
    subscriptions dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    found = cells(record)
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.5), constrained_layout=True)
    for ax, (title, ylabel, series) in zip(axes.flat, PANELS, strict=True):
        for axis, style in (("resources", "-o"), ("subscriptions", "--s")):
            lines: dict[str, list[tuple[int, float]]] = {}
            for cell in (c for c in found if c.axis == axis):
                for label, value in series(cell):
                    if value is not None:
                        lines.setdefault(label, []).append((cell.size, value))
            for label, points in lines.items():
                xs, ys = zip(*points, strict=True)
                line = ":x" if "baseline" in label else style
                ax.plot(xs, ys, line, label=f"{axis}: {label}", markersize=4)
        ax.set_xscale("log")
        if title in LOG_Y:
            ax.set_yscale("log")
        else:
            ax.set_ylim(bottom=0)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("resources (solid) or subscriptions (dashed)", fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=7)
    fig.suptitle(
        f"rshub growth curve: {record.run_text()}, {record.machine.cores} cores", fontsize=11
    )
    fig.savefig(path, dpi=90)
    plt.close(fig)


def newest_record(path: Path = RESULTS) -> render.Record:
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not lines:
        raise render.RecordError(f"{path}: no run recorded")
    return render.parse_record(json.loads(lines[-1]), f"{path.name}:{len(lines)}")


def render_docs(record: render.Record, docs: Path = DOCS, png: Path = PLOT) -> None:
    plot(record, png)
    docs.write_text(put_section(docs.read_text(encoding="utf-8"), section(record, png.name)))


# -- the run ----------------------------------------------------------------------------------


def parse_counts(text: str) -> list[int]:
    """``"10000,100000"`` -> ``[10000, 100000]`` (``_`` allowed, ``k``/``M`` suffixes;
    ``""``: none)."""
    out = []
    for part in text.split(","):
        part = part.strip().replace("_", "")
        if not part:
            continue
        scale = {"k": 1_000, "M": 1_000_000}.get(part[-1:], 1)
        number = int(part[:-1] if scale > 1 else part) * scale
        if number < 0:
            raise argparse.ArgumentTypeError(f"{part}: a count is 0 or more")
        out.append(number)
    return sorted(set(out))


class Run:
    """The run's record, rewritten into ``bench/results/growth.jsonl`` after each cell."""

    def __init__(self, command: str, label: str, *, append: bool = False) -> None:
        self.path = RESULTS
        self.previous = self.path.read_text(encoding="utf-8") if self.path.exists() else ""
        if self.previous and not self.previous.endswith("\n"):
            self.previous += "\n"
        machine = render.this_machine()
        self.load_start = str(machine["load"])
        self.record: dict[str, Any] = {
            "bench": BENCH,
            "command": command,
            "date": render.utc_now(),
            "commit": render.commit_of(ROOT),
            "label": label,
            "machine": machine,
            "figures": [],
        }
        self.notes: list[str] = []
        #: The size being measured, for a note when the run is interrupted.
        self.current = "the next size"
        lines = self.previous.splitlines()
        if append and lines:
            # Go on with the newest run: its sizes stay, this invocation's are added (a
            # size measured again replaces the earlier figures).
            self.previous = "".join(line + "\n" for line in lines[:-1])
            last = json.loads(lines[-1])
            last["command"] += f"; then {command}"
            self.load_start = str(last["machine"].get("load", self.load_start)).split("-")[0]
            note = last.pop("note", "")
            self.notes = [n.removeprefix("- ") for n in note.splitlines() if n.strip()]
            self.record = last

    def add(self, axis: str, size: int, values: Mapping[str, float]) -> None:
        prefix = figure_name(axis, size, "")
        self.record["figures"] = [
            f for f in self.record["figures"] if not f["name"].startswith(prefix)
        ]
        self.notes = [  # measured now: what an earlier invocation said of it is past
            n
            for n in self.notes
            if not (n.startswith(f"{size:,} {axis} ") and ("not reached" in n or "failed" in n))
        ]
        for name, value in values.items():
            if math.isfinite(value):
                self.record["figures"].append(
                    {
                        "name": figure_name(axis, size, name),
                        "unit": unit_of(name),
                        "value": float(f"{value:.4g}"),
                    }
                )

    def note(self, text: str) -> None:
        print(f"  note: {text}", flush=True)
        self.notes.append(text)

    def write(self) -> None:
        if not self.record["figures"]:
            return
        low, high = sorted((float(self.load_start), os.getloadavg()[0]))
        self.record["machine"]["load"] = (
            f"{low:.1f}" if f"{low:.1f}" == f"{high:.1f}" else f"{low:.1f}-{high:.1f}"
        )
        self.record["until"] = render.utc_now()
        if self.notes:
            self.record["note"] = "\n".join(f"- {n}" for n in self.notes)
        render.parse_record(self.record, "growth run")
        line = json.dumps(self.record, ensure_ascii=False, separators=(",", ":"))
        self.path.write_text(self.previous + line + "\n", encoding="utf-8")


def raise_files(wanted: int) -> int:
    """``RLIMIT_NOFILE`` to ``wanted`` (soft and hard: a root process may raise the hard
    limit up to ``fs.nr_open``); the soft limit reached."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        cap = int(Path("/proc/sys/fs/nr_open").read_text())
    except (OSError, ValueError):
        cap = hard
    target = max(soft, min(wanted, cap))
    for limits in ((target, max(hard, target)), (min(target, hard), hard)):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, limits)
            break
        except (ValueError, OSError):
            continue
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def idle_fit(files: int) -> int:
    """The most idle clients ``IDLE_WORKERS`` hub processes hold under an open-file limit
    of ``files`` each: the kernel spreads connections over them only about evenly, and each
    keeps some descriptors of its own (Redis, logs, the active clients)."""
    return max(0, (IDLE_WORKERS * (files - 3_000) - 2_000) // 5_000 * 5_000)


def stop_leftovers(procs: Processes) -> None:
    """After a cell failed: stop what it had started (the harness's Redis stays)."""
    for name in list(procs.procs):
        procs.stop(name, 30)


async def documents(session: aiohttp.ClientSession, topic_url: str, report: Report) -> None:
    """First byte of each of a topic's documents, the Resource List once its first snapshot
    is served, and ``/healthz`` as the baseline."""
    hub_url = topic_url.split("/topics/", 1)[0]
    health, *_ = await first_byte(session, hub_url + "/healthz")
    report.value("first byte ms: /healthz", health * 1000)
    for name, path in DOCUMENTS:
        ttfb, status, _, _ = await first_byte(session, f"{topic_url}/{path}".rstrip("/"))
        if status != 200:
            raise RuntimeError(f"{topic_url}/{path}: {status}")
        report.value(f"first byte ms: {name}", ttfb * 1000)
    listing = f"{topic_url}/resourcelist.xml"
    ttfb, *_ = await first_byte(session, listing)
    report.value("first byte ms: Resource List, first request", ttfb * 1000)
    took, *_ = await until_served(session, listing, 120)
    report.value("Resource List first snapshot s", ttfb + took)
    ttfb, status, _, _ = await first_byte(session, listing)
    report.value("first byte ms: Resource List index", ttfb * 1000)


async def resources_cell(
    n: int,
    idle: Sequence[int] | None,
    procs: Processes,
    redis_url: str,
    redis_pid: int,
    *,
    lean: bool = False,
) -> dict[str, float]:
    """A topic of ``n`` resources, then the idle steps over it (``lean``: neither the
    next snapshot's wait nor the idle steps)."""
    report = Report([])
    big = BigTopic(resources=n, wait_seconds=max(600.0, n / 5_000), next_snapshot=not lean)
    if lean:
        idle = None
    await bench_resourcelist(big, procs, redis_url, report)
    report.print(f"{n:,} resources: the topic")
    if idle is not None:
        ws = Sizes(latency_seconds=5.0, wait_seconds=900.0)
        await idle_steps(ws, idle, procs, redis_url, redis_pid, report)
    return report.values


async def subscriptions_cell(
    s: int, idle: Sequence[int] | None, procs: Processes, redis_url: str, redis_pid: int
) -> dict[str, float]:
    """``s`` WebSub subscriptions, a topic's documents, then the idle steps over them."""
    from redis.asyncio import Redis

    redis = Redis.from_url(redis_url)
    await redis.flushall()
    await redis.aclose()
    report = Report([])
    sizes = Sizes(
        subscriptions=s,
        topics=max(1, s // PER_TOPIC),
        latency_seconds=5.0,
        wait_seconds=max(300.0, s / 150),
    )
    await bench_websub(sizes, procs, redis_url, redis_pid, report)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as session:
        hub = Hub(procs, session, redis_url)
        await start_to_healthy(hub, 300)
        await documents(session, f"{hub.url}/topics/t0", report)
        hub.stop(60)
    report.print(f"{s:,} subscriptions")
    if idle is not None:
        ws = Sizes(latency_seconds=5.0, wait_seconds=900.0)
        await idle_steps(ws, idle, procs, redis_url, redis_pid, report)
    return report.values


async def idle_steps(
    ws: Sizes,
    idle: Sequence[int],
    procs: Processes,
    redis_url: str,
    redis_pid: int,
    report: Report,
) -> None:
    """The active clients' latency with 0 then each of ``idle`` idle clients, over what
    Redis holds, on ``rshub serve --workers 2``."""
    per_process = resource.getrlimit(resource.RLIMIT_NOFILE)[0] - 2_000
    await bench_websocket(
        ws,
        procs,
        redis_url,
        redis_pid,
        report,
        idle_steps=idle,
        flush=False,
        workers=IDLE_WORKERS,
        idle_per_process=per_process,
    )


def estimate(done: Sequence[tuple[int, float]], size: int) -> float | None:
    """Seconds a cell of ``size`` will take: the line through the last two sizes' times (a
    fixed part, the idle steps, and one that grows with the size); None before two."""
    if len(done) < 2:
        return None
    (n1, t1), (n2, t2) = done[-2], done[-1]
    per = max(0.0, (t2 - t1) / (n2 - n1))
    return max(t2, t2 + per * (size - n2))


def past(deadline: datetime.datetime | None) -> bool:
    return deadline is not None and datetime.datetime.now(datetime.UTC) >= deadline


async def conduct(
    args: argparse.Namespace, run: Run, procs: Processes, redis_url: str, redis_pid: int
) -> None:
    plan: list[tuple[str, int]] = [("resources", n) for n in args.sizes]
    plan += [("subscriptions", s) for s in args.subscriptions]
    # Smallest first across both axes, so that a run cut short has every axis's start.
    plan.sort(key=lambda item: (item[1] * (1 if item[0] == "resources" else 10), item[0]))
    idle = [k for k in args.idle if k > 0]
    fit = idle_fit(args.files)
    reachable: list[int] | None = sorted({min(k, fit) for k in idle})
    for k in (k for k in idle if k > fit):
        run.note(
            f"{k:,} idle clients not reached: RLIMIT_NOFILE is {args.files:,} here and its hard "
            f"limit may not be raised (no CAP_SYS_RESOURCE), so each of the {IDLE_WORKERS} hub "
            f"processes holds fewer than {args.files:,} connections; the largest step "
            f"measured: {fit:,} idle clients"
        )
    if not args.idle:  # --idle '' : no active-latency step at all
        reachable = None
    paces: dict[str, list[tuple[int, float]]] = {}  # axis -> its sizes and their seconds
    for axis, size in plan:
        if past(args.until):
            run.note(
                f"{size:,} {axis} not reached: the run's time budget "
                f"(--until {args.until:%H:%M} UTC) was spent"
            )
            continue
        needed = estimate(paces.get(axis, []), size)
        if args.until is not None and needed is not None:
            ends = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=needed)
            if ends > args.until:
                done = ", ".join(f"{n:,}: {t / 60:.1f} min" for n, t in paces[axis])
                run.note(
                    f"{size:,} {axis} not reached: at the pace of the sizes before ({done}) "
                    f"it needed ~{needed / 60:.0f} min, past the run's end "
                    f"(--until {args.until:%H:%M} UTC)"
                )
                continue
        lean = args.lean_from is not None and axis == "resources" and size >= args.lean_from
        if lean:
            run.note(
                f"{size:,} resources measured lean (--lean-from {args.lean_from:,}): without "
                "the next snapshot's wait and the idle steps, for time"
            )
        cell = (
            functools.partial(resources_cell, lean=lean)
            if axis == "resources"
            else subscriptions_cell
        )
        for attempt in (1, 2):
            print(f"\n== {size:,} {axis} ({render.utc_now()}, load {os.getloadavg()[0]:.1f})")
            run.current = f"{size:,} {axis}"
            started = time.perf_counter()
            try:
                values = await cell(size, reachable, procs, redis_url, redis_pid)
                break
            except FAILURES as exc:
                print(f"== {size:,} {axis} failed: {exc}", flush=True)
                stop_leftovers(procs)
                # Once more, unless it ran long or the time is up: a port another process
                # took between free_port() and the hub's bind fails a cell by chance.
                if attempt == 1 and time.perf_counter() - started < 600 and not past(args.until):
                    continue
                run.note(f"{size:,} {axis} failed: {str(exc).splitlines()[0][:300]}")
                run.write()
                values = {}
        if not values:
            continue
        values["cell s"] = time.perf_counter() - started
        paces.setdefault(axis, []).append((size, values["cell s"]))
        run.add(axis, size, values)
        run.write()
        print(f"== {size:,} {axis}: {values['cell s']:.0f} s", flush=True)


def until_time(text: str) -> datetime.datetime:
    """``HH:MM`` (UTC) today, or tomorrow when that has passed by more than 12 hours."""
    hour, minute = (int(x) for x in text.split(":"))
    now = datetime.datetime.now(datetime.UTC)
    when = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
    return when + datetime.timedelta(days=1) if when < now - datetime.timedelta(hours=12) else when


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--sizes",
        type=parse_counts,
        default=list(RESOURCES),
        help="resources of the big topic, comma-separated (default 10k,100k,1M,10M)",
    )
    parser.add_argument("--quick", action="store_true", help="--sizes 10000,100000")
    parser.add_argument(
        "--subscriptions",
        type=parse_counts,
        default=list(SUBSCRIPTIONS),
        help="WebSub subscriptions (default 1000,10000,100000; 0: none)",
    )
    parser.add_argument(
        "--idle",
        type=parse_counts,
        default=list(IDLE),
        help="idle WebSocket clients beside the active ones (default 0,10000,100000)",
    )
    parser.add_argument(
        "--until",
        type=until_time,
        help="end by HH:MM UTC: a size whose estimate (the last size's time, scaled) ends "
        "later is not started",
    )
    parser.add_argument("--label", default="growth curve", help="the record's label")
    parser.add_argument(
        "--lean-from",
        type=int,
        metavar="N",
        help="topics of N resources or more: no next-snapshot wait, no idle steps",
    )
    parser.add_argument(
        "--append", action="store_true", help="add the sizes to the newest recorded run"
    )
    parser.add_argument("--render", action="store_true", help="draw the newest run into docs/")
    parser.add_argument("--docs", type=Path, default=DOCS, help=argparse.SUPPRESS)
    parser.add_argument("--plot", type=Path, default=PLOT, help=argparse.SUPPRESS)
    parser.add_argument("--keep", action="store_true", help="keep the temp dir with the logs")
    parser.add_argument("--hub-log-level", default="WARNING", help="the hub's --log-level")
    args = parser.parse_args(argv)
    if args.render:
        try:
            record = newest_record()
        except (OSError, render.RecordError, json.JSONDecodeError) as exc:
            print(f"bench/growth.py: {exc}", file=sys.stderr)
            return 2
        render_docs(record, args.docs, args.plot)
        print(table(record))
        print(f"wrote {args.plot} and the growth section of {args.docs}")
        return 0
    if args.quick:
        args.sizes = list(QUICK)
    args.subscriptions = [s for s in args.subscriptions if s > 0]
    LOG_LEVEL[0] = args.hub_log_level
    args.files = raise_files(2 * max(args.idle, default=0) + 50_000)
    command = "bench/growth.py " + " ".join(sys.argv[1:] if argv is None else argv)
    run = Run(command.strip(), args.label, append=args.append)
    print(
        f"rshub growth curve: resources {args.sizes}, subscriptions {args.subscriptions}, "
        f"idle {args.idle}; RLIMIT_NOFILE {args.files:,}; {os.cpu_count()} CPUs; "
        f"{run.record['date']}, load {run.load_start}, commit {run.record['commit']}",
        flush=True,
    )
    with bench_run("rshub-growth-", args.keep) as harness:
        try:
            redis_url = harness.redis.start()
            asyncio.run(conduct(args, run, harness.procs, redis_url, harness.redis.pid or 0))
        except FAILURES as exc:
            run.write()
            return harness.failed("benchmark", exc)
        except KeyboardInterrupt:
            run.note(f"{run.current} not reached: interrupted at {render.utc_now()}")
            run.write()
            raise
    run.write()
    if run.record["figures"]:
        print(f"\nrecorded in {RESULTS.relative_to(ROOT)}\n")
        print(table(newest_record()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
