/* SPDX-License-Identifier: MIT */
/*
 * `qsparse doctor [--json]`: what the library sees on this machine, the first thing a bug report
 * should contain. Version, the CPU's ISA features, the tiers that can run and the one in use
 * (and whether QS_FORCE_ISA clamps it), OpenMP and BLAS with their thread counts and OpenBLAS's
 * core type, the compiler, and each backend with the reason it cannot run.
 */
#define _POSIX_C_SOURCE 200809L

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "commands.h"
#include "tool_threads.h"
#include "qsparse.h"
#include "qsparse/matmul.h"
#include "qsparse/profile.h"

/* A JSON string: quotes, backslashes and control characters escaped; other bytes as they are
 * (the library's messages are ASCII, except file paths, which JSON readers take as UTF-8). */
static void json_str(const char *s)
{
    putchar('"');
    for (; s && *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            printf("\\%c", ch);
        else if (ch < 0x20)
            printf("\\u%04x", ch);
        else
            putchar(ch);
    }
    putchar('"');
}

static const char *env_or(const char *name, const char *fallback)
{
    const char *v = getenv(name);
    return v && *v ? v : fallback;
}

struct facts {
    char features[256], tiers[256];
    const char *isa, *openmp, *blas, *compiler;
    struct qs_tool_threads thr;
    char plugin[PATH_MAX + 64]; /* where the wheel's tool looked for the CUDA plugin, or "" */
};

/*
 * The tool of a Python wheel is linked statically, so the library's default plugin search
 * (beside the loaded library) looks beside the executable, in the scripts folder; the wheel
 * puts libqsparse-cuda.so in the package folder. python/meson.build defines QS_TOOL_PKG_REL,
 * that folder relative to the scripts folder, and the tool loads the plugin from there unless
 * QS_PLUGIN_PATH says otherwise. Fills f->plugin with the path tried.
 */
static void load_package_plugin(struct facts *f)
{
    f->plugin[0] = '\0';
#ifdef QS_TOOL_PKG_REL
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    const char *env = getenv("QS_PLUGIN_PATH");
    char *slash;

    if (n <= 0 || (env && *env))
        return;
    exe[n] = '\0';
    if (!(slash = strrchr(exe, '/')))
        return;
    *slash = '\0';
    snprintf(f->plugin, sizeof f->plugin, "%s/%s/libqsparse-cuda.so", exe, QS_TOOL_PKG_REL);
    qs_backend_load(f->plugin); /* the outcome is what qs_backend_message reports */
#endif
}

static void gather(qs_ctx *ctx, struct facts *f)
{
    uint32_t cpu = qs_cpu_isa();
    size_t n = 0;

    f->features[0] = f->tiers[0] = '\0';
    for (int bit = 0; bit < 32; bit++) {
        const char *name = (cpu >> bit) & 1u ? qs_isa_name(1u << bit) : NULL;
        if (name && n + strlen(name) + 2 < sizeof f->features)
            n += (size_t)snprintf(f->features + n, sizeof f->features - n, "%s%s", n ? " " : "",
                                  name);
    }
    n = 0;
    for (int32_t i = 0; i < qs_isa_tier_count(); i++) {
        qs_isa_tier t;
        if (qs_isa_tier_info(i, &t) == QS_OK && t.available &&
            n + strlen(t.name) + 2 < sizeof f->tiers)
            n += (size_t)snprintf(f->tiers + n, sizeof f->tiers - n, "%s%s", n ? " " : "",
                                  t.name);
    }
    f->isa = qs_ctx_isa_name(ctx);
    f->openmp = qs_runtime_info(ctx, QS_RUNTIME_OPENMP);
    f->blas = qs_runtime_info(ctx, QS_RUNTIME_BLAS);
    f->compiler = qs_runtime_info(ctx, QS_RUNTIME_COMPILER);
    qs_tool_threads_init(&f->thr, 0);
}

/* What `qsparse quantize` does with its threads here, and what to do on a shared machine. */
static void print_threads(const struct facts *f)
{
    printf("tool threads:   auto per tensor: 1 below %lld elements (GPTQ/SparseGPT: K below %d), "
           "else %d (%d cores, load average %.2f)\n",
           (long long)QS_TOOL_PAR_ELEMENTS, QS_TOOL_PAR_GPTQ_K, f->thr.idle, f->thr.cores,
           f->thr.load);
    printf("shared machine: other jobs busy here? run `qsparse quantize --threads 1` (and "
           "OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 for the library and GPTQ): a thread that "
           "waits for a core at every barrier makes a run several times slower%s\n",
           f->thr.load >= (double)f->thr.cores - 0.5 ? " (the load average says it is busy now)"
                                                      : "");
}

static void print_words(const struct facts *f)
{
    printf("libqsparse %s (API %d), built with %s\n", qs_version_string(), (int)qs_api_version(),
           f->compiler);
    printf("CPU features:   %s\n", f->features[0] ? f->features : "(none beyond the baseline)");
    printf("ISA tiers:      %s\n", f->tiers);
    if (*env_or("QS_FORCE_ISA", ""))
        printf("tier in use:    %s (QS_FORCE_ISA=%s)\n", f->isa, env_or("QS_FORCE_ISA", ""));
    else
        printf("tier in use:    %s\n", f->isa);
    printf("OpenMP:         %s (OMP_NUM_THREADS=%s)\n", f->openmp,
           env_or("OMP_NUM_THREADS", "unset"));
    printf("BLAS:           %s (OPENBLAS_CORETYPE=%s, OPENBLAS_NUM_THREADS=%s)\n", f->blas,
           env_or("OPENBLAS_CORETYPE", "unset"), env_or("OPENBLAS_NUM_THREADS", "unset"));
    printf("matmul GEMM:    %s\n",
           qs_matmul_info() & QS_MATMUL_BLAS ? "cblas_sgemm" : "the library's own loop");
    print_threads(f);
    if (f->plugin[0])
        printf("CUDA plugin:    %s (the package folder; QS_PLUGIN_PATH overrides)\n", f->plugin);
    /* CPU, CUDA, then any plugin backend of another name: codes run on without a gap */
    for (int32_t b = QS_BACKEND_CPU; qs_backend_name(b); b++) {
        int avail = qs_backend_available(b); /* tries the plugin first: then the message says why */
        const char *msg = qs_backend_message(b);
        printf("backend %-6s  %s%s%s\n", qs_backend_name(b), avail ? "available" : "not available",
               msg && *msg ? ": " : "", msg ? msg : "");
    }
}

static void print_json(const struct facts *f)
{
    printf("{\"version\": ");
    json_str(qs_version_string());
    printf(", \"api_version\": %d, \"compiler\": ", (int)qs_api_version());
    json_str(f->compiler);
    printf(", \"cpu_features\": ");
    json_str(f->features);
    printf(", \"tiers\": ");
    json_str(f->tiers);
    printf(", \"isa\": ");
    json_str(f->isa);
    printf(", \"force_isa\": ");
    json_str(env_or("QS_FORCE_ISA", ""));
    printf(", \"openmp\": ");
    json_str(f->openmp);
    printf(", \"blas\": ");
    json_str(f->blas);
    printf(", \"openblas_coretype\": ");
    json_str(env_or("OPENBLAS_CORETYPE", ""));
    printf(", \"tool_threads\": {\"cores\": %d, \"load_average\": %.2f, \"idle\": %d, "
           "\"parallel_elements\": %lld, \"parallel_gptq_k\": %d}, \"cuda_plugin\": ",
           f->thr.cores, f->thr.load, f->thr.idle, (long long)QS_TOOL_PAR_ELEMENTS,
           QS_TOOL_PAR_GPTQ_K);
    json_str(f->plugin);
    printf(", \"matmul_blas\": %s, \"backends\": {",
           qs_matmul_info() & QS_MATMUL_BLAS ? "true" : "false");
    for (int32_t b = QS_BACKEND_CPU; qs_backend_name(b); b++) {
        printf("%s", b > QS_BACKEND_CPU ? ", " : "");
        json_str(qs_backend_name(b));
        int avail = qs_backend_available(b); /* before the message, as above */
        printf(": {\"available\": %s, \"message\": ", avail ? "true" : "false");
        json_str(qs_backend_message(b));
        printf("}");
    }
    printf("}}\n");
}

int qs_cmd_doctor(int argc, char **argv)
{
    int json = 0;
    qs_ctx_params p;
    qs_ctx *ctx = NULL;
    struct facts f;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("usage: qsparse doctor [--json]\n\nWhat libqsparse sees here: version, CPU "
                   "features, ISA tiers, OpenMP, BLAS,\nbackends and why one cannot run. Attach "
                   "it to bug reports.\n");
            return 0;
        } else {
            fprintf(stderr, "qsparse doctor: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    /* the CPU backend always runs; the plugin's state is asked of the registry, not a context */
    qs_ctx_params_init(&p);
    p.backend = QS_BACKEND_CPU;
    if (qs_ctx_create(&p, &ctx) != QS_OK) {
        fprintf(stderr, "qsparse doctor: cannot create a context\n");
        return 1;
    }
    gather(ctx, &f);
    load_package_plugin(&f);
    if (json)
        print_json(&f);
    else
        print_words(&f);
    qs_ctx_destroy(ctx);
    return 0;
}
