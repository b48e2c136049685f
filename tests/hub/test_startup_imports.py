"""What ``rshub serve`` pays before it serves (issue 22): no module it does not need, and no
cyclic garbage collection while it imports. Guards, not timings: each checks a state that a
regression changes, whatever the machine's speed."""

from __future__ import annotations

import ast
import subprocess
import sys

from tests.support import TIME_SCALE

#: Modules a hub without a JWT key never uses (PyJWT and the cryptography it loads: ~36 ms
#: of CPU), nor the client commands.
NOT_BEFORE_SERVING = (
    "jwt",
    "cryptography.x509",
    "cryptography.hazmat.primitives.asymmetric.ec",
    "publisher.cli",
    "subscriber.cli",
    "shtab",
)


def _probe(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60 * TIME_SCALE
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_serve_imports_leave_out_what_serving_does_not_need() -> None:
    # Everything `rshub serve` imports until it listens: the command, its module and the app
    # (and what the runtime imports when it starts: nothing more of these).
    loaded = ast.literal_eval(
        _probe(
            "import sys, rshub.cli, hub.serve.cli, hub.web.app, hub.live.runtime\n"
            f"print(sorted(m for m in {NOT_BEFORE_SERVING!r} if m in sys.modules))\n"
        )
    )
    assert loaded == []


def test_a_hub_with_a_jwt_key_verifies_tokens_with_pyjwt_loaded_at_start() -> None:
    # The lazy import still happens, and before the first request (not on the event loop).
    out = _probe(
        "import sys\n"
        "from hub.core.read_tokens import SignedReadTokens, mint\n"
        "assert 'jwt' not in sys.modules\n"
        "key = 'k' * 32\n"
        "verifier = SignedReadTokens(key)\n"
        "print('jwt' in sys.modules)\n"
        "print(sorted(verifier.topics(mint(key, ['a', 'b'], 60).encode())))\n"
    )
    assert out.split("\n")[:2] == ["True", "['a', 'b']"]


GC_PROBE = """
import gc, sys
import rshub.cli
import hub.web.app as web_app
from hub.core import collector

seen = {}
tune = collector.tune


def spy_tune(young_threshold):
    seen["collecting before tune"] = gc.isenabled()
    tune(young_threshold)


def spy_run(*args, **kwargs):
    seen["collecting when serving"] = gc.isenabled()
    seen["young threshold"] = gc.get_threshold()[0]


collector.tune = spy_tune
web_app.run = spy_run
seen["status"] = rshub.cli.main(["serve", "--redis-url", "redis://127.0.0.1:9/0"])
seen["collecting after"] = gc.isenabled()
try:
    rshub.cli.main(["serve", "--port", "not-a-port"])
except SystemExit:
    pass
seen["collecting after a usage error"] = gc.isenabled()
seen["status of a bad setting"] = rshub.cli.main(["serve", "--port", "70000"])
seen["collecting after a bad setting"] = gc.isenabled()
print(repr(seen))
"""


def test_rshub_serve_pauses_the_collector_only_until_its_imports_are_done() -> None:
    seen = ast.literal_eval(_probe(GC_PROBE).strip())
    assert seen == {
        # Paused from the command line's parse through the imports ...
        "collecting before tune": False,
        # ... and on again, tuned, once the hub runs.
        "collecting when serving": True,
        "young threshold": 50_000,
        "status": 0,
        # And never left off when `rshub serve` returns or exits early.
        "collecting after": True,
        "collecting after a usage error": True,
        "status of a bad setting": 2,
        "collecting after a bad setting": True,
    }
