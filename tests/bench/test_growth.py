"""bench/growth.py's pure part: a growth record -> its table, its docs section, its plot."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import growth, render


def record(figures: list[dict[str, object]], note: str | None = None) -> render.Record:
    raw: dict[str, object] = {
        "bench": "growth",
        "command": "bench/growth.py --quick",
        "date": "2026-12-02T19:00Z",
        "until": "2026-12-02T19:20Z",
        "commit": "abc1234",
        "machine": {"host": "Test CPU", "cores": 2, "load": "3.0-4.0"},
        "figures": figures,
    }
    if note is not None:
        raw["note"] = note
    return render.parse_record(raw, "test")


def figures(axis: str, size: int, values: dict[str, float]) -> list[dict[str, object]]:
    return [
        {"name": growth.figure_name(axis, size, name), "unit": growth.unit_of(name), "value": value}
        for name, value in values.items()
    ]


BIG = {
    "changes/s": 15_234.0,
    "changes/s, a fresh topic after": 16_000.0,
    "Redis B per resource": 476.2,
    "Redis B per resource, the fold": 143.0,
    "first byte ms: /healthz": 1.2,
    "first byte ms: Capability List": 3.0,
    "first byte ms: changes.xml": 2_500.0,
    "first byte ms: changes.xml, the small topic": 9_999.0,  # a baseline: never the slowest
    "first byte ms: Resource List, first request": 99_999.0,  # a 503: never the slowest
    "first byte ms: Resource List index": 12.0,
    "Resource List first snapshot s": 41.5,
    "restart: start -> /healthz s": 1.05,
    "restart: start -> /healthz s, an empty hub": 0.9,
    "p99 ms, 0 idle": 7.4,
    "p99 ms, 10000 idle": 9.25,
}
SUBS = {
    "deliveries/s": 2_950.0,
    "Redis B per subscription": 720.0,
    "first byte ms: /healthz": 1.0,
    "first byte ms: Change List index": 4.5,
    "restart: start -> /healthz s": 4.4,
    "restart: start -> every callback s": 7.0,
    "p99 ms, 0 idle": 6.0,
}


def test_units_follow_the_names_bench_scale_gives() -> None:
    assert growth.unit_of("changes/s, a fresh topic before") == "changes/s"
    assert growth.unit_of("deliveries/s") == "deliveries/s"
    assert growth.unit_of("subscribe requests/s") == "/s"
    assert growth.unit_of("p99 ms, 100000 idle") == "ms"
    assert growth.unit_of("Redis B per resource") == "B"
    assert growth.unit_of("restart: start -> /healthz s") == "s"
    assert all(growth.unit_of(name) in render.UNITS for name in [*BIG, *SUBS])


def test_a_record_renders_a_row_per_size_with_its_baselines() -> None:
    run = record(
        figures("resources", 1_000_000, BIG)
        + figures("subscriptions", 1_000, SUBS)
        + figures("resources", 10_000, {"changes/s": 9_000.0, "p99 ms, 0 idle": 5.0})
    )
    text = growth.table(run)
    lines = text.splitlines()
    assert lines[0].split(" | ")[-2:] == ["active p99, 0 idle", "active p99, 10k idle |"]
    rows = [line.split(" | ") for line in lines[2:]]
    # resources first, smallest first; then subscriptions
    assert [r[0] for r in rows] == [
        "| 10,000 resources",
        "| 1,000,000 resources",
        "| 1,000 subscriptions",
    ]
    small, big, subs = rows
    assert small[1] == "9,000" and small[2] == "—" and small[3] == "—"
    assert big[1] == "15,234 [16,000]"
    assert big[2] == "476 B (fold 143 B)"
    assert big[3] == "2,500 ms (changes.xml) [1.20 ms]"
    assert big[4] == "41.5 s"
    assert big[5] == "1.05 s [0.90 s]"
    assert big[6:] == ["7.40 ms", "9.25 ms |"]
    assert subs[1] == "2,950 deliveries/s"
    assert subs[3] == "4.50 ms (Change List index) [1.00 ms]"
    assert subs[5] == "4.40 s (every callback 7.00 s)"
    assert subs[6:] == ["6.00 ms", "— |"]  # not measured: a dash, not a zero


def test_the_section_goes_between_its_markers_and_leaves_the_rest(tmp_path: Path) -> None:
    run = record(figures("resources", 10_000, BIG), note="- 10,000,000 resources not reached")
    block = growth.section(run)
    assert "2026-12-02 19:00-19:20, Test CPU, load 3.0-4.0, abc1234" in block
    assert "10,000,000 resources not reached" in block and "(growth.png)" in block
    other = "# Benchmarks\n\n## Someone else's\n\ntheirs\n"
    first = growth.put_section(other, block)
    assert first.startswith(other.rstrip()) and first.count(growth.BEGIN) == 1
    again = growth.put_section(first + "\n## After\n\nkept\n", "new\n")
    assert "theirs" in again and "kept" in again and "new\n" in again
    assert block not in again
    with pytest.raises(ValueError, match="once each"):
        growth.put_section(first + growth.BEGIN, block)


def test_the_plot_is_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    run = record(figures("resources", 10_000, BIG) + figures("subscriptions", 1_000, SUBS))
    png = tmp_path / "growth.png"
    growth.plot(run, png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_sizes_parse_with_suffixes() -> None:
    assert growth.parse_counts("10k,1M,100_000,10000") == [10_000, 100_000, 1_000_000]


def test_a_size_is_estimated_from_the_two_before_it() -> None:
    assert growth.estimate([], 10_000) is None
    assert growth.estimate([(10_000, 200.0)], 100_000) is None
    # 250 s at 100,000, 550 s at 1,000,000: 1/3 ms a resource on top of a fixed part
    got = growth.estimate([(100_000, 250.0), (1_000_000, 550.0)], 10_000_000)
    assert got == pytest.approx(3_550.0)
    # a smaller second size never makes the next one look quicker than the last
    assert growth.estimate([(1_000, 300.0), (10_000, 200.0)], 100_000) == 200.0


def test_a_second_invocation_adds_its_sizes_to_the_newest_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    results = tmp_path / "growth.jsonl"
    monkeypatch.setattr(growth, "RESULTS", results)
    first = growth.Run("bench/growth.py --until 20:15", "first")
    first.note("10,000,000 resources not reached: time")
    first.add("resources", 10_000, {"changes/s": 9_000.0})
    first.write()
    second = growth.Run("bench/growth.py --sizes 10M --append", "second", append=True)
    second.note("10,000,000 resources measured lean")
    second.add("resources", 10_000_000, {"changes/s": 12_000.0})
    second.write()
    assert len(results.read_text().splitlines()) == 1
    run = growth.newest_record(results)
    assert [(c.size, c.get("changes/s")) for c in growth.cells(run)] == [
        (10_000, 9_000.0),
        (10_000_000, 12_000.0),
    ]
    assert run.label == "first" and run.command.endswith(
        "; then bench/growth.py --sizes 10M --append"
    )
    assert run.note == "- 10,000,000 resources measured lean"  # the "not reached" is past
