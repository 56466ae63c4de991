/*
 * pause: the pod sandbox's PID 1, modelled on Kubernetes' build/pause/linux/pause.c.
 *
 * It holds the pod's namespaces open and does nothing else:
 *   - SIGINT / SIGTERM: exit 0 (a graceful sandbox stop),
 *   - SIGCHLD: reap every exited child with waitpid(-1, WNOHANG), so orphans in a
 *     pod with a shared PID namespace do not stay zombies,
 *   - otherwise loop on pause().
 *
 * Build: gcc -Os -static -Wall -o pause pause.c && strip pause
 * `pause -v` prints the version and exits (as upstream does).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define VERSION "deckhand-pause-3.10"

static void sigdown(int signo) {
  psignal(signo, "Shutting down, got signal");
  exit(0);
}

static void sigreap(int signo) {
  (void)signo;
  int saved = errno;
  while (waitpid(-1, NULL, WNOHANG) > 0)
    ;
  errno = saved;
}

int main(int argc, char **argv) {
  int i;
  for (i = 1; i < argc; ++i) {
    if (!strcasecmp(argv[i], "-v")) {
      printf("pause.c %s\n", VERSION);
      return 0;
    }
  }

  if (getpid() != 1)
    /* Not an error: it may run outside a PID namespace (for tests). */
    fprintf(stderr, "Warning: pause should be the first process\n");

  struct sigaction down = {.sa_handler = sigdown};
  struct sigaction reap = {.sa_handler = sigreap, .sa_flags = SA_NOCLDSTOP | SA_RESTART};
  sigemptyset(&down.sa_mask);
  sigemptyset(&reap.sa_mask);
  if (sigaction(SIGINT, &down, NULL) < 0)
    return 1;
  if (sigaction(SIGTERM, &down, NULL) < 0)
    return 2;
  if (sigaction(SIGCHLD, &reap, NULL) < 0)
    return 3;

  for (;;)
    pause();
  fprintf(stderr, "Error: infinite loop terminated\n");
  return 42;
}
