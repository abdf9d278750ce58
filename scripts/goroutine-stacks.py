# Goroutine stack sizes of a running Go process, by start function.
#
#   gdb -p PID -batch -ex "source scripts/goroutine-stacks.py"
#
# For each function that started at least MIN_GOROUTINES live goroutines
# (environment variable, default 50): how many, their stack sizes (bytes:
# count), how deep the median one is while parked (stack.hi - sched.sp), and
# the bytes of stack they hold in all. The process is stopped while gdb
# reads it (a few seconds for tens of thousands of goroutines). Reads the
# runtime's own structures (runtime.allgs), so it needs a binary with DWARF
# (the default; not -ldflags=-w).
import collections
import os

import gdb

least = int(os.environ.get("MIN_GOROUTINES", "50"))
allgs = gdb.parse_and_eval("'runtime.allgs'")
dead = 6  # _Gdead
sizes = collections.defaultdict(collections.Counter)
depths = collections.defaultdict(list)
for i in range(int(allgs["len"])):
    g = allgs["array"][i].dereference()
    if int(g["atomicstatus"]["value"]) == dead:
        continue
    hi, lo = int(g["stack"]["hi"]), int(g["stack"]["lo"])
    pc = int(g["startpc"])
    sizes[pc][hi - lo] += 1
    depths[pc].append(hi - int(g["sched"]["sp"]))
rows = []
for pc, c in sizes.items():
    n = sum(c.values())
    if n < least:
        continue
    try:
        name = gdb.block_for_pc(pc).function.name
    except Exception:
        name = hex(pc)
    d = sorted(depths[pc])
    rows.append((n, name, dict(sorted(c.items())), d[len(d) // 2], sum(k * v for k, v in c.items())))
for n, name, c, depth, total in sorted(rows, reverse=True):
    print(f"{n} {name} sizes {c} parked-depth-median {depth} total {total}")
