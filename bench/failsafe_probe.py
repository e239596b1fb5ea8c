#!/usr/bin/python3
"""failsafe_probe.py: the five fail-safe findings, probed against one ramjet binary.

Puts ramjet-sim engines into bad states and sends what a hostile or careless client sends, with
ramjet's *default* settings (only the listen addresses are set), and writes one JSON record of
figures. Run it against two binaries (an earlier commit and this one) with the same ramjet-sim,
then --compare the two records for a Markdown table (docs/benchmarks.md). Standard library only;
Debian's /usr/bin/python3.

  1 an engine answering 500 at once (its /health 200): share of failed requests, open loop at
    20 req/s and closed loop with 16 clients
  2 a request whose headers the engines refuse (9,000 bytes of headers; the engines hang up on
    heads over 8 KiB): the client's answer, and how long /health is not ok afterwards
  3 engines that hang before or after their response head: how long a client waits
  4 engine admin and debug paths on the API port: who answers
  5 a client that stops reading (how long its stream is held), eight concurrent 50 MB bodies
    (peak RSS), streams cut by an engine crash (counted as code 200?), and eight concurrent 8 MiB
    bodies of one-digit numbers (JSON that parses to 12x its size: peak RSS, and what stays)

Usage:
  bench/failsafe_probe.py --ramjet BIN --sim SIM [--label NAME] [--out FILE] [--only 1,2,...]
  bench/failsafe_probe.py --compare BEFORE.json AFTER.json
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

CAP_S = 130.0  # longest a hung client is watched


# ----------------------------------------------------------------------------- processes
class Proc:
    def __init__(self, argv, env, ready_re, timeout=20.0):
        self.p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  bufsize=1)
        self.lines = []
        self.match = None
        got = threading.Event()

        def pump():
            for line in self.p.stdout:
                self.lines.append(line)
                if not got.is_set():
                    m = re.search(ready_re, line)
                    if m:
                        self.match = m
                        got.set()

        threading.Thread(target=pump, daemon=True).start()
        if not got.wait(timeout):
            self.stop()
            raise RuntimeError(f"{argv[0]} did not start: {''.join(self.lines)[-1500:]}")

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


def sims(args, n, *extra, speed="20"):
    out = []
    for _ in range(n):
        s = Proc([args.sim, "--host", "127.0.0.1", "--port", "0", "--speed", speed, *extra], dict(os.environ),
                 r"ramjet-sim listening port=(\d+)")
        s.port = int(s.match.group(1))
        out.append(s)
    for s in out:
        wait(lambda: status(s.port, "GET", "/health") == 200, 10)
    return out


def ramjet(args, engines, **env):
    e = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "RJ_LISTEN": "127.0.0.1:0", "RJ_METRICS_LISTEN": "127.0.0.1:0",
         "RJ_UPSTREAM": ",".join(f"http://127.0.0.1:{s.port}" for s in engines)}
    e.update(env)
    r = Proc([args.ramjet], e, r"listening api=[0-9.]+:(\d+) metrics=[0-9.]+:(\d+)")
    r.api, r.mport = int(r.match.group(1)), int(r.match.group(2))
    return r


def stop_all(*groups):
    for g in groups:
        for p in (g if isinstance(g, list) else [g]):
            p.stop()


# ----------------------------------------------------------------------------- HTTP
def request(port, method, path, body=None, headers=None, timeout=30.0):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        c.close()


def status(port, method, path, body=None, headers=None, timeout=5.0):
    try:
        return request(port, method, path, body, headers, timeout)[0]
    except OSError:
        return None


def health(port):
    try:
        s, _, b = request(port, "GET", "/health", timeout=5)
        return s, json.loads(b)
    except (OSError, ValueError):
        return None, {}


def metric(mport, name, **labels):
    _, _, text = request(mport, "GET", "/metrics", timeout=5)
    total = 0.0
    for line in text.decode().splitlines():
        if not line.startswith(name):
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)$", line)
        if not m or m.group(1) != name:
            continue
        got = dict(re.findall(r'([a-zA-Z_]+)="([^"]*)"', m.group(3) or ""))
        if all(got.get(k) == str(v) for k, v in labels.items()):
            total += float(m.group(4))
    return total


def wait(fn, timeout, step=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if fn():
            return True
        time.sleep(step)
    return False


def chat(i, stream=False, max_tokens=16, content=None):
    return json.dumps({"model": "ramjet-sim", "stream": stream, "max_tokens": max_tokens,
                       "messages": [{"role": "user", "content": content or f"probe request {i}"}]}).encode()


def stream_until_end(port, body, cap, headers=None):
    """Seconds until the response ends (or cap), and how it ended."""
    t = time.monotonic()
    s = socket.create_connection(("127.0.0.1", port), timeout=cap)
    h = {"Content-Type": "application/json", "Host": "x", "Content-Length": str(len(body)), "Connection": "close"}
    h.update(headers or {})
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()).encode() +
              b"\r\n" + body)
    data = b""
    try:
        while True:
            s.settimeout(max(0.05, cap - (time.monotonic() - t)))
            d = s.recv(65536)
            if not d:
                break
            data += d
    except socket.timeout:
        s.close()
        return cap, "still open", data
    except OSError:
        pass
    s.close()
    took = time.monotonic() - t
    ending = "no response" if not data else "error event" if b"event: error" in data else \
        "[DONE]" if b"data: [DONE]" in data else data.split(b"\r\n", 1)[0].decode(errors="replace")
    return took, ending, data


# ----------------------------------------------------------------------------- probes
def probe_500(args):
    # Real-time engines: a healthy engine holds each request for about a second, so it carries
    # load while the failing one answers at once.
    eng = sims(args, 3, speed="1")
    rj = ramjet(args, eng)
    out = {}
    try:
        request(eng[0].port, "POST", "/sim/fault", json.dumps({"error_rate": 1, "error_status": 500}).encode())
        # Open loop: 20 req/s for 15 s, each on its own thread.
        results, threads = [], []

        def one(i):
            results.append(status(rj.api, "POST", "/v1/chat/completions", chat(i, max_tokens=32),
                              {"Content-Type": "application/json"}, 30))

        t0 = time.monotonic()
        for i in range(300):
            while time.monotonic() < t0 + i * 0.05:
                time.sleep(0.005)
            th = threading.Thread(target=one, args=(i,))
            th.start()
            threads.append(th)
        for th in threads:
            th.join(60)
        failed = sum(1 for s in results if s != 200)
        out["open_loop"] = {"requests": len(results), "failed": failed, "failed_pct": round(100 * failed / len(results), 1)}
        # Closed loop: 16 clients for 10 s.
        counts = {"ok": 0, "failed": 0}
        lock = threading.Lock()
        stop = time.monotonic() + 10

        def client(w):
            i = 0
            while time.monotonic() < stop:
                s = status(rj.api, "POST", "/v1/chat/completions", chat(w * 100000 + i, max_tokens=32),
                           {"Content-Type": "application/json"}, 30)
                with lock:
                    counts["ok" if s == 200 else "failed"] += 1
                i += 1

        ts = [threading.Thread(target=client, args=(w,)) for w in range(16)]
        [t.start() for t in ts]
        [t.join(60) for t in ts]
        n = counts["ok"] + counts["failed"]
        out["closed_loop"] = dict(counts, failed_pct=round(100 * counts["failed"] / max(n, 1), 2))
    finally:
        stop_all(rj, eng)
    return out


def probe_poison(args):
    eng = sims(args, 3)
    for s in eng:
        request(s.port, "POST", "/sim/fault", json.dumps({"drop_header_bytes": 8192}).encode())
    rj = ramjet(args, eng)
    out = {}
    big = {"Content-Type": "application/json", "X-Big": "x" * 9000}
    try:
        st, _, body = request(rj.api, "POST", "/v1/chat/completions", chat(1), big, 60)
        out["answer"] = f"{st} {json.loads(body).get('error', {}).get('type', '?') if body.startswith(b'{') else body[:40]}"
        t = time.monotonic()
        unhealthy = 0.0
        while time.monotonic() - t < 60:
            code, h = health(rj.api)
            if h.get("status") == "ok":
                break
            time.sleep(0.1)
        unhealthy = time.monotonic() - t
        out["health_not_ok_s"] = round(unhealthy, 1) if unhealthy > 0.15 else 0.0
        out["fences"] = metric(rj.mport, "ramjet_upstream_fences_total")
        # Repeated every 10 s for 40 s: share of /health samples that are not ok.
        wait(lambda: health(rj.api)[1].get("status") == "ok", 60)
        samples = bad = 0
        t = time.monotonic()
        nxt = t
        while time.monotonic() - t < 40:
            if time.monotonic() >= nxt:
                request(rj.api, "POST", "/v1/chat/completions", chat(2), big, 60)
                nxt += 10
            samples += 1
            bad += health(rj.api)[1].get("status") != "ok"
            time.sleep(0.2)
        out["repeated_every_10s_not_ok_pct"] = round(100 * bad / samples, 1)
    finally:
        stop_all(rj, eng)
    return out


def probe_hang(args, fault):
    eng = sims(args, 2)
    rj = ramjet(args, eng)
    try:
        request(eng[0].port, "POST", "/sim/fault", json.dumps(fault).encode())
        res = [None] * 4

        def one(k):
            res[k] = stream_until_end(rj.api, chat(k, stream=True, max_tokens=64), CAP_S)

        ts = [threading.Thread(target=one, args=(k,)) for k in range(4)]
        [t.start() for t in ts]
        [t.join(CAP_S + 10) for t in ts]
        worst = max(res, key=lambda r: r[0])
        return {"longest_wait_s": round(worst[0], 1), "longest_ending": worst[1],
                "endings": sorted(r[1] for r in res)}
    finally:
        stop_all(rj, eng)


def probe_admin(args):
    eng = sims(args, 1)
    rj = ramjet(args, eng)
    out = {}
    try:
        for method, path, body in (("POST", "/sim/fault", b'{"slow_ms":0}'), ("POST", "/reset_prefix_cache", b""),
                                   ("GET", "/metrics", None), ("POST", "/sleep?level=1", b""), ("GET", "/nope", None)):
            st, hdrs, b = request(rj.api, method, path, body)
            by = "engine" if any(k.lower() == "x-ramjet-upstream" for k in hdrs) else "ramjet"
            out[f"{method} {path}"] = f"{st} from {by}: {b[:60].decode(errors='replace')}"
    finally:
        stop_all(rj, eng)
    return out


def probe_reader(args):
    eng = [Proc([args.sim, "--host", "127.0.0.1", "--port", "0", "--speed", "400", "--max-model-len", "1000000",
                 "--num-gpu-blocks-override", "65536"], dict(os.environ), r"ramjet-sim listening port=(\d+)")]
    eng[0].port = int(eng[0].match.group(1))
    rj = ramjet(args, eng)
    try:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", rj.api))
        body = chat(1, stream=True, max_tokens=90000)
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                  str(len(body)).encode() + b"\r\n\r\n" + body)
        t = time.monotonic()
        wait(lambda: metric(rj.mport, "ramjet_requests_inflight") == 1, 10)
        freed = wait(lambda: metric(rj.mport, "ramjet_requests_inflight") == 0, 90, 0.5)
        held = time.monotonic() - t
        s.close()
        return {"stream_held_s": round(held, 1) if freed else "> 90 (still held)"}
    finally:
        stop_all(rj, eng)


def status_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith(field + ":"))


def hwm_kib(pid):
    return status_kib(pid, "VmHWM")


def post_concurrently(port, body, n=8):
    """n clients POST `body` to /v1/chat/completions at once; their statuses, sorted."""
    codes = []

    def one():  # raw: a refusal may come (and the connection close) before the body is sent
        s = socket.create_connection(("127.0.0.1", port), timeout=120)
        try:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        except OSError:
            pass
        try:
            head = s.recv(4096)
            codes.append(head.split(b" ", 2)[1].decode() if head.startswith(b"HTTP/") else "closed")
        except OSError:
            codes.append("closed")
        s.close()

    ts = [threading.Thread(target=one) for _ in range(n)]
    [t.start() for t in ts]
    [t.join(180) for t in ts]
    return sorted(map(str, codes))


def probe_bodies(args):
    eng = sims(args, 2)
    rj = ramjet(args, eng)
    try:
        base = hwm_kib(rj.p.pid)
        body = b'{"model":"ramjet-sim","messages":[{"role":"user","content":"' + b"a" * (50 << 20) + b'"}]}'
        statuses = post_concurrently(rj.api, body)
        return {"peak_rss_mib": round((hwm_kib(rj.p.pid)) / 1024), "idle_rss_mib": round(base / 1024),
                "statuses": statuses}
    finally:
        stop_all(rj, eng)


def probe_dense(args):
    eng = sims(args, 2)
    rj = ramjet(args, eng)
    try:
        base = hwm_kib(rj.p.pid)
        n = 4 << 20  # 4 Mi one-digit numbers: an 8 MiB body
        body = (b'{"model":"ramjet-sim","max_tokens":4,"messages":[{"role":"user","content":"hi"}],"pad":['
                + b"0," * (n - 1) + b"0]}")
        statuses = post_concurrently(rj.api, body)
        time.sleep(2.0)
        return {"peak_rss_mib": round(hwm_kib(rj.p.pid) / 1024), "idle_rss_mib": round(base / 1024),
                "rss_after_mib": round(status_kib(rj.p.pid, "VmRSS") / 1024), "statuses": statuses}
    finally:
        stop_all(rj, eng)


def probe_cut(args):
    eng = sims(args, 2, speed="1")  # real time: 2,000 tokens take a while
    rj = ramjet(args, eng)
    try:
        res = [None] * 6

        def one(k):
            res[k] = stream_until_end(rj.api, chat(k, stream=True, max_tokens=2000), 60)

        ts = [threading.Thread(target=one, args=(k,)) for k in range(6)]
        [t.start() for t in ts]
        time.sleep(2.0)
        eng[0].p.send_signal(signal.SIGKILL)
        eng[0].p.wait()
        [t.join(70) for t in ts]
        cut = sum(1 for r in res if r[1] != "[DONE]")
        return {"streams": len(res), "cut": cut,
                "counted_code_200": int(metric(rj.mport, "ramjet_requests_total", endpoint="chat", code="200")),
                "counted_code_502": int(metric(rj.mport, "ramjet_requests_total", endpoint="chat", code="502")),
                "endings": sorted(r[1] for r in res)}
    finally:
        stop_all(rj, eng)


PROBES = {
    "1": ("500 at once", probe_500),
    "2": ("poison headers", probe_poison),
    "3a": ("hang before headers", lambda a: probe_hang(a, {"hang": True})),
    "3b": ("hang after headers", lambda a: probe_hang(a, {"stall_after_tokens": 2})),
    "4": ("admin paths", probe_admin),
    "5a": ("client stops reading", probe_reader),
    "5b": ("8 x 50 MB bodies", probe_bodies),
    "5c": ("streams cut by kill -9", probe_cut),
    "5d": ("8 x 8 MiB dense JSON bodies", probe_dense),
}


def cell(v):
    if v is None:
        return "—"
    text = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, separators=(", ", ": "))
    return text.replace("|", "\\|").replace("\n", " ")


def compare(before_path, after_path):
    b, a = json.load(open(before_path)), json.load(open(after_path))
    print(f"| probe | {b['label']} ({b['commit']}) | {a['label']} ({a['commit']}) |")
    print("|---|---|---|")
    for key, (name, _) in PROBES.items():
        vb, va = b["probes"].get(key), a["probes"].get(key)
        if vb is None and va is None:
            continue
        keys = list(dict.fromkeys(list((vb or {}).keys()) + list((va or {}).keys())))
        for k in keys:
            print(f"| {key} {name}: {k} | {cell((vb or {}).get(k))} | {cell((va or {}).get(k))} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ramjet")
    ap.add_argument("--sim")
    ap.add_argument("--label", default="run")
    ap.add_argument("--commit", default="")
    ap.add_argument("--out")
    ap.add_argument("--only", default=",".join(PROBES))
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    args = ap.parse_args()
    if args.compare:
        compare(*args.compare)
        return
    if not args.ramjet or not args.sim:
        ap.error("--ramjet and --sim are required")
    record = {"label": args.label, "commit": args.commit, "ramjet": args.ramjet,
              "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "probes": {}}
    for key in args.only.split(","):
        name, fn = PROBES[key]
        t = time.monotonic()
        print(f"failsafe_probe: {key} {name} ...", file=sys.stderr, flush=True)
        record["probes"][key] = fn(args)
        print(f"failsafe_probe: {key} {name}: {record['probes'][key]} ({time.monotonic() - t:.0f} s)",
              file=sys.stderr, flush=True)
    text = json.dumps(record, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
