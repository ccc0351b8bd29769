/* SPDX-License-Identifier: MIT */
/* The tool's thread count per operation (tool_threads.h). */
#define _GNU_SOURCE

#include "tool_threads.h"

#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

static int cpu_count(void)
{
    cpu_set_t set;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    const char *omp = getenv("OMP_NUM_THREADS");

    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        n = CPU_COUNT(&set);
    if (omp && atoi(omp) > 0 && atoi(omp) < n)
        n = atoi(omp); /* the user's cap for OpenMP */
    return n < 1 ? 1 : n > 4096 ? 4096 : (int)n;
}

void qs_tool_threads_init(struct qs_tool_threads *t, int requested)
{
    const char *test = getenv("QSPARSE_TOOL_TEST_LOADAVG");
    double la[1];

    t->requested = requested;
    t->cores = cpu_count();
    if (test && *test)
        t->load = atof(test);
    else
        t->load = getloadavg(la, 1) == 1 ? la[0] : -1.0;
    t->idle = t->cores;
    if (t->load > 0) {
        double idle = (double)t->cores - t->load;
        t->idle = idle < 1.5 ? 1 : (int)lround(idle);
        if (t->idle > t->cores)
            t->idle = t->cores;
    }
}

int qs_tool_threads_for(const struct qs_tool_threads *t, enum qs_tool_op op, int64_t rows,
                        int64_t cols)
{
    int64_t n = rows > 0 && cols > INT64_MAX / rows ? INT64_MAX : rows * cols;

    if (t->requested > 0)
        return t->requested;
    if (op == QS_TOOL_OP_GPTQ ? cols < QS_TOOL_PAR_GPTQ_K || n < QS_TOOL_PAR_ELEMENTS
                              : n < QS_TOOL_PAR_ELEMENTS)
        return 1;
    return t->idle;
}
