"""Run ``resync-simulator`` (PyPI) on 127.0.0.1 with a given configuration.

Usage: ``python simulator_launcher.py PORT CONFIG.yaml LOGGING.yaml [--spec-version V]``.

Two shims, neither touching the simulator's behaviour as a Source:
- resync-simulator 1.1.0 calls ``random.sample(dict_keys, n)``, which Python 3.11 rejects;
  ``random.sample`` is wrapped to turn any non-sequence population into a list;
- its Tornado server listens on every interface; ``listen`` is pinned to 127.0.0.1.
"""

from __future__ import annotations

import random
import runpy
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import tornado.httpserver

_sample = random.sample


def _sample_any(population: Any, k: int, **kwargs: Any) -> list[Any]:
    if not isinstance(population, Sequence):
        population = list(population)
    return _sample(population, k, **kwargs)


random.sample = _sample_any  # type: ignore[assignment]

_listen = tornado.httpserver.HTTPServer.listen


def _listen_local(self: Any, port: int, address: str = "", **kwargs: Any) -> None:
    _listen(self, port, address="127.0.0.1", **kwargs)


tornado.httpserver.HTTPServer.listen = _listen_local  # type: ignore[method-assign]


def main() -> None:
    port, config, logging_config, *rest = sys.argv[1:]
    script = Path(sys.executable).parent / "resync-simulator"
    sys.argv = [
        str(script),
        "--port",
        port,
        "--base-uri",
        f"http://127.0.0.1:{port}",
        "--config-file",
        config,
        "--log-config",
        logging_config,
        *rest,
    ]
    runpy.run_path(str(script), run_name="__main__")


if __name__ == "__main__":
    main()
