/* SPDX-License-Identifier: MIT */
/*
 * quantize, inspect, recommend and merge-index for a build without jansson (the JSON library they parse safetensors
 * headers with): they report how to get them instead of failing to link.
 */
#include <stdio.h>

#include "commands.h"

static int missing(const char *cmd)
{
    fprintf(stderr,
            "qsparse %s: this build has no safetensors support; install jansson "
            "(Debian: libjansson-dev) and rebuild\n",
            cmd);
    return 1;
}

int qs_cmd_quantize(int argc, char **argv)
{
    (void)argc;
    return missing(argv[0]);
}

int qs_cmd_inspect(int argc, char **argv)
{
    (void)argc;
    return missing(argv[0]);
}

int qs_cmd_recommend(int argc, char **argv)
{
    (void)argc;
    return missing(argv[0]);
}

int qs_cmd_merge_index(int argc, char **argv)
{
    (void)argc;
    return missing(argv[0]);
}
