"""Render the benchmark records in ``bench/results/`` as Markdown, and check the docs against them.

Every benchmark run recorded so far is one JSON object on one line of
``bench/results/<bench>.jsonl`` (JSON Lines: a new run is one appended line). A record::

    bench      the file's name: hub, peer_nchan, documents, ...           (required)
    command    the command line as run                                    (required)
    date       UTC start, "YYYY-MM-DD" or "YYYY-MM-DDThh:mmZ"; until: its end (date required)
    commit     the hub's commit measured, where known
    code       "main" (the default: main's code then, or the change that became main's),
               "earlier" (the code a change replaced, run beside it), "branch" (never merged)
    label      what this run is, beside the others of its day
    machine    {"host": ..., "cores": 2, "load": "1.4"}                  (host, cores required)
    runs       how many runs the figures summarise
    figures    [{"name", "unit", and "value" (one run, or the median), "runs" (one value
               per run) and/or "min"/"max" (a range over runs); "baseline": {"name", and the
               same numbers, "unit" if it is not the figure's}: measured in the same run;
               "ratio": the same numbers; "target", "met": in how many runs; "note"}]
    note       what the run found and why, as its log said it
    source     where the log was (git object of the docs it came from), for runs before records

``bench/results/benchmarks.json`` lists the benchmarks, the command that reproduces each, and
the figures shown as current.

    python bench/render.py                        # current: each listed figure's newest run
    python bench/render.py --history [--notes]    # every run, newest first
    python bench/render.py --bench hub --history  # one benchmark
    python bench/render.py --check docs/benchmarks.md
    python bench/render.py --update docs/benchmarks.md  # write the table between the markers
    python bench/render.py --add run.json         # check records and append them

A figure is current in the newest record of ``main`` code that holds it (a partial run, e.g.
``--only websub``, updates only the figures it measured). ``--check`` compares the table
between the markers in the given file with what the records say and exits 1 on a difference,
so the docs cannot drift from the records. Standard library only; ``bench/hub.py --record``
and ``bench/peer_nchan.py --record`` append their runs through :func:`append_record`.
"""

from __future__ import annotations

import argparse
import datetime
import difflib
import json
import math
import os
import re
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
INDEX_NAME = "benchmarks.json"
BEGIN = "<!-- current figures: rendered by `python bench/render.py`, checked by --check -->"
END = "<!-- end of current figures -->"

#: The units a figure, its baseline or a ratio may carry; a unit outside this set is a typo.
UNITS = frozenset(
    {
        "/s",
        "entries/s",
        "docs/s",
        "changes/s",
        "events/s",
        "deliveries/s",
        "resources/s",
        "publishes per core-second",
        "M events/s",
        "M entries/s",
        "ms",
        "µs",
        "ns",
        "s",
        "B",
        "KiB",
        "MiB",
        "MB",
        "cores",
        "calls",
        "events",
        "changes",
        "entries",
        "subscribers",
        "bombs",
        "probes",
        "requests",
        "switches",
        "instructions",
        "k instructions",
        "M instructions",
        "ratio",
        "%",
        "×",
        "× bare lxml",
        "× bare aiohttp",
        "× bare broadcast",
        "× XADD",
        "× aiohttp client",
        "× single process",
        "× --workers 1",
        "× Nchan",
        "× Resource List poll",
    }
)
CODES = ("main", "earlier", "branch")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}Z)?\Z")
_RECORD_KEYS = frozenset(
    {
        "bench",
        "command",
        "date",
        "until",
        "commit",
        "code",
        "label",
        "machine",
        "runs",
        "figures",
        "note",
        "source",
    }
)
_FIGURE_KEYS = frozenset(
    {"name", "unit", "value", "runs", "min", "max", "baseline", "ratio", "target", "met", "note"}
)
_NUMBER_KEYS = ("value", "runs", "min", "max")


class RecordError(ValueError):
    """A record, or the index, that does not follow the schema; the message names where."""


@dataclass(frozen=True)
class Numbers:
    """A measured quantity: one value, one value per run, and/or a range over runs."""

    value: float | None
    runs: tuple[float, ...]
    low: float | None
    high: float | None

    def text(self) -> str:
        """The quantity as the tables show it (a value, else the range over the runs)."""
        if self.value is not None:
            return number(self.value)
        if self.runs:
            return span(min(self.runs), max(self.runs))
        assert self.low is not None and self.high is not None
        return span(self.low, self.high)


@dataclass(frozen=True)
class Baseline:
    """What the figure is compared with, measured in the same run."""

    name: str
    unit: str
    numbers: Numbers | None

    def text(self) -> str:
        if self.numbers is None:
            return self.name
        return f"{self.name}: {with_unit(self.numbers.text(), self.unit)}"


@dataclass(frozen=True)
class Figure:
    """One measured figure of a run."""

    name: str
    unit: str
    numbers: Numbers
    baseline: Baseline | None
    ratio: Numbers | None
    target: str | None
    met: str | None
    note: str | None

    def value_text(self) -> str:
        return with_unit(self.numbers.text(), self.unit)

    def target_text(self) -> str:
        parts = []
        if self.ratio is not None:
            parts.append(f"{self.ratio.text()}×")
        if self.target is not None:
            parts.append(self.target + (f": {self.met}" if self.met else ""))
        elif self.met is not None:
            parts.append(self.met)
        return "; ".join(parts) or "—"


@dataclass(frozen=True)
class Machine:
    """Where a run ran: the host, its cores, the load average where the log gives it."""

    host: str
    cores: int
    load: str | None


@dataclass(frozen=True)
class Record:
    """One run (or one series of runs) of one benchmark."""

    bench: str
    command: str
    date: str
    until: str | None
    commit: str | None
    code: str
    label: str | None
    machine: Machine
    runs: int | None
    figures: tuple[Figure, ...]
    note: str | None
    source: str | None
    where: str

    def when(self) -> str:
        """The date as the tables show it: ``2026-11-25 18:22-18:25``."""
        text = self.date.replace("T", " ").removesuffix("Z")
        if self.until is not None and self.until != self.date:
            end = self.until.replace("T", " ").removesuffix("Z")
            same_day = end[:10] == text[:10]
            text += "-" + (end[11:] if same_day and len(end) > 10 else end)
        return text

    def run_text(self) -> str:
        parts = [self.when(), self.machine.host]
        load = self.machine.load
        if load is not None:
            parts.append(f"load {load}" if load[0].isdigit() or load[0] in "<~" else load)
        if self.commit is not None:
            parts.append(self.commit)
        if self.code != "main":
            parts.append(self.code)
        return ", ".join(parts)


@dataclass(frozen=True)
class Benchmark:
    """An entry of the index: how to reproduce a benchmark, which figures are current."""

    name: str
    command: str
    headline: tuple[str, ...]


def number(x: float) -> str:
    """``108454`` → ``108,454``; ``0.056`` → ``0.056``; ``2.0`` → ``2``."""
    if x == int(x) and abs(x) < 1e15:
        return f"{int(x):,}"
    text = repr(x)
    if "e" in text:
        return f"{x:g}"
    whole, _, fraction = text.partition(".")
    sign = "-" if whole.startswith("-") else ""
    return f"{sign}{int(whole.lstrip('-')):,}.{fraction}"


def span(low: float, high: float) -> str:
    return number(low) if low == high else f"{number(low)}-{number(high)}"


def with_unit(text: str, unit: str) -> str:
    if unit == "%":
        return text + "%"
    if unit == "ratio":
        return text
    return f"{text} {unit}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


# -- reading and checking records ---------------------------------------------------------


def _expect_str(data: Mapping[str, object], key: str, where: str, *, required: bool) -> str | None:
    value = data.get(key)
    if value is None:
        if required:
            raise RecordError(f"{where}: {key!r} is required")
        return None
    if not isinstance(value, str) or not value.strip():
        raise RecordError(f"{where}: {key!r} must be a non-empty string")
    return value


def _expect_number(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RecordError(f"{where}: {value!r} is not a number")
    if not math.isfinite(value):
        raise RecordError(f"{where}: {value!r} is not finite")
    return float(value)


def _expect_unit(data: Mapping[str, object], where: str, *, required: bool) -> str:
    unit = _expect_str(data, "unit", where, required=required)
    if unit is None:
        return ""
    if unit not in UNITS:
        raise RecordError(f"{where}: unit {unit!r} is not one of bench/render.py's UNITS")
    return unit


def _numbers(data: Mapping[str, object], where: str, *, required: bool) -> Numbers | None:
    if not any(key in data for key in _NUMBER_KEYS):
        if required:
            raise RecordError(f"{where}: needs 'value', 'runs' or 'min' and 'max'")
        return None
    value = None if "value" not in data else _expect_number(data["value"], f"{where}.value")
    runs: tuple[float, ...] = ()
    if "runs" in data:
        raw = data["runs"]
        if not isinstance(raw, list) or not raw:
            raise RecordError(f"{where}.runs: must be a non-empty list of numbers")
        runs = tuple(_expect_number(x, f"{where}.runs") for x in raw)
    low = None if "min" not in data else _expect_number(data["min"], f"{where}.min")
    high = None if "max" not in data else _expect_number(data["max"], f"{where}.max")
    if (low is None) != (high is None):
        raise RecordError(f"{where}: 'min' and 'max' go together")
    if low is not None and high is not None and low > high:
        raise RecordError(f"{where}: min {low} > max {high}")
    return Numbers(value, runs, low, high)


def _mapping(value: object, where: str) -> Mapping[str, object]:
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise RecordError(f"{where}: must be a JSON object")
    return value


def _figure(raw: object, where: str) -> Figure:
    data = _mapping(raw, where)
    unknown = set(data) - _FIGURE_KEYS
    if unknown:
        raise RecordError(f"{where}: unknown keys {sorted(unknown)}")
    name = _expect_str(data, "name", where, required=True)
    assert name is not None
    where = f"{where} ({name!r})"
    unit = _expect_unit(data, where, required=True)
    numbers = _numbers(data, where, required=True)
    assert numbers is not None
    baseline = None
    if "baseline" in data:
        base = _mapping(data["baseline"], f"{where}.baseline")
        unknown = set(base) - {"name", "unit", *_NUMBER_KEYS}
        if unknown:
            raise RecordError(f"{where}.baseline: unknown keys {sorted(unknown)}")
        base_name = _expect_str(base, "name", f"{where}.baseline", required=True)
        assert base_name is not None
        base_numbers = _numbers(base, f"{where}.baseline", required=False)
        base_unit = _expect_unit(base, f"{where}.baseline", required=False) or unit
        baseline = Baseline(base_name, base_unit, base_numbers)
    ratio = None
    if "ratio" in data:
        ratio_data = _mapping(data["ratio"], f"{where}.ratio")
        if set(ratio_data) - set(_NUMBER_KEYS):
            raise RecordError(f"{where}.ratio: only {_NUMBER_KEYS}")
        ratio = _numbers(ratio_data, f"{where}.ratio", required=True)
    return Figure(
        name=name,
        unit=unit,
        numbers=numbers,
        baseline=baseline,
        ratio=ratio,
        target=_expect_str(data, "target", where, required=False),
        met=_expect_str(data, "met", where, required=False),
        note=_expect_str(data, "note", where, required=False),
    )


def parse_record(raw: object, where: str) -> Record:
    """A record from its decoded JSON, every field checked; :class:`RecordError` if not."""
    data = _mapping(raw, where)
    unknown = set(data) - _RECORD_KEYS
    if unknown:
        raise RecordError(f"{where}: unknown keys {sorted(unknown)}")
    bench = _expect_str(data, "bench", where, required=True)
    command = _expect_str(data, "command", where, required=True)
    date = _expect_str(data, "date", where, required=True)
    assert bench is not None and command is not None and date is not None
    until = _expect_str(data, "until", where, required=False)
    for key, stamp in (("date", date), ("until", until)):
        if stamp is not None and not _DATE.match(stamp):
            raise RecordError(f"{where}: {key} {stamp!r} is not YYYY-MM-DD or YYYY-MM-DDThh:mmZ")
    if until is not None and until < date:
        raise RecordError(f"{where}: until {until} is before date {date}")
    code = _expect_str(data, "code", where, required=False) or "main"
    if code not in CODES:
        raise RecordError(f"{where}: code {code!r} is not one of {CODES}")
    machine_data = _mapping(data.get("machine"), f"{where}.machine")
    host = _expect_str(machine_data, "host", f"{where}.machine", required=True)
    cores = machine_data.get("cores")
    if isinstance(cores, bool) or not isinstance(cores, int) or cores < 1:
        raise RecordError(f"{where}.machine.cores: a positive integer is required")
    if set(machine_data) - {"host", "cores", "load"}:
        raise RecordError(f"{where}.machine: only 'host', 'cores' and 'load'")
    assert host is not None
    load = _expect_str(machine_data, "load", f"{where}.machine", required=False)
    runs = data.get("runs")
    if runs is not None and (isinstance(runs, bool) or not isinstance(runs, int) or runs < 1):
        raise RecordError(f"{where}.runs: a positive integer")
    raw_figures = data.get("figures")
    if not isinstance(raw_figures, list) or not raw_figures:
        raise RecordError(f"{where}: 'figures' must be a non-empty list")
    figures = tuple(_figure(f, f"{where}.figures[{i}]") for i, f in enumerate(raw_figures))
    names = [f.name for f in figures]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise RecordError(f"{where}: figure names given twice: {twice}")
    return Record(
        bench=bench,
        command=command,
        date=date,
        until=until,
        commit=_expect_str(data, "commit", where, required=False),
        code=code,
        label=_expect_str(data, "label", where, required=False),
        machine=Machine(host, cores, load),
        runs=runs,
        figures=figures,
        note=_expect_str(data, "note", where, required=False),
        source=_expect_str(data, "source", where, required=False),
        where=where,
    )


def load_records(directory: Path = RESULTS) -> list[Record]:
    """Every record of every ``*.jsonl`` file; a record's bench must be its file's name."""
    records = []
    for path in sorted(directory.glob("*.jsonl")):
        for number_, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            where = f"{path.name}:{number_}"
            try:
                raw = json.loads(line)
            except json.JSONDecodeError as exc:
                raise RecordError(f"{where}: not JSON ({exc})") from None
            record = parse_record(raw, where)
            if record.bench != path.stem:
                raise RecordError(f"{where}: bench {record.bench!r} in {path.name}")
            records.append(record)
    return records


def load_index(directory: Path = RESULTS) -> list[Benchmark]:
    """The benchmarks in the order the current table shows them."""
    path = directory / INDEX_NAME
    raw = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(raw, list):
        raise RecordError(f"{path.name}: a JSON list of benchmarks")
    index = []
    for i, entry in enumerate(raw):
        where = f"{path.name}[{i}]"
        data = _mapping(entry, where)
        if set(data) - {"bench", "command", "headline"}:
            raise RecordError(f"{where}: only 'bench', 'command' and 'headline'")
        name = _expect_str(data, "bench", where, required=True)
        command = _expect_str(data, "command", where, required=True)
        headline = data.get("headline")
        if not isinstance(headline, list) or not all(isinstance(h, str) for h in headline):
            raise RecordError(f"{where}.headline: a list of figure names")
        assert name is not None and command is not None
        index.append(Benchmark(name, command, tuple(str(h) for h in headline)))
    return index


def check_index(index: Sequence[Benchmark], records: Sequence[Record]) -> None:
    """Every record's benchmark is listed, every headline figure is in a run of main."""
    listed = {b.name for b in index}
    for record in records:
        if record.bench not in listed:
            raise RecordError(f"{record.where}: bench {record.bench!r} is not in {INDEX_NAME}")
    for bench in index:
        mains = [r for r in records if r.bench == bench.name and r.code == "main"]
        held = {f.name for r in mains for f in r.figures}
        for name in bench.headline:
            if name not in held:
                raise RecordError(f"{INDEX_NAME}: {bench.name}: no run of main has {name!r}")


# -- rendering ----------------------------------------------------------------------------


def newest(records: Iterable[Record]) -> list[Record]:
    """Newest first; records of one date keep the order of their file."""
    listed = list(records)
    return sorted(listed, key=lambda r: r.date, reverse=True)


def current(index: Sequence[Benchmark], records: Sequence[Record], only: str | None) -> str:
    """The current-figures table: for each listed figure, the newest run of main holding it."""
    lines = [
        "| benchmark | figure | current | baseline, same run | ratio; target: runs met | run |",
        "|---|---|---|---|---|---|",
    ]
    for bench in index:
        if only is not None and bench.name != only:
            continue
        runs = newest(r for r in records if r.bench == bench.name and r.code == "main")
        first = True
        for name in bench.headline:
            record, figure = next((r, f) for r in runs for f in r.figures if f.name == name)
            head = f"**{bench.name}** `{bench.command}`" if first else ""
            first = False
            cells = (
                head,
                figure.name,
                figure.value_text(),
                figure.baseline.text() if figure.baseline is not None else "—",
                figure.target_text(),
                record.run_text(),
            )
            lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def history(
    index: Sequence[Benchmark], records: Sequence[Record], only: str | None, *, notes: bool
) -> str:
    """Every run, per benchmark (in the index's order), newest first."""
    out: list[str] = []
    for bench in index:
        if only is not None and bench.name != only:
            continue
        out.append(f"## {bench.name}: `{bench.command}`\n")
        for record in newest(r for r in records if r.bench == bench.name):
            out.extend(_run(record, notes=notes))
    return "\n".join(out)


def _run(record: Record, *, notes: bool) -> list[str]:
    title = record.run_text() + (f": {record.label}" if record.label is not None else "")
    runs = f", {record.runs} runs" if record.runs else ""
    lines = [f"### {title}\n", f"`{record.command}`{runs}", ""]
    lines.append("| figure | value | baseline, same run | ratio; target: runs met |")
    lines.append("|---|---|---|---|")
    for figure in record.figures:
        value = figure.value_text()
        if len(figure.numbers.runs) > 1:
            value += " (" + ", ".join(number(x) for x in figure.numbers.runs) + ")"
        baseline = figure.baseline.text() if figure.baseline is not None else "—"
        cells = (figure.name, value, baseline, figure.target_text())
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    lines.append("")
    if notes:
        texts = [record.note or ""] + [f"{f.name}: {f.note}" for f in record.figures if f.note]
        for text in filter(None, texts):
            lines.extend("> " + line if line else ">" for line in text.splitlines())
            lines.append("")
    return lines


def check(document: Path, rendered: str) -> list[str]:
    """The differences between the table between the markers in ``document`` and ``rendered``."""
    text = document.read_text(encoding="utf-8")
    if text.count(BEGIN) != 1 or text.count(END) != 1:
        return [f"{document}: needs the lines {BEGIN!r} and {END!r} once each"]
    block = text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n") + "\n"
    if block == rendered:
        return []
    return list(
        difflib.unified_diff(
            block.splitlines(keepends=True),
            rendered.splitlines(keepends=True),
            f"{document} (between the markers)",
            "python bench/render.py",
        )
    )


def update(document: Path, rendered: str) -> bool:
    """Put ``rendered`` between the markers in ``document``; False if they are not there once."""
    text = document.read_text(encoding="utf-8")
    if text.count(BEGIN) != 1 or text.count(END) != 1:
        return False
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    document.write_text(f"{head}{BEGIN}\n{rendered}{END}{tail}", encoding="utf-8")
    return True


def append_record(record: Mapping[str, object], directory: Path = RESULTS) -> Path:
    """Check ``record`` and append it as one line to ``<directory>/<bench>.jsonl``.

    What a benchmark's ``--record`` calls: the run becomes history without hand-editing."""
    parsed = parse_record(dict(record), "new record")
    path = directory / f"{parsed.bench}.jsonl"
    line = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
    with path.open("a", encoding="utf-8") as out:
        out.write(line + "\n")
    return path


def read_new(path: Path) -> list[object]:
    """The records of ``path``: one JSON object, a JSON list of them, or JSON Lines."""
    text = path.read_text(encoding="utf-8")
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return whole if isinstance(whole, list) else [whole]


def add(path: Path, index: Sequence[Benchmark], directory: Path) -> int:
    """Append the records of ``path`` to their benchmarks' files: all of them, or none."""
    listed = {b.name for b in index}
    try:
        raw = read_new(path)
        for i, item in enumerate(raw):
            record = parse_record(item, f"{path}[{i}]")
            if record.bench not in listed:
                raise RecordError(f"{path}[{i}]: bench {record.bench!r} is not in {INDEX_NAME}")
    except (RecordError, json.JSONDecodeError) as exc:
        print(f"bench/render.py: {path}: {exc}", file=sys.stderr)
        return 2
    for item in raw:
        assert isinstance(item, dict)
        print(f"appended to {append_record(item, directory)}")
    return 0


def utc_now() -> str:
    """Now, as a record's ``date``."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%MZ")


def this_machine() -> dict[str, object]:
    """A record's ``machine`` for this host: its CPU model, cores and 1-minute load now."""
    host = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                host = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"host": host, "cores": os.cpu_count() or 1, "load": f"{os.getloadavg()[0]:.1f}"}


def commit_of(checkout: Path) -> str | None:
    """The short commit of ``checkout``'s HEAD, ``+`` if its tracked files differ from it."""
    try:
        head = subprocess.run(
            ["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(checkout), "diff", "--quiet", "HEAD", "--"], check=False
        ).returncode
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+" if dirty else "")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--history", action="store_true", help="every run, not just current")
    parser.add_argument("--notes", action="store_true", help="with --history: each run's notes")
    parser.add_argument("--bench", metavar="NAME", help="one benchmark (a file's name)")
    parser.add_argument(
        "--check", metavar="FILE", type=Path, help="exit 1 if FILE's current table differs"
    )
    parser.add_argument(
        "--update", metavar="FILE", type=Path, help="write the current table into FILE"
    )
    parser.add_argument(
        "--add", metavar="FILE", type=Path, help="check the records in FILE (JSON), append them"
    )
    parser.add_argument("--results", type=Path, default=RESULTS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        records = load_records(args.results)
        index = load_index(args.results)
        check_index(index, records)
    except (RecordError, OSError, json.JSONDecodeError) as exc:
        print(f"bench/render.py: {exc}", file=sys.stderr)
        return 2
    if args.add is not None:
        return add(args.add, index, args.results)
    if args.bench is not None and args.bench not in {r.bench for r in records}:
        print(f"bench/render.py: no records of {args.bench!r}", file=sys.stderr)
        return 2
    if args.check is not None:
        differences = check(args.check, current(index, records, None))
        sys.stdout.writelines(differences)
        if differences:
            print(f"\n{args.check}: its current figures are not the records'", file=sys.stderr)
            print("render them with: python bench/render.py", file=sys.stderr)
            return 1
        return 0
    if args.update is not None:
        if not update(args.update, current(index, records, None)):
            print(f"bench/render.py: {args.update}: needs {BEGIN!r} and {END!r}", file=sys.stderr)
            return 2
        return 0
    if args.history:
        sys.stdout.write(history(index, records, args.bench, notes=args.notes))
    else:
        sys.stdout.write(current(index, records, args.bench))
    return 0


if __name__ == "__main__":
    sys.exit(main())
