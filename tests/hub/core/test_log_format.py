"""hub.core.log_format: JSON lines with the request id; text lines tagged with it."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from hub.core.log_format import REQUEST_ID, configure


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


def test_json_lines_carry_time_level_logger_message_and_request_id(restore_logging: None) -> None:
    out = io.StringIO()
    configure("INFO", "json", out)
    log = logging.getLogger("rshub.test")
    token = REQUEST_ID.set("req-1")
    try:
        log.info("stored %d changes", 3, extra={"topic": "news"})
    finally:
        REQUEST_ID.reset(token)
    log.debug("not shown at INFO")
    [line] = out.getvalue().splitlines()
    record = json.loads(line)
    assert record["message"] == "stored 3 changes" and record["level"] == "INFO"
    assert record["logger"] == "rshub.test" and record["request_id"] == "req-1"
    assert record["topic"] == "news" and record["time"].endswith("+00:00")


def test_text_lines_name_the_request(restore_logging: None) -> None:
    out = io.StringIO()
    configure("WARNING", "text", out)
    token = REQUEST_ID.set("abc")
    try:
        logging.getLogger("x").warning("slow")
    finally:
        REQUEST_ID.reset(token)
    assert out.getvalue().rstrip().endswith("WARNING x [abc]: slow")
