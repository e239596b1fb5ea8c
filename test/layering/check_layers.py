#!/usr/bin/env python3
"""The include graph against docs/architecture.md's layer table.

Every #include "x/y.h" in src/ must name a header of the including file's own folder or of a
folder on a lower layer; only tests and benchmarks (*_test.cc, *_bench.cc) may include the
oracles of test/oracle ("oracle/..."); the independent peers (sim/, bench/loadgen/) must not
include ramjet's HTTP stack or anything from request/, observe/ or app/. Prints every violation
and exits 1.
Usage: check_layers.py <source dir>
"""
import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..', '..')
doc = open(os.path.join(root, 'docs', 'architecture.md'), encoding='utf-8').read()
layers = {}
for m in re.finditer(r'^\| *([0-9.]+) *\| *`([a-z_/]+)` *\|', doc, re.M):
    layers[m.group(2)] = float(m.group(1))
if len(layers) < 5:
    sys.exit('check_layers: no layer table found in docs/architecture.md')

def folder_of(path):
    """The table row a path under src/ belongs to (the longest listed prefix), or None."""
    parts = path.split('/')
    for n in range(len(parts), 0, -1):
        key = '/'.join(parts[:n])
        if key in layers:
            return key
    return None

include = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
problems = []
src = os.path.join(root, 'src')
for dirpath, _, names in os.walk(src):
    for name in names:
        if not name.endswith(('.h', '.cc', '.inc')):
            continue
        path = os.path.join(dirpath, name)
        rel = os.path.relpath(path, src).replace(os.sep, '/')
        own = folder_of(os.path.dirname(rel))
        if own is None:
            problems.append(f'src/{rel}: its folder has no row in docs/architecture.md')
            continue
        for inc in include.findall(open(path, encoding='utf-8', errors='replace').read()):
            if inc.startswith('oracle/') and not name.endswith(('_test.cc', '_bench.cc')):
                problems.append(f'src/{rel}: includes {inc} (test/oracle is for tests and '
                                'benchmarks only: production never links an oracle)')
                continue
            if '/' not in inc:
                continue  # same-directory include
            target = folder_of(os.path.dirname(inc))
            if target is None:
                if os.path.exists(os.path.join(src, inc)):
                    problems.append(f'src/{rel}: includes {inc}, whose folder has no row')
                continue  # a system or third-party header
            if target == own:
                continue
            if layers[target] >= layers[own]:
                problems.append(f'src/{rel} ({own}, layer {layers[own]:g}) includes {inc} '
                                f'({target}, layer {layers[target]:g}): only lower layers')

# The independent peers keep their own HTTP code.
forbidden = re.compile(r'^(net/http\.h|net/client\.h|request/|observe/|app/)')
for peer in ('sim', os.path.join('bench', 'loadgen')):
    for dirpath, _, names in os.walk(os.path.join(root, peer)):
        for name in names:
            if not name.endswith(('.h', '.cc')):
                continue
            path = os.path.join(dirpath, name)
            for inc in include.findall(open(path, encoding='utf-8', errors='replace').read()):
                if forbidden.match(inc):
                    problems.append(f'{os.path.relpath(path, root)}: includes {inc} (an independent peer '
                                    'keeps its own HTTP code and never uses the request path)')

for p in problems:
    print(p)
print(f'check_layers: {len(layers)} folders, {len(problems)} problem(s)')
sys.exit(1 if problems else 0)
