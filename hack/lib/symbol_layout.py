#!/usr/bin/env python3
"""symbol_layout.py BINARY MAP OUT TRACE [TRACE...]: the release link's function order (lld's
--symbol-ordering-file) from the traces hack/lib/fntrace.py wrote of deckhand.

Why: the page cache keeps the binary in folios of up to 2 MiB and this kernel maps a folio whole
(within the mapping) on a fault, so an idle deckhand's RSS follows how many 2 MiB file ranges its
code touches, not how much of its code runs (README "Benchmarks"). On 4 KiB folios a fault maps
the 64 KiB around it, so what runs should also sit together. The layout:

  [text start | cold | hot ...... | warm | cold ........................ ]
              ^ 2 MiB file offset        ^ 2 MiB file offset

- hot: the functions that ran in any trace, in the order they first ran, from the first 2 MiB
  boundary of the file inside the text (plus a margin), so that they fill as few folios as they can;
- warm: after them, up to the next boundary (less the margin), the code most likely to run on a
  run the traces missed, by tier: other instances of the generic functions that ran, drops,
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
ranges. The decisions are the functions below (tests: hack/lib/test_symbol_layout.py)."""
import os, re, sys
from collections import defaultdict, namedtuple

FOLIO = 2 << 20
MARGIN = 32 << 10  # bytes kept clear of each 2 MiB boundary, for the linker's padding

# One input section of the text: its size and alignment in bytes, the names of its symbols (as the
# ordering file takes them) and their demangled names joined by spaces.
Section = namedtuple("Section", "size align names dem")
# The plan: section indices below the first boundary, hot, warm and cold after; file offsets of
# the hot code's start and end and of the warm code's end.
Plan = namedtuple("Plan", "pre hot post cold hot_start hot_end warm_end")


def hot_sections(sections, traces):
    """The sections of the functions that ran, in the order they first ran over the traces (lists
    of names). A name the ordering file lists places every section that defines it (static
    functions of C objects share names: read_int, copy_conditional) at the first place the name
    is listed, so a section that shares a name with a hot one is hot too."""
    by_name = defaultdict(list)
    for i, s in enumerate(sections):
        for n in s.names:
            by_name[n].append(i)
    hot, seen = [], set()
    for trace in traces:
        for n in trace:
            stack = by_name.get(n, [])[:1]
            while stack:
                a = stack.pop()
                if a in seen:
                    continue
                seen.add(a)
                hot.append(a)
                stack.extend(b for m in sections[a].names for b in by_name[m] if b not in seen)
    return hot


def family(name):
    """a mangled name without its hash: the instances of one generic function share it"""
    return re.sub(r"17h[0-9a-f]{16}E$", "", name)


def modules(dem):
    """every path of two components a demangled name mentions: deckhand::pleg, tokio::runtime, ..."""
    return set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*::[A-Za-z_][A-Za-z0-9_]*", dem))


def tiers(sections, hot):
    """How likely each section that did not run is to run on another run, 0 (most) to 4: 0 another
    instance of a generic function that ran, 1 a drop, 2 only modules that ran, 3 some, 4 none."""
    hot_set = set(hot)
    hot_families = {family(n) for a in hot for n in sections[a].names}
    hot_modules = set().union(*(modules(sections[a].dem) for a in hot))
    out = {}
    for a, s in enumerate(sections):
        if a in hot_set:
            continue
        m = modules(s.dem)
        if any(family(n) in hot_families for n in s.names):
            out[a] = 0
        elif "drop_in_place" in s.dem:
            out[a] = 1
        elif m and m <= hot_modules:
            out[a] = 2
        elif m & hot_modules:
            out[a] = 3
        else:
            out[a] = 4
    return out


def plan(sections, hot, tier, text_off, folio=FOLIO, margin=MARGIN):
    """Where each section goes, for a text that starts at file offset text_off (see the module's
    doc). tier: tiers(sections, hot)."""
    def place(pos, a):
        """where section a ends if the linker lays it out at file offset pos"""
        return pos + (-pos % sections[a].align) + sections[a].size
    rest = sorted(tier, key=lambda a: (tier[a], sections[a].size, a))
    first = -(-text_off // folio) * folio  # the first boundary in the text
    pre, pos = [], text_off
    for a in sorted(rest, key=lambda a: (-tier[a], -sections[a].size, a)):
        if place(pos, a) <= first + margin:
            pre.append(a)
            pos = place(pos, a)
    if pos < first:
        raise ValueError(f"not enough code to fill the text up to {first:#x}")
    taken = set(pre)
    hot_start = pos
    for a in hot:
        pos = place(pos, a)
    hot_end = pos
    limit = -(-hot_end // folio) * folio - margin
    post = []
    for a in rest:
        if a not in taken and place(pos, a) <= limit:
            post.append(a)
            pos = place(pos, a)
            taken.add(a)
    cold = sorted((a for a in rest if a not in taken), key=lambda a: (-tier[a], a))
    return Plan(pre, list(hot), post, cold, hot_start, hot_end, pos)


def ordering(sections, p):
    """the names for lld's --symbol-ordering-file, each once, in the plan's order"""
    written, out = set(), []
    for a in p.pre + p.hot + p.post + p.cold:
        for n in sections[a].names:
            if n not in written:
                written.add(n)
                out.append(n)
    return out


def main(argv):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import linkmap
    binary, mapfile, out, trace_files = argv[1], argv[2], argv[3], argv[4:]
    _, text_off, text_size = linkmap.text_segment(binary)
    units = [u for u in linkmap.text_sections(mapfile) if u[3]]
    dem = linkmap.demangle([n for u in units for _, _, n in u[3]])
    sections, k = [], 0
    for _, size, align, syms in units:
        names = [n for _, _, n in syms]
        sections.append(Section(size, align, names, " ".join(dem[k:k + len(names)])))
        k += len(names)
    hot = hot_sections(sections, [open(t).read().split() for t in trace_files])
    tier = tiers(sections, hot)
    try:
        p = plan(sections, hot, tier, text_off)
    except ValueError as e:
        sys.exit(f"symbol_layout: {e}")
    with open(out, "w") as f:
        f.writelines(n + "\n" for n in ordering(sections, p))
    mib = lambda b: f"{b / 2**20:.2f} MiB"
    by_tier = defaultdict(int)
    for a, t in tier.items():
        by_tier[t] += sections[a].size
    print(f"symbol_layout: text at file offset {text_off:#x}, {mib(text_size)}; {len(hot)} hot sections, "
          f"{mib(p.hot_end - p.hot_start)}; the rest by tier (0 generic siblings, 1 drops, 2 hot modules, "
          "3 some, 4 none): " + ", ".join(f"{t}: {mib(b)}" for t, b in sorted(by_tier.items())))
    print(f"symbol_layout: cold {text_off:#x}-{p.hot_start:#x}, hot {p.hot_start:#x}-{p.hot_end:#x}, "
          f"warm {p.hot_end:#x}-{p.warm_end:#x}, cold after ({len(p.cold)} sections)")


if __name__ == "__main__":
    main(sys.argv)
