"""Fixtures for the tests against a real vLLM (ctest -L vllm; docs/testing.md).

One pytest session runs every module: `engines`, two vLLM engines with the tests' shape
(vllm_proc's defaults: a 4,096-token context, a pool of 8,192 tokens, tool calling on), starts once
for the whole session (an engine takes 30-60 s to start); a module that needs another shape
starts its own (module scope). Every test sends prompts of its own (`tag`, up front), so tests
sharing an engine never share a cached prefix unless they mean to. Tests that restart an engine
are marked `restarts_engine` and run after all the others. ramjet processes are per test, from the
integration suite's ramjet_factory (teardown checks for crashes and sanitizer reports).
"""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

import pytest

_TEST_DIR = str(Path(__file__).resolve().parent.parent)
if _TEST_DIR not in sys.path:
    sys.path.insert(0, _TEST_DIR)

# The integration suite's fixtures (ramjet_binary, ramjet_factory and the report hook that lets
# them print ramjet's log for a failed test).
from integration.conftest import pytest_runtest_makereport, ramjet_binary, ramjet_factory  # noqa: E402,F401
from support import vllm_proc  # noqa: E402


@pytest.fixture(scope="session")
def vllm_model(tmp_path_factory):
    try:
        vllm_proc.vllm_bin()
    except vllm_proc.VllmUnavailable as e:
        pytest.fail(str(e), pytrace=False)
    return vllm_proc.model_dir(tmp_path_factory.mktemp("model") / "qwen3-tiny")


@pytest.fixture(scope="session")
def vllm_logs(tmp_path_factory):
    d = os.environ.get("RAMJET_VLLM_LOG_DIR")
    if d:
        Path(d).mkdir(parents=True, exist_ok=True)
        return Path(d)
    return tmp_path_factory.mktemp("vllm-logs")


def start_fixture_engines(request, model, logs, n: int, **kw) -> list:
    """For a session- or module-scoped fixture: n engines (one at a time), stopped when its scope ends, with
    their last log lines printed when a test failed. Logs: <vllm_logs>/<module or "session">/."""
    d = Path(logs) / (request.module.__name__.rsplit(".", 1)[-1] if request.scope == "module" else "session")
    d.mkdir(parents=True, exist_ok=True)
    made = vllm_proc.start_engines(n, model, log_dir=d, **kw)
    for i, e in enumerate(made):
        print(f"vllm engine {i}: started in {e.start_seconds:.1f} s on port {e.port}")

    def stop():
        for i, e in enumerate(made):
            if request.session.testsfailed:
                print(f"\n--- vllm engine {i} (port {e.port}), last lines ---\n{e.tail(40)}")
            e.stop()

    request.addfinalizer(stop)
    return made


# Exact predictions checked against vLLM's cached_tokens over the session (tests add theirs with
# count_predictions): printed at the end, recorded in docs/benchmarks.md.
PREDICTIONS: dict = {"agree": 0, "miss": 0, "unreported": 0, "late": 0, "evicted": 0}


def count_predictions(rj) -> dict:
    """Adds a ramjet's ramjet_exact_predictions_total to the session's count; returns its own."""
    m = rj.metrics()
    own = {r: int(m.sum("ramjet_exact_predictions_total", result=r)) for r in PREDICTIONS}
    for r, v in own.items():
        PREDICTIONS[r] += v
    return own


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(f"exact predictions checked against vLLM's cached_tokens: {PREDICTIONS}")


def pytest_configure(config):
    config.addinivalue_line("markers", "restarts_engine(order): restarts a shared engine; runs after every "
                                       "other test, in `order`")


def pytest_collection_modifyitems(session, config, items):
    def key(item):
        m = item.get_closest_marker("restarts_engine")
        return (0, 0) if m is None else (1, m.kwargs.get("order", 0))
    items.sort(key=key)


@pytest.fixture(scope="session")
def engines(request, vllm_model, vllm_logs):
    """The two engines most tests share (engine 0 and engine 1 behind ramjet)."""
    return start_fixture_engines(request, vllm_model, vllm_logs, 2, extra=vllm_proc.TOOL_FLAGS)


@pytest.fixture
def tag():
    """A prefix of the test's own: prompts that start with it share no cached block with another
    test's."""
    return f"[{uuid.uuid4().hex[:12]}] "
