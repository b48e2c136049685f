"""The shared state file: atomic replacement, fsyncs in the right order, typed failures."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from rsclient.exceptions import StateFileError
from rsclient.statefile import StateFile, write_atomically


def test_missing_file_is_none_and_a_save_round_trips(tmp_path: Path) -> None:
    state = StateFile(tmp_path / "deep" / "dir" / "state.json")
    assert state.load() is None
    state.save({"b": [1, 2], "a": None})
    assert state.load() == {"a": None, "b": [1, 2]}
    state.save({"c": "é"})
    assert state.load() == {"c": "é"}
    assert sorted(p.name for p in state.path.parent.iterdir()) == ["state.json"]


def test_a_failure_mid_write_leaves_the_old_file(tmp_path: Path) -> None:
    state = StateFile(tmp_path / "state.json")
    state.save({"position": 1})
    before = state.path.read_bytes()
    with pytest.raises(StateFileError, match="not JSON serializable"):
        state.save({"position": 2, "z": object()})  # json fails part-way through
    assert state.path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]  # no temporary left


class _DiskFull(OSError):
    pass


def test_a_failing_write_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "state.json"
    write_atomically(target, b"old")
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            raise _DiskFull(28, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(_DiskFull):
        write_atomically(target, b"new, half written")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]
    with pytest.raises(StateFileError, match="No space left"):
        StateFile(target).save({"new": True})
    assert target.read_bytes() == b"old"


def test_file_then_rename_then_directory_are_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "state.json"
    steps: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        steps.append("fsync dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync file")
        real_fsync(fd)

    def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        steps.append("rename")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    write_atomically(target, b"durable")
    assert steps == ["fsync file", "rename", "fsync dir"]
    assert target.read_bytes() == b"durable"
    steps.clear()
    write_atomically(target, b"fast", durable=False)
    assert steps == ["rename"] and target.read_bytes() == b"fast"


def test_new_files_get_the_umask_permissions_not_0600(tmp_path: Path) -> None:
    umask = os.umask(0o022)
    try:
        write_atomically(tmp_path / "r", b"x", temp_prefix=".rshub-tmp-r-")
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "r").stat().st_mode) == 0o644


@pytest.mark.parametrize(
    ("content", "problem"),
    [(b"{", "not JSON"), (b"[1]", "does not hold a JSON object"), (b"\xff", "cannot read")],
)
def test_unreadable_state_is_a_typed_error(tmp_path: Path, content: bytes, problem: str) -> None:
    path = tmp_path / "state.json"
    path.write_bytes(content)
    with pytest.raises(StateFileError, match=problem):
        StateFile(path).load()
