/* SPDX-License-Identifier: MIT */
/*
 * The `qsparse` command-line tool: a table of subcommands, each in its own file. It uses only the
 * public API (include/qsparse.h), like any program that embeds the library.
 */
#include <stdio.h>
#include <string.h>

#include "qsparse.h"
#include "commands.h"
#include "heap.h"
#include "tool_ctx.h"

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} commands[] = {
    {"demo", qs_cmd_demo, "quantize a built-in heavy-tailed weight matrix into every format"},
    {"calibrate", qs_cmd_calibrate,
     "run a model over text: the calibration file of quantize --calib (Python, torch)"},
    {"quantize", qs_cmd_quantize, "quantize the weights of a safetensors model (see --help)"},
    {"merge-index", qs_cmd_merge_index,
     "join the part folders of `quantize --shard I/N` into one model folder"},
    {"inspect", qs_cmd_inspect, "list a safetensors file's tensors, formats and bits per weight"},
    {"recommend", qs_cmd_recommend, "measure every format on this machine for a model, ranked"},
    {"doctor", qs_cmd_doctor, "what the library sees here (ISA, threads, BLAS, backends); --json"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: qsparse <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-11s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\noptions before the command:\n  --profile        print the library's profiling "
               "counters to stderr at the end\n  --profile=json   the same as JSON\n");
    fprintf(f, "\n`qsparse <command> --help` describes a command. libqsparse %s\n",
            qs_version_string());
}

int main(int argc, char **argv)
{
    qs_heap_hook_jansson(); /* before any JSON value exists: every one is counted and freed alike */
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    /* tool-wide options before the command */
    while (argc > 2 && strncmp(argv[1], "--profile", 9) == 0) {
        if (strcmp(argv[1], "--profile") == 0) {
            qs_tool_profile = 1;
        } else if (strcmp(argv[1], "--profile=json") == 0) {
            qs_tool_profile = 2;
        } else {
            fprintf(stderr, "qsparse: unknown option '%s'\n", argv[1]);
            return 2;
        }
        argc--;
        argv++;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("qsparse %s\n", qs_version_string());
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "qsparse: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
