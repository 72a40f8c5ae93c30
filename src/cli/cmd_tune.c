/* trainperf tune: try fixes on the user's own command as short trials.
 *
 * The trials are `trainperf run` invocations of this same binary, with knobs
 * handed to the Python auto hook through the environment. Scheduling them,
 * their statistics and the table are plain bookkeeping, written in Python
 * (python/trainperf/_tune.py, standard library only): this command finds that
 * package and a Python 3, then hands over with exec. docs/tune.md. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"

extern char **environ;

/* A Python 3 to run the orchestrator: TRAINPERF_PYTHON, else python3 on PATH. */
static const char *tune_python(void)
{
    const char *py = getenv("TRAINPERF_PYTHON");
    return py && *py ? py : "python3";
}

int cmd_tune(int argc, char **argv)
{
    char pydir[PATH_MAX];
    cli_python_dir(pydir, sizeof(pydir));
    if (!pydir[0]) {
        cli_error("tune needs trainperf's Python package, which was not found beside this "
                  "binary (set TRAINPERF_PYTHON_DIR)");
        return CLI_USAGE;
    }
    char self[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (len <= 0) {
        cli_error("tune: cannot find this program's path: %s", strerror(errno));
        return CLI_FAIL;
    }
    self[len] = 0;

    /* PYTHONPATH: the package first, then what the user had. */
    const char *old = getenv("PYTHONPATH");
    char *pp = NULL;
    if ((old && *old ? asprintf(&pp, "%s:%s", pydir, old) : asprintf(&pp, "%s", pydir)) < 0) {
        cli_error("tune: out of memory");
        return CLI_FAIL;
    }
    if (setenv("PYTHONPATH", pp, 1) != 0) {
        free(pp);
        cli_error("tune: cannot set PYTHONPATH: %s", strerror(errno));
        return CLI_FAIL;
    }
    free(pp);

    /* python3 -m trainperf._tune --cli SELF ARGS... (argv[0] is "tune") */
    size_t n = (size_t)argc + 6;
    char **av = calloc(n, sizeof(char *));
    if (!av) {
        cli_error("tune: out of memory");
        return CLI_FAIL;
    }
    size_t k = 0;
    const char *py = tune_python();
    av[k++] = (char *)py;
    av[k++] = "-m";
    av[k++] = "trainperf._tune";
    av[k++] = "--cli";
    av[k++] = self;
    for (int i = 1; i < argc; i++) av[k++] = argv[i];
    av[k] = NULL;
    fflush(NULL);
    execvp(py, av);
    cli_error("tune: cannot run %s: %s (set TRAINPERF_PYTHON to a Python 3)", py,
              strerror(errno));
    free(av);
    return errno == ENOENT ? 127 : 126;
}
