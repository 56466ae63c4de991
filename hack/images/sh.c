/* /bin/sh of the conformance busybox image (hack/images/build-e2e-images.sh).
 *
 * Debian's busybox 1.35 ash drops environment variables whose names are not shell identifiers
 * (data-1, p-data-1) when it starts a child such as `env`; the busybox 1.37 of the upstream image
 * keeps them, and the envFrom tests check for them. bash keeps them too, but its error messages
 * differ from ash's ("/bin/sh: can't create /file: Read-only file system" is checked word for word).
 * So: busybox ash, unless the environment holds such a name; then bash. argv (with argv[0]) is
 * passed through unchanged: busybox picks the applet from argv[0]'s basename.
 */
#include <ctype.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

static int identifier(const char *e) {
  const char *eq = strchr(e, '=');
  const char *p;
  if (eq == NULL || eq == e) return 1;
  if (!(isalpha((unsigned char)*e) || *e == '_')) return 0;
  for (p = e; p < eq; p++)
    if (!(isalnum((unsigned char)*p) || *p == '_')) return 0;
  return 1;
}

int main(int argc, char **argv) {
  const char *shell = "/bin/busybox";
  char **e;
  (void)argc;
  for (e = environ; *e != NULL; e++)
    if (!identifier(*e)) { shell = "/bin/bash"; break; }
  execv(shell, argv);
  return 127;
}
