"""--version on every binary, and the same build on ramjet's /health and /metrics.

Each binary prints one line, `<name> <version> (commit <c>, build <type>, compiler <id version>)`,
and exits 0 without reading any configuration; the version is the top CMakeLists.txt's
project(VERSION), the commit what `git describe --always --dirty` said at build time ("unknown"
outside a git checkout). ramjet's /health (both listeners) carries version, commit and build type
as a "version" object, and /metrics a ramjet_build_info gauge of 1 with all four as labels.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from support.metric_docs import documented_families
from support.ramjet_proc import http_request, ramjet_bin

ROOT = Path(__file__).resolve().parents[2]
LINE_RE = re.compile(r"^(\S+) (\S+) \(commit (\S+), build (\S+), compiler ([^,()]+)\)$")

# name -> (environment variable set by CMake, path under the build directory)
BINARIES = {
    "ramjet-sim": ("SIM_BIN", "sim/server/ramjet-sim"),
    "ramjet-bench": ("BENCH_BIN", "bench/loadgen/ramjet-bench"),
    "ramjet-route-replay": ("REPLAY_BIN", "tools/route_replay/ramjet-route-replay"),
    "ramjet-companion": ("COMPANION_BIN", "src/companion/ramjet-companion"),
}


def project_version() -> str:
    m = re.search(r"project\(ramjet\s+VERSION\s+([0-9.]+)", (ROOT / "CMakeLists.txt").read_text())
    assert m, "the top CMakeLists.txt declares no project(ramjet VERSION ...)"
    return m.group(1)


def binary(name: str, ramjet_binary: str) -> str:
    if name == "ramjet":
        return ramjet_binary
    var, rel = BINARIES[name]
    path = os.environ.get(var) or str(Path(ramjet_binary).resolve().parents[2] / rel)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        if var in os.environ:
            pytest.fail(f"{var}={path} is not an executable file", pytrace=False)
        pytest.skip(f"{name} not built ({path})")
    return path


def version_of(path: str) -> re.Match:
    out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30,
                         env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, f"{path} --version exited {out.returncode}: {out.stderr}"
    lines = out.stdout.splitlines()
    assert len(lines) == 1 and out.stdout.endswith("\n"), f"not one line: {out.stdout!r}"
    assert out.stderr == "", f"{path} --version wrote to stderr: {out.stderr!r}"
    m = LINE_RE.match(lines[0])
    assert m, f"unexpected --version line: {lines[0]!r}"
    return m


@pytest.mark.parametrize("name", ["ramjet", *BINARIES])
def test_every_binary_prints_one_version_line_and_exits_0(name, ramjet_binary):
    m = version_of(binary(name, ramjet_binary))
    assert m.group(1) == name
    assert m.group(2) == project_version()
    assert m.group(3), "empty commit"
    assert m.group(4) and m.group(5).strip()


def test_all_binaries_come_from_the_same_build(ramjet_binary):
    builds = {name: version_of(binary(name, ramjet_binary)).groups()[1:] for name in ["ramjet", *BINARIES]}
    assert len(set(builds.values())) == 1, builds


def test_version_needs_no_configuration(ramjet_binary):
    # An invalid configuration in the environment does not stop --version (nor is it read).
    out = subprocess.run([ramjet_binary, "--version"], capture_output=True, text=True, timeout=30,
                         env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "RJ_UPSTREAM": "not a url",
                              "RJ_NO_SUCH_OPTION": "1"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ramjet ")


def test_health_and_metrics_carry_the_build(rj, engines):
    _, version, commit, build_type, compiler = version_of(ramjet_bin()).groups()
    for port in (rj.api_port, rj.metrics_port):
        r = http_request(port, "GET", "/health", timeout=5)
        assert r.status == 200
        h = r.json()
        assert h["version"] == {"version": version, "commit": commit, "build_type": build_type}, h
        assert h["status"] == "ok" and h["total_replicas"] == 2, "the version sits beside the usual fields"
        assert "127.0.0.1" not in r.body.decode() and "localhost" not in r.body.decode()
    m = rj.metrics()
    found = m.find("ramjet_build_info")
    assert found == [({"version": version, "commit": commit, "build_type": build_type, "compiler": compiler}, 1.0)]
    assert m.text.startswith("# HELP ramjet_build_info "), "the build comes first in every scrape"
    assert "ramjet_build_info" in documented_families()
