#!/usr/bin/env python3
"""fntrace.py SECONDS OUT BINARY [ARGS...]: which functions of BINARY run, in the order they first run.

Runs BINARY (a static executable that is not a PIE, with its symbols, or stripped with
$FNTRACE_MAP the linker's map of its link) under ptrace with a one-shot breakpoint (int3) on the
entry of every function in its executable segment; a hit puts the function's first byte back and
records it. Threads, forks and vforks are traced too; a child that
execs is let go. After SECONDS it writes the names of the functions that ran, in the order they
first ran, one a line (lld's --symbol-ordering-file), to OUT, and kills the process.

hack/lib/symbol_layout.py turns one or more such lists into the link order. Used by
hack/symbol-order.sh."""
import ctypes, os, signal, subprocess, sys
secs, out, binary = int(sys.argv[1]), sys.argv[2], sys.argv[3]
argv = sys.argv[3:]
libc = ctypes.CDLL(None, use_errno=True)
pt = libc.ptrace; pt.restype = ctypes.c_long
pt.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
TRACEME, PEEK, POKE, CONT, GETREGS, SETREGS, DETACH = 0, 1, 4, 7, 12, 13, 17
SETOPTIONS = 0x4200
O_CLONE, O_FORK, O_VFORK, O_EXEC, O_EXITKILL = 8, 2, 4, 0x10, 0x100000
EV_FORK, EV_VFORK, EV_CLONE, EV_EXEC = 1, 2, 3, 4
WALL = 0x40000000

class Regs(ctypes.Structure):
    _fields_ = [(n, ctypes.c_ulonglong) for n in
        "r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi orig_rax rip cs eflags rsp ss fs_base gs_base ds es fs gs".split()]

def peek(pid, a):
    ctypes.set_errno(0)
    v = pt(PEEK, pid, ctypes.c_void_p(a), None)
    if v == -1 and ctypes.get_errno():
        raise OSError(ctypes.get_errno(), f"peek {a:#x}")
    return v & 0xFFFFFFFFFFFFFFFF
def poke(pid, a, v):
    if pt(POKE, pid, ctypes.c_void_p(a), ctypes.c_void_p(v)) == -1:
        raise OSError(ctypes.get_errno(), f"poke {a:#x}")

names = {}
if os.environ.get("FNTRACE_MAP"):
    # a stripped binary: its functions from the linker's map of its link (hack/lib/linkmap.py)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import linkmap
    for unit in linkmap.text_sections(os.environ["FNTRACE_MAP"]):
        for a, _, n in unit[3]:
            names.setdefault(a, []).append(n)
else:
    for line in subprocess.check_output(["nm", "--defined-only", binary], text=True).splitlines():
        f = line.split()
        if len(f) == 3 and f[1] in "tTWw":
            names.setdefault(int(f[0], 16), []).append(f[2])
# only addresses inside the executable LOAD segment
segs = []
for line in subprocess.check_output(["readelf", "-lW", binary], text=True).splitlines():
    f = line.split()
    if f and f[0] == "LOAD" and "E" in f[6:-1]:
        segs.append((int(f[2], 16), int(f[2], 16) + int(f[5], 16)))
addrs = sorted(a for a in names if any(lo <= a < hi for lo, hi in segs))

pid = os.fork()
if pid == 0:
    pt(TRACEME, 0, None, None)
    os.execv(binary, argv)
_, st = os.waitpid(pid, WALL)
assert os.WIFSTOPPED(st), st
pt(SETOPTIONS, pid, None, ctypes.c_void_p(O_CLONE | O_FORK | O_VFORK | O_EXEC | O_EXITKILL))
orig = {}
words = {}
for a in addrs:
    words.setdefault(a & ~7, []).append(a)
for w, aa in words.items():
    v = peek(pid, w)
    for a in aa:
        sh = (a - w) * 8
        orig[a] = (v >> sh) & 0xFF
        v = (v & ~(0xFF << sh)) | (0xCC << sh)
    poke(pid, w, v)
print(f"fntrace: {len(addrs)} breakpoints in pid {pid}", file=sys.stderr, flush=True)
hit = []
restored = set()
class Timeout(Exception): pass
def alarm(*_): raise Timeout()
signal.signal(signal.SIGALRM, alarm)
signal.alarm(secs)
pt(CONT, pid, None, None)
try:
    while True:
        try:
            tid, st = os.waitpid(-1, WALL)
        except ChildProcessError:
            break
        if not os.WIFSTOPPED(st):
            if tid == pid:
                print(f"fntrace: process ended: {st:#x}", file=sys.stderr)
                break
            continue
        sig = os.WSTOPSIG(st); ev = st >> 16
        deliver = 0
        if sig == signal.SIGTRAP and ev == EV_EXEC:
            pt(DETACH, tid, None, None); continue
        if sig == signal.SIGTRAP and ev in (EV_FORK, EV_VFORK, EV_CLONE):
            pass  # the new task reports its own stop
        elif sig == signal.SIGTRAP and ev == 0:
            r = Regs()
            pt(GETREGS, tid, None, ctypes.byref(r))
            a = r.rip - 1
            if a in orig:
                # the byte in this process's memory (a forked child has its own copy)
                w = a & ~7
                v = peek(tid, w); sh = (a - w) * 8
                if (v >> sh) & 0xFF == 0xCC:
                    poke(tid, w, (v & ~(0xFF << sh)) | (orig[a] << sh))
                if a not in restored:
                    restored.add(a); hit.append(a)
                r.rip = a
                pt(SETREGS, tid, None, ctypes.byref(r))
            else:
                deliver = sig
        elif sig == signal.SIGSTOP:
            pass
        else:
            deliver = sig
        pt(CONT, tid, None, ctypes.c_void_p(deliver))
except Timeout:
    pass
ran = [n for a in hit for n in names[a]]
print(f"fntrace: {len(hit)} functions ran", file=sys.stderr)

with open(out, "w") as f:
    for n in ran:
        f.write(n + "\n")
try:
    os.kill(pid, signal.SIGKILL)
except ProcessLookupError:
    pass
