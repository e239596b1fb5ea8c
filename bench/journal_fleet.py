#!/usr/bin/env python3
"""journal_fleet.py: what each routing decision knew against what the fleet really carried.

Reads the route journals (RJ_ROUTE_JOURNAL=true; a file, or a ramjet's stderr with its log lines)
of every router in front of the same engines, joins each start record with its finish, and
rebuilds from all of them together, at every decision, each engine's true load: the uncached
prompt tokens of the requests still before their first token there (pending prefill), and the
load units of every request in flight (a request's units until its first token, one unit after,
as RJ_ROUTE_PHASE_AWARE_LOAD reserves). It prints, per outcome, the TTFT and how far the chosen
engine's pending prefill was above the least pending one's; how far the deciding router's view
(load_units + foreign_load_units) was from the true units; how many load decisions chose an
engine that was not truly the least loaded; and, with --ages, the other routers' load on the
chosen engine that the view lacked, by how long before the decision those requests were placed.
Only `complete` requests with a TTFT (streamed) count. Journals hold no payload, so neither does
this. Usage: bench/journal_fleet.py [--ages] JOURNAL... (one per router)
"""
import collections
import json
import statistics
import sys

WINDOW_MS = 60_000  # requests older than this at a decision are assumed done


def load(paths):
    reqs = []
    for path in paths:
        starts = {}
        for line in open(path, errors="replace"):
            if '"event":"' not in line:
                continue
            try:
                r = json.loads(line[line.index("{"):])
            except (ValueError, json.JSONDecodeError):
                continue
            if r.get("event") == "start":
                starts[r["seq"]] = r
            elif r.get("event") == "finish":
                s = starts.get(r["seq"])
                if not s or r.get("result") != "complete" or r.get("ttft_ms") is None:
                    continue
                reqs.append(dict(router=path, t=s["unix_ms"], end=r["unix_ms"], ft=s["unix_ms"] + r["ttft_ms"],
                                 ttft=r["ttft_ms"], e=r["upstream"],
                                 uncached=(r.get("prompt_tokens") or 0) - (r.get("cached_tokens") or 0),
                                 cached=r.get("cached_tokens") or 0,
                                 outcome=s["outcome"], units=r["request_load_units"],
                                 cands={c["upstream"]: c for c in s["candidates"]}))
    reqs.sort(key=lambda q: q["t"])
    return reqs


def main(argv):
    ages = "--ages" in argv
    paths = [a for a in argv if a != "--ages"]
    if not paths:
        sys.exit(__doc__)
    reqs = load(paths)
    engines = sorted({q["e"] for q in reqs})
    rows, abs_err, under, not_least = [], [], [], 0
    lacked = collections.Counter()
    bins = (25, 50, 100, 200, 500, float("inf"))
    lo = 0
    for i, r in enumerate(reqs):
        while reqs[lo]["t"] <= r["t"] - WINDOW_MS:
            lo += 1
        pending = dict.fromkeys(engines, 0)
        units = dict.fromkeys(engines, 0)
        for q in reqs[lo:i]:
            if q["t"] <= r["t"] < q["ft"]:
                pending[q["e"]] += q["uncached"]
                units[q["e"]] += q["units"]
                if ages and q["e"] == r["e"] and q["router"] != r["router"] and r["outcome"] in ("load", "spread"):
                    lacked[next(b for b in bins if r["t"] - q["t"] < b)] += q["units"]
            elif q["ft"] <= r["t"] < q["end"]:
                units[q["e"]] += 1
        rows.append((r, pending[r["e"]] - min(pending.values()), pending[r["e"]] == 0))
        for e in engines:
            c = r["cands"].get(e)
            view = (c["load_units"] + c.get("foreign_load_units", 0)) if c else 0
            abs_err.append(abs(view - units[e]))
            under.append(units[e] - view)
        if r["outcome"] in ("load", "spread") and units[r["e"]] > min(units.values()):
            not_least += 1

    def summary(name, sel):
        if not sel:
            return
        tt = sorted(x[0]["ttft"] for x in sel)
        ex = [x[1] for x in sel]
        print(f"{name}: n={len(sel)} TTFT mean {statistics.mean(tt):.0f} p95 {tt[int(.95 * (len(tt) - 1))]:.0f} ms; "
              f"chosen engine's pending prefill above the least: mean {statistics.mean(ex):.0f} tokens, "
              f"> 2,000 in {100 * sum(e > 2000 for e in ex) / len(sel):.1f} %; chosen had none pending "
              f"{100 * sum(x[2] for x in sel) / len(sel):.1f} %")

    print(f"{len(reqs)} requests from {len(paths)} journal(s), {len(engines)} engines")
    summary("all", rows)
    summary("cold (no cached token)", [x for x in rows if x[0]["cached"] == 0])
    summary("warm", [x for x in rows if x[0]["cached"] > 0])
    for oc in sorted({x[0]["outcome"] for x in rows}):
        summary(f"outcome {oc}", [x for x in rows if x[0]["outcome"] == oc])
    print(f"view vs truth, load units per engine: mean |error| {statistics.mean(abs_err):.2f}, "
          f"mean truth - view {statistics.mean(under):+.2f}; load/spread decisions on an engine that was "
          f"not truly the least loaded: {not_least}")
    if ages:
        n = sum(1 for x in rows if x[0]["outcome"] in ("load", "spread"))
        print("other routers' prefill units on the chosen engine, per load/spread decision, by how long before "
              "it they were placed: " + ", ".join(f"< {b} ms: {lacked[b] / max(n, 1):.3f}" for b in bins))


if __name__ == "__main__":
    main(sys.argv[1:])
