"""Fixtures for ramjet's end-to-end tests: mock engines and a ramjet process factory.

RAMJET_BIN selects the binary (default build/dev/src/app/ramjet). When RAMJET_BIN is set and
missing, every test errors; when the default binary is missing, the tests are skipped.
"""

import os
import sys
from pathlib import Path

import pytest

_TEST_DIR = str(Path(__file__).resolve().parent.parent)
if _TEST_DIR not in sys.path:
    sys.path.insert(0, _TEST_DIR)

from support.mock_engine import MockEngine  # noqa: E402
from support.ramjet_proc import RamjetProc, ramjet_bin  # noqa: E402
from support.sim_proc import SimProc  # noqa: E402


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


@pytest.fixture(scope="session")
def ramjet_binary():
    path = ramjet_bin()
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        if "RAMJET_BIN" in os.environ:
            pytest.fail(f"RAMJET_BIN={path} is not an executable file", pytrace=False)
        pytest.skip(f"ramjet binary not built ({path})")
    return path


@pytest.fixture
def engine_factory():
    made = []

    def make(n: int = 1, **attrs):
        out = []
        for _ in range(n):
            e = MockEngine(f"e{len(made)}")
            for k, v in attrs.items():
                setattr(e, k, v)
            e.start()
            made.append(e)
            out.append(e)
        return out

    yield make
    for e in made:
        e.stop()


@pytest.fixture
def engines(engine_factory):
    """Two healthy mock engines (ordinals 0 and 1)."""
    return engine_factory(2)


@pytest.fixture
def ramjet_factory(request, tmp_path, ramjet_binary):
    """make(upstreams, env=None, start=True, raw_env=None) -> RamjetProc. Every process is stopped
    at teardown; an unexpected exit, a death by signal or a sanitizer report fails the test."""
    procs = []

    def make(upstreams=(), env=None, start=True, raw_env=None, defaults=True):
        p = RamjetProc(upstreams, env, log_path=str(tmp_path / f"ramjet{len(procs)}.log"),
                       binary=ramjet_binary, raw_env=raw_env, defaults=defaults)
        procs.append(p)
        if start:
            p.start()
        return p

    yield make
    problems = []
    for p in procs:
        if p.proc is None:
            continue
        died = p.proc.poll() is not None and not p.expect_exit
        rc = p.stop()
        if died:
            problems.append(f"ramjet exited unexpectedly during the test (rc={p.proc.returncode})")
        elif rc is not None and rc < 0 and not p.expect_exit:
            problems.append(f"ramjet died from signal {-rc} on SIGTERM")
        if p.sanitizer_report():
            problems.append("sanitizer report in ramjet output")
        call = getattr(request.node, "rep_call", None)
        if problems or (call is not None and call.failed):
            tail = "\n".join(p.output().splitlines()[-80:])
            print(f"\n--- ramjet output ({p.log_path}), last lines ---\n{tail}")
    if problems:
        pytest.fail("; ".join(problems), pytrace=False)


@pytest.fixture
def rj(engines, ramjet_factory):
    """ramjet in front of the two `engines`."""
    return ramjet_factory(engines)


@pytest.fixture
def sims():
    """Three ramjet-sim engines (--speed 20) on loopback, stopped at teardown."""
    made = [SimProc("--speed", "20") for _ in range(3)]
    yield made
    for s in made:
        s.stop()


@pytest.fixture
def sim_ramjet(sims, ramjet_factory):
    """make(env, upstreams=None) -> ramjet in front of `sims` (or the given engines), started and
    with every replica healthy; stopped and checked at teardown like ramjet_factory's."""

    def make(env, upstreams=None):
        rj = ramjet_factory([s.url for s in (upstreams or sims)], env=env)
        rj.wait_health(lambda c, j: j["status"] == "ok", 10, "all replicas healthy")
        return rj

    return make
