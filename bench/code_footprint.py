#!/usr/bin/env python3
"""code_footprint.py: how much code one request runs, from two callgrind runs.

Usage: code_footprint.py RUN_A RUN_B N [--top K]

RUN_A and RUN_B are callgrind outputs (`--dump-instr=yes`) of one process serving N1 and N2
requests of one kind, N = N2 - N1 (bench/instructions_per_request.sh with FOOTPRINT=1 makes
them). A 64-byte line of code counts when an instruction in it ran at least N times more in
RUN_B than in RUN_A: at least once a request on average. Startup, shutdown and timers (a 1 Hz
sampler runs a few times, not once a request) fall out, as they do from the instruction counts.

Prints the number of lines (and KiB) on the first line; with --top K, the lines by object and
the K functions with the most lines. The instruction cache holds lines, not instructions: a
request whose code spans more lines than the cache (32 KiB of L1i here) fetches them again
after every system call or switch that evicted them, which instruction counts do not show.
"""
import collections
import re
import sys


def parse(path):
    """{(object, address): self Ir} and {(object, address): function} of one callgrind file."""
    cost = collections.defaultdict(int)
    owner = {}
    names = {"ob": {}, "fn": {}, "fl": {}}
    table_of = {"ob": "ob", "cob": "ob", "fn": "fn", "cfn": "fn",
                "fl": "fl", "fi": "fl", "fe": "fl", "cfl": "fl", "cfi": "fl"}
    npos, ir_at = 1, 0
    last = [0, 0]
    ob = fn = None
    skip_cost = False  # the line after calls= is the call's inclusive cost, not self cost

    def name(kind, rest):
        table = names[table_of[kind]]
        m = re.match(r"\((\d+)\)(?: (.*))?$", rest)
        if not m:
            return rest
        if m.group(2) is not None:
            table[m.group(1)] = m.group(2)
        return table.get(m.group(1), "?")

    def position(token, i):
        if token == "*":
            return last[i]
        if token[0] in "+-":
            return last[i] + int(token, 0)
        return int(token, 0)

    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line[0] == "#":
                continue
            if line[0].isdigit() or line[0] in "+-*":
                parts = line.split()
                for i in range(min(npos, 2)):
                    last[i] = position(parts[i], i)
                if skip_cost:
                    skip_cost = False
                    continue
                if len(parts) > npos + ir_at:
                    key = (ob, last[0])
                    cost[key] += int(parts[npos + ir_at])
                    owner[key] = fn
                continue
            if line.startswith("positions:"):
                kinds = line.split()[1:]
                npos = len(kinds)
                if kinds[0] != "instr":
                    sys.exit(f"{path}: made without --dump-instr=yes (positions: {' '.join(kinds)})")
                continue
            if line.startswith("events:"):
                events = line.split()[1:]
                ir_at = events.index("Ir") if "Ir" in events else 0
                continue
            key, eq, rest = line.partition("=")
            if not eq:
                continue
            if key == "ob":
                ob = name("ob", rest)
            elif key == "fn":
                fn = name("fn", rest)
            elif key in table_of:
                name(key, rest)
            elif key == "calls":
                skip_cost = True
    return cost, owner


def main():
    args = sys.argv[1:]
    top = 0
    if "--top" in args:
        i = args.index("--top")
        top = int(args[i + 1])
        del args[i:i + 2]
    if len(args) != 3:
        sys.exit(__doc__)
    a, _ = parse(args[0])
    b, owner = parse(args[1])
    n = int(args[2])
    lines = set()
    by_object = collections.defaultdict(set)
    by_function = collections.defaultdict(set)
    for (ob, addr), ir in b.items():
        if ir - a.get((ob, addr), 0) < n:
            continue
        line = (ob, addr >> 6)
        obj = (ob or "?").rsplit("/", 1)[-1]
        lines.add(line)
        by_object[obj].add(line)
        by_function[(obj, owner[(ob, addr)] or "?")].add(line)
    print(f"{len(lines)} lines ({len(lines) * 64 / 1024:.1f} KiB)")
    if top:
        for obj, s in sorted(by_object.items(), key=lambda kv: -len(kv[1])):
            print(f"  {len(s):5d}  {obj}")
        for (obj, fn), s in sorted(by_function.items(), key=lambda kv: -len(kv[1]))[:top]:
            print(f"  {len(s):5d}  {obj[:20]:20s} {fn[:160]}")


if __name__ == "__main__":
    main()
