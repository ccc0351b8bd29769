/* SPDX-License-Identifier: MIT */
/*
 * `qsparse calibrate ...`: running the model needs torch and transformers, so the command is the
 * Python package's (python/qsparse/calibrate.py) and the tool hands it over: it replaces itself
 * with `PYTHON -m qsparse.calibrate ARGS...`, PYTHON being $QSPARSE_PYTHON, else the python3 in
 * the tool's own folder (a wheel installs both into the same bin/), else python3 on PATH. The
 * tool itself stays free of any Python or torch dependency.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"

static void exec_python(const char *python, int argc, char **argv)
{
    char **args = calloc((size_t)argc + 4, sizeof *args);

    if (!args)
        return;
    args[0] = (char *)python;
    args[1] = "-m";
    args[2] = "qsparse.calibrate";
    for (int i = 1; i < argc; i++)
        args[i + 2] = argv[i];
    args[argc + 2] = NULL;
    execvp(python, args);
    free(args);
}

int qs_cmd_calibrate(int argc, char **argv)
{
    const char *env = getenv("QSPARSE_PYTHON");
    char self[PATH_MAX], beside[PATH_MAX + 16];
    ssize_t n;

    fflush(NULL);
    if (env && *env) {
        exec_python(env, argc, argv);
        fprintf(stderr, "qsparse calibrate: cannot run QSPARSE_PYTHON=%s: %s\n", env,
                strerror(errno));
        return 1;
    }
    n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        char *slash;
        self[n] = '\0';
        if ((slash = strrchr(self, '/')) != NULL) {
            *slash = '\0';
            snprintf(beside, sizeof beside, "%s/python3", self);
            if (access(beside, X_OK) == 0)
                exec_python(beside, argc, argv);
        }
    }
    exec_python("python3", argc, argv);
    fprintf(stderr,
            "qsparse calibrate: cannot run python3 (%s). The command runs the model with torch "
            "and transformers: install the qsparse Python package (pip install .) next to them "
            "and put python3 on PATH, or set QSPARSE_PYTHON.\n",
            strerror(errno));
    return 1;
}
