"""The benchmark records in bench/results/: every record follows the schema, docs/benchmarks.md
shows what they say (``bench/render.py --check``), and what the benches append is a record."""

from __future__ import annotations

import copy
import importlib
import json
import math
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench import render
from bench.hub import Row, run_record

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "benchmarks.md"
RENDER = ROOT / "bench" / "render.py"


def render_cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(RENDER), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


def raw_records() -> list[tuple[str, dict[str, object]]]:
    found = []
    for path in sorted(render.RESULTS.glob("*.jsonl")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            found.append((f"{path.name}:{n}", json.loads(line)))
    return found


def test_every_record_follows_the_schema() -> None:
    records = render.load_records()
    index = render.load_index()
    render.check_index(index, records)
    assert len(records) == len(raw_records()) > 200
    assert {r.bench for r in records} == {b.name for b in index}
    for record in records:
        assert record.figures, record.where
        assert record.machine.cores >= 1 and record.machine.host
        assert record.code in render.CODES
        for figure in record.figures:
            assert figure.unit in render.UNITS, (record.where, figure.name)
            numbers = [figure.numbers] + [b for b in (figure.ratio,) if b]
            if figure.baseline is not None and figure.baseline.numbers is not None:
                assert figure.baseline.unit in render.UNITS
                numbers.append(figure.baseline.numbers)
            for n in numbers:
                values = [*n.runs, *(x for x in (n.value, n.low, n.high) if x is not None)]
                assert values and all(math.isfinite(v) for v in values), (record.where, figure)


def test_every_listed_figure_is_current_in_a_run_of_main() -> None:
    rendered = render.current(render.load_index(), render.load_records(), None)
    for bench in render.load_index():
        for name in bench.headline:
            assert f"| {name} |" in rendered


def test_the_docs_show_the_current_figures() -> None:
    done = render_cli("--check", DOCS)
    assert done.returncode == 0, done.stdout + done.stderr
    assert render.BEGIN in DOCS.read_text(encoding="utf-8")


def test_a_tampered_table_fails_the_check(tmp_path: Path) -> None:
    text = DOCS.read_text(encoding="utf-8")
    block = text.split(render.BEGIN)[1].split(render.END)[0]
    row = next(line for line in block.splitlines() if "rshub serve exec → event" in line)
    changed = row.replace("863 ms", "263 ms")
    assert changed != row
    tampered = tmp_path / "benchmarks.md"
    tampered.write_text(text.replace(row, changed), encoding="utf-8")
    done = render_cli("--check", tampered)
    assert done.returncode == 1
    assert "-" + changed in done.stdout and "+" + row in done.stdout
    dropped = tmp_path / "dropped.md"
    dropped.write_text(text.replace(row + "\n", ""), encoding="utf-8")
    assert render_cli("--check", dropped).returncode == 1
    unmarked = tmp_path / "unmarked.md"
    unmarked.write_text(text.replace(render.END, ""), encoding="utf-8")
    done = render_cli("--check", unmarked)
    assert done.returncode == 1 and "needs the lines" in done.stdout


def test_update_writes_the_table_check_then_passes(tmp_path: Path) -> None:
    stale = tmp_path / "benchmarks.md"
    stale.write_text(f"# x\n\n{render.BEGIN}\nold\n{render.END}\ntail\n", encoding="utf-8")
    assert render_cli("--check", stale).returncode == 1
    assert render_cli("--update", stale).returncode == 0
    assert render_cli("--check", stale).returncode == 0
    assert stale.read_text(encoding="utf-8").endswith(f"{render.END}\ntail\n")


VALID: dict[str, object] = {
    "bench": "hub",
    "command": "bench/hub.py --quick",
    "date": "2026-12-01T10:00Z",
    "machine": {"host": "a VM", "cores": 2, "load": "0.5"},
    "figures": [
        {
            "name": "4. WebSub latency p50 @20 changes/s",
            "unit": "ms",
            "runs": [2.0, 2.5],
            "baseline": {"name": "bare fan-out", "runs": [1.0, 1.2]},
            "ratio": {"min": 1.9, "max": 2.1},
            "target": "<= 3",
            "met": "2 of 2",
        }
    ],
}


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda r: r.pop("bench"), "'bench' is required"),
        (lambda r: r.update(date="yesterday"), "is not YYYY-MM-DD"),
        (lambda r: r.update(until="2026-11-01T00:00Z"), "before date"),
        (lambda r: r.update(code="someday"), "code 'someday'"),
        (lambda r: r.update(extra=1), "unknown keys ['extra']"),
        (lambda r: r["machine"].update(cores=True), "cores"),
        (lambda r: r.update(figures=[]), "non-empty list"),
        (lambda r: r["figures"][0].update(unit="furlongs"), "unit 'furlongs'"),
        (lambda r: r["figures"][0].update(runs=["2.0"]), "'2.0' is not a number"),
        (lambda r: r["figures"][0].update(runs=[True]), "True is not a number"),
        (lambda r: r["figures"][0].update(value=float("nan")), "is not finite"),
        (lambda r: r["figures"][0].pop("runs"), "needs 'value', 'runs' or 'min' and 'max'"),
        (lambda r: r["figures"][0]["ratio"].pop("max"), "'min' and 'max' go together"),
        (lambda r: r["figures"][0].update(min=3, max=2), "min 3.0 > max 2.0"),
        (lambda r: r["figures"][0]["baseline"].update(unit="parsecs"), "unit 'parsecs'"),
        (lambda r: r["figures"].append(copy.deepcopy(r["figures"][0])), "given twice"),
    ],
)
def test_a_record_off_the_schema_is_refused_naming_why(change: object, says: str) -> None:
    record = copy.deepcopy(VALID)
    render.parse_record(copy.deepcopy(record), "ok")
    assert callable(change)
    change(record)
    with pytest.raises(render.RecordError) as caught:
        render.parse_record(record, "here")
    assert says in str(caught.value) and str(caught.value).startswith("here")


def test_seeded_fuzz_of_records_raises_nothing_but_record_errors() -> None:
    rng = random.Random(20261202)
    junk: list[object] = [None, True, 0, -1, 1.5, "", "x", [], {}, [1, "a"], {"a": 1}, math.inf]
    originals = [r for _, r in raw_records()][::7]
    for _ in range(600):
        record = copy.deepcopy(rng.choice([*originals, VALID]))
        for _ in range(rng.randint(1, 3)):
            holder: object = record
            path = []
            while isinstance(holder, dict | list) and holder and rng.random() < 0.7:
                key = rng.choice(list(holder) if isinstance(holder, dict) else range(len(holder)))
                path.append((holder, key))
                holder = holder[key]  # type: ignore[index]
            if path:
                parent, key = path[-1]
                if rng.random() < 0.3 and isinstance(parent, dict):
                    del parent[key]
                else:
                    parent[key] = copy.deepcopy(rng.choice(junk))  # type: ignore[index]
        try:
            render.parse_record(record, "fuzz")
        except render.RecordError:
            pass


def isolated_results(tmp_path: Path) -> Path:
    results = tmp_path / "results"
    shutil.copytree(render.RESULTS, results)
    return results


def test_add_appends_checked_records_all_or_none(tmp_path: Path) -> None:
    results = isolated_results(tmp_path)
    before = (results / "hub.jsonl").read_text(encoding="utf-8")
    bad = copy.deepcopy(VALID)
    bad["figures"][0]["unit"] = "furlongs"  # type: ignore[index]
    batch = tmp_path / "batch.jsonl"
    batch.write_text(json.dumps(VALID) + "\n" + json.dumps(bad) + "\n", encoding="utf-8")
    done = render_cli("--results", results, "--add", batch)
    assert done.returncode == 2 and "furlongs" in done.stderr
    assert (results / "hub.jsonl").read_text(encoding="utf-8") == before
    unlisted = dict(VALID, bench="tea")
    (tmp_path / "tea.json").write_text(json.dumps(unlisted), encoding="utf-8")
    done = render_cli("--results", results, "--add", tmp_path / "tea.json")
    assert done.returncode == 2 and "'tea' is not in" in done.stderr
    good = tmp_path / "good.json"
    good.write_text(json.dumps(VALID, indent=2), encoding="utf-8")
    done = render_cli("--results", results, "--add", good)
    assert done.returncode == 0, done.stderr
    lines = (results / "hub.jsonl").read_text(encoding="utf-8").splitlines()
    assert lines[:-1] == before.splitlines() and json.loads(lines[-1]) == VALID
    history = render_cli("--results", results, "--history", "--bench", "hub")
    assert history.returncode == 0 and "2026-12-01 10:00, a VM, load 0.5" in history.stdout


def test_hub_record_is_a_record_naming_the_current_figures() -> None:
    def run(k: int) -> list[Row]:
        return [
            Row("1. single-change publishes/s (c=32, 2 s)", 9000.0 + k, "/s", 14000.0,
                "bare aiohttp 204", ("ratio", 0.8)),
            Row("3. WebSocket events/s delivered (100 clients)", 3e6, "/s", 4e6, "bare",
                ("ratio", 0.5)),
            Row("3. WebSocket latency p99 @1,000 changes/s", 3.5, "ms", target=("max", 10),
                complete=k != 1),
        ]  # fmt: skip

    raw = run_record([run(k) for k in range(3)], "bench/hub.py --quick --repeat 3",
                     "2026-12-02T10:00Z", ROOT)  # fmt: skip
    record = render.parse_record(json.loads(json.dumps(raw)), "hub --record")
    figures = {f.name: f for f in record.figures}
    ratio = figures["1. single-change publishes ÷ bare aiohttp 204"]
    assert ratio.numbers.runs == (0.643, 0.643, 0.643) and ratio.met == "3 of 3"
    assert figures["3. WebSocket events/s ÷ bare broadcast"].numbers.runs == (0.75,) * 3
    p99 = figures["3. WebSocket latency p99 @1,000 changes/s"]
    assert p99.numbers.runs == (3.5, 3.5) and p99.met == "2 of 3" and "1 of 3" in (p99.note or "")
    assert figures["1. single-change publishes/s (c=32, 2 s)"].met == "0 of 3"
    hub = next(b for b in render.load_index() if b.name == "hub")
    assert {"1. single-change publishes ÷ bare aiohttp 204"} <= set(hub.headline)


def test_peer_nchan_record_is_a_record(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    peer = importlib.import_module("peer_nchan")

    def side(ws: float, restart: float) -> object:
        figures = peer.Figures()
        figures.values = {"WS p50 ms (100 WS)": ws, "restart→serving s": restart, "odd row": 1.0}
        return figures

    runs = [(side(ws, 0.35), side(1.0, 0.02)) for ws in (1.2, 1.25, 1.4, 1.5, 1.6)]
    raw = peer.run_record(runs, "bench/peer_nchan.py --repeat 5", "2026-12-02T10:00Z", ROOT, False)
    record = render.parse_record(json.loads(json.dumps(raw)), "peer_nchan --record")
    ws, restart = record.figures
    assert ws.name == "WS p50 (100 WS)" and ws.unit == "ms" and ws.numbers.value == 1.4
    assert ws.baseline is not None and ws.baseline.name == "Nchan"
    assert ws.met == "2 of 5 (NOT met)" and ws.ratio is not None and ws.ratio.high == 1.6
    assert restart.name == "restart→serving" and restart.met == "0 of 5 (NOT met)"
    alone = peer.run_record(runs, "x", "2026-12-02T10:00Z", ROOT, True)
    assert [f["name"] for f in alone["figures"]] == [
        "WS p50 (100 WS) [rshub alone]",
        "restart→serving",
    ]


def test_dump_baseline_record_is_a_record() -> None:
    from bench.dump_baseline import Measured, record

    def run(k: int) -> list[Measured]:
        return [
            Measured("dump", 10.0 + k, 9, 1_100_000, 1_000_000),
            Measured("get", 40.0, 10_004, 4_000_000, 1_000_000),
            Measured("write", 3.0, 0, 1, 0),
        ]

    raw = record({10_000: [run(0), run(1)]}, "bench/dump_baseline.py", "2026-12-02T17:00Z", "1024")
    parsed = render.parse_record(json.loads(json.dumps(raw)), "dump_baseline --record")
    figures = {f.name: f for f in parsed.figures}
    wall = figures["10,000 files: wall time, Resource Dump"]
    assert wall.numbers.runs == (10.0, 11.0) and wall.baseline is not None
    assert wall.ratio is not None and wall.ratio.runs == (0.25, 0.275)
    assert figures["10,000 files: requests, Resource Dump"].numbers.runs == (9, 9)
    efficiency = figures["10,000 files: transfer efficiency, Resource Dump"]
    assert efficiency.numbers.runs == (0.909, 0.909)
    assert efficiency.baseline is not None and efficiency.baseline.numbers is not None
    assert efficiency.baseline.numbers.runs == (0.25, 0.25)
    assert parsed.runs == 2 and parsed.bench == "dump_baseline"
