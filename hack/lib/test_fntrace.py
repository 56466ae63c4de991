"""Tests of hack/lib/fntrace.py against a small C program built here (gcc and libc6-dev's static
libc, which hack/install-deps.sh installs): the functions that ran are listed once each, in the
order they first ran, across a thread and a forked child, and a function that never ran is not.
Run: python3 -m unittest discover -s hack/lib -p 'test_*.py' (hack/test.sh does)."""
import os, subprocess, sys, tempfile, unittest

HERE = os.path.dirname(os.path.abspath(__file__))

PROGRAM = r"""
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>
__attribute__((noinline)) void fntrace_never_called(void) { __asm__ volatile(""); }
__attribute__((noinline)) void fntrace_first(void) { __asm__ volatile(""); }
__attribute__((noinline)) void fntrace_in_thread(void) { __asm__ volatile(""); }
__attribute__((noinline)) void fntrace_in_child(void) { __asm__ volatile(""); }
static void *thread_main(void *arg) { fntrace_in_thread(); return arg; }
int main(void) {
    fntrace_first();
    fntrace_first();
    pthread_t t;
    pthread_create(&t, 0, thread_main, 0);
    pthread_join(t, 0);
    pid_t p = fork();
    if (p == 0) { fntrace_in_child(); _exit(0); }
    waitpid(p, 0, 0);
    return 0;
}
"""


class FnTrace(unittest.TestCase):
    def test_functions_in_the_order_they_first_ran_across_threads_and_forks(self):
        with tempfile.TemporaryDirectory() as d:
            src, exe, out = (os.path.join(d, n) for n in ("t.c", "t", "ran.txt"))
            with open(src, "w") as f:
                f.write(PROGRAM)
            # fntrace wants a static executable that is not a PIE, with its symbols
            subprocess.run(["gcc", "-static", "-no-pie", "-O1", "-pthread", "-o", exe, src],
                           check=True)
            subprocess.run([sys.executable, os.path.join(HERE, "fntrace.py"), "30", out, exe],
                           check=True, capture_output=True, timeout=60)
            with open(out) as f:
                ran = f.read().split()
        # fntrace_first ran twice and is listed once; fntrace_never_called is not listed
        ours = [n for n in ran if n.startswith("fntrace_") or n == "main"]
        self.assertEqual(ours, ["main", "fntrace_first", "fntrace_in_thread", "fntrace_in_child"])


if __name__ == "__main__":
    unittest.main()
