"""linkmap.py: the functions of a binary's text, from the map lld wrote of its link (-Map, with
--no-demangle), for hack/lib/fntrace.py and hack/lib/symbol_layout.py. The map describes the
release binary as built, symbols stripped or not, and names every function with the name the
linker's --symbol-ordering-file takes."""
import re, subprocess

def text_sections(path):
    """The input sections of the output section .text, in address order: a list of
    [address, size, alignment, [(address, size, name), ...]] (the linker moves a section, not a
    symbol: one section of a C object holds several functions)."""
    units, in_text = [], False
    with open(path) as lines:
        for line in lines:
            f = line.split(None, 4)
            if len(f) < 5 or not re.fullmatch(r"[0-9a-f]+", f[0]):
                continue
            col = line.index(f[4], line.index(f[3]) + len(f[3]))
            if col < 56:  # an output section
                in_text = f[4].strip() == ".text"
            elif not in_text:
                continue
            elif col < 64:  # an input section
                units.append([int(f[0], 16), int(f[2], 16), int(f[3]), []])
            elif units:  # a symbol of the last input section
                units[-1][3].append((int(f[0], 16), int(f[2], 16), f[4].strip()))
    units.sort(key=lambda u: u[0])
    return units

def text_segment(binary):
    """(address, file offset, size) of the section .text of the ELF file binary"""
    for line in subprocess.check_output(["readelf", "-SW", binary], text=True).splitlines():
        if " .text " in line:
            t = line.split()[line.split().index(".text") + 1:]
            return int(t[1], 16), int(t[2], 16), int(t[3], 16)
    raise SystemExit(f"{binary}: no .text section")

def demangle(names):
    """the demangled names, one for each of names, without the hash of Rust's legacy mangling
    (c++filt knows that mangling and keeps the hash: `tokio::task::spawn::h0123456789abcdef`)"""
    out = subprocess.run(["c++filt"], input="\n".join(names) + "\n", capture_output=True,
                         text=True, check=True).stdout.splitlines()
    if len(out) != len(names):
        return list(names)
    return [re.sub(r"::h[0-9a-f]{16}$", "", n) for n in out]
