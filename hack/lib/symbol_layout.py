#!/usr/bin/env python3
"""symbol_layout.py BINARY MAP OUT TRACE [TRACE...]: the release link's function order (lld's
--symbol-ordering-file) from the traces hack/lib/fntrace.py wrote of an idle deckhand.

Why: the page cache keeps the binary in folios of up to 2 MiB and this kernel maps a folio whole
(within the mapping) on a fault, so an idle deckhand's RSS follows how many 2 MiB file ranges its
code touches, not how much of its code runs (README "Benchmarks"). The layout:

  [text start | cold | hot ...... | warm | cold ........................ ]
              ^ 2 MiB file offset        ^ 2 MiB file offset

- hot: the functions that ran in any trace, in the order they first ran, from the first 2 MiB
  boundary of the file inside the text (plus a margin), so that they fill as few folios as they can;
- warm: after them, up to the next boundary (less the margin), the code most likely to run on an
  idle run the traces missed, by tier: other instances of the generic functions that ran, drops,
  code of the modules that ran only, code that mentions a module that ran;
- cold, below the first boundary: the code least likely to run (tier 4, no module of it ran), so
  that the part of the first folio inside the text is not mapped at all;
- cold, after the warm code: the rest, the least likely first, so that what is left of tier 3
  falls in the last folio of the text, which is partly data and costs less when a fault maps it.

Measured (README "Benchmarks"): of an idle run's faults outside the functions that ran in two
traces, most were other instances of generic functions (Arc::drop_slow, Vec::push, a task's
dealloc), so tiers 0 and 1 come first.

BINARY is the release build and MAP the linker's map of its link (hack/lib/linkmap.py): the
linker moves input sections, and one section of glibc holds several functions. Prints the planned
ranges."""
import os, re, sys
from collections import defaultdict
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import linkmap

binary, mapfile, out, traces = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
FOLIO = 2 << 20
MARGIN = 32 << 10  # bytes kept clear of each 2 MiB boundary, for the linker's padding

text_addr, text_off, text_size = linkmap.text_segment(binary)
units = [u for u in linkmap.text_sections(mapfile) if u[3]]
dem = linkmap.demangle([n for u in units for _, _, n in u[3]])
funcs, align, by_name = {}, {}, defaultdict(list)
k = 0
for i, (addr, size, al, syms) in enumerate(units):
    names = [n for _, _, n in syms]
    funcs[i] = (size, names, " ".join(dem[k:k + len(names)]))
    align[i] = al
    k += len(names)
    for n in names:
        by_name[n].append(i)

# A name the ordering file lists places every section that defines it (static functions of C
# objects share names: read_int, copy_conditional), at the first place the name is listed. So a
# section that shares a name with a hot one is hot too.
hot = []
seen = set()
def make_hot(a):
    stack = [a]
    while stack:
        a = stack.pop()
        if a in seen:
            continue
        seen.add(a); hot.append(a)
        stack.extend(b for n in funcs[a][1] for b in by_name[n] if b not in seen)
for tr in traces:
    for n in open(tr).read().split():
        for a in by_name.get(n, [])[:1]:
            make_hot(a)

def family(name):
    return re.sub(r"17h[0-9a-f]{16}E$", "", name)
def modules(dem):
    # every path of two components the demangled name mentions: deckhand::pleg, tokio::runtime, ...
    return set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*::[A-Za-z_][A-Za-z0-9_]*", dem))
hot_families = {family(n) for a in hot for n in funcs[a][1]}
hot_modules = set().union(*(modules(funcs[a][2]) for a in hot))

def tier(a):
    size, names, dem = funcs[a]
    if any(family(n) in hot_families for n in names):
        return 0
    if "drop_in_place" in dem:
        return 1
    m = modules(dem)
    if m and m <= hot_modules:
        return 2
    if m & hot_modules:
        return 3
    return 4
rest = sorted((a for a in funcs if a not in seen), key=lambda a: (tier(a), funcs[a][0], a))

def place(pos, a):
    """where section a ends if the linker lays it out at file offset pos"""
    return pos + (-pos % align[a]) + funcs[a][0]
first = -(-text_off // FOLIO) * FOLIO  # the first 2 MiB boundary in the text
pre, post, cold = [], [], []
pos = text_off
# below the first boundary the coldest code (a fault there maps the rest of that folio's text)
for a in sorted(rest, key=lambda a: (-tier(a), -funcs[a][0], a)):
    if place(pos, a) <= first + MARGIN:
        pre.append(a); pos = place(pos, a)
taken = set(pre)
if pos < first:
    sys.exit(f"symbol_layout: not enough code to fill the text up to {first:#x}")
hot_start = pos
for a in hot:
    pos = place(pos, a)
hot_end = pos
limit = -(-hot_end // FOLIO) * FOLIO - MARGIN
for a in rest:  # the warm code after them, up to the next boundary less the margin
    if a not in taken and place(pos, a) <= limit:
        post.append(a); pos = place(pos, a); taken.add(a)
cold = [a for a in rest if a not in taken]
# the coldest first: the last folio of the text is partly data, so a fault there costs less
cold.sort(key=lambda a: (-tier(a), a))
written = set()
with open(out, "w") as f:
    for a in pre + hot + post + cold:
        for n in funcs[a][1]:
            if n not in written:
                written.add(n); f.write(n + "\n")
mib = lambda b: f"{b / 2**20:.2f} MiB"
tiers = defaultdict(int)
for a in rest:
    tiers[tier(a)] += funcs[a][0]
print(f"symbol_layout: text at file offset {text_off:#x}, {mib(text_size)}; {len(hot)} hot sections, "
      f"{mib(hot_end - hot_start)}; the rest by tier (0 generic siblings, 1 drops, 2 hot modules, "
      "3 some, 4 none): " + ", ".join(f"{t}: {mib(b)}" for t, b in sorted(tiers.items())))
print(f"symbol_layout: cold {text_off:#x}-{hot_start:#x}, hot {hot_start:#x}-{hot_end:#x}, "
      f"warm {hot_end:#x}-{pos:#x}, cold after ({len(cold)} sections)")
