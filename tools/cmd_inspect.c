/* SPDX-License-Identifier: MIT */
/*
 * `qsparse inspect FILE [--json]`: lists the tensors of a safetensors file with their dtypes,
 * shapes, formats, bits per weight and sizes. A quantized weight is shown once, its companion
 * tensors (absmax, quant_map, quant_state, scales, SCB, ...) folded into it, recognised from
 * bitsandbytes' keys (spec/formats.md §7), from the "qsparse.quantized" metadata that
 * `qsparse quantize` writes, and from the F8 dtypes with a `_scale` companion. The file is
 * validated exactly as for quantize, so a hostile file gives an error, not a crash.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qsparse.h"
#include "commands.h"
#include "safetensors.h"

struct weight {
    const struct qs_st_tensor *main;
    char format[32];
    char dtype[16]; /* the original dtype where known */
    int ndim;
    int64_t shape[QS_ST_MAX_DIMS];
    int64_t numel;  /* logical elements */
    uint64_t bytes; /* main + companions */
    int parts;
};

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);

    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* Mark companion `base + suffix` as used by weight w. */
static void fold(const struct qs_st_file *f, char *used, struct weight *w, const char *base,
                 const char *suffix)
{
    char name[1024];
    const struct qs_st_tensor *t;

    if (snprintf(name, sizeof name, "%s%s", base, suffix) >= (int)sizeof name)
        return;
    t = qs_st_find(f, name);
    if (t && !used[t - f->tensors]) {
        used[t - f->tensors] = 1;
        w->bytes += t->end - t->begin;
        w->parts++;
    }
}

static void set_shape_json(struct weight *w, json_t *shape)
{
    size_t i;
    json_t *x;

    if (!json_is_array(shape) || json_array_size(shape) > QS_ST_MAX_DIMS)
        return;
    w->ndim = (int)json_array_size(shape);
    w->numel = 1;
    json_array_foreach(shape, i, x)
    {
        int64_t v = json_is_integer(x) ? json_integer_value(x) : 0;
        w->shape[i] = v < 0 ? 0 : v;
        if (w->shape[i] != 0 && w->numel > INT64_MAX / w->shape[i])
            w->numel = INT64_MAX;
        else
            w->numel *= w->shape[i];
    }
}

/* The original dtype of a quantized weight, named as safetensors names it ("float32" -> F32). */
static void set_dtype(struct weight *w, const char *name)
{
    static const char *const map[][2] = {
        {"float32", "F32"}, {"float16", "F16"}, {"bfloat16", "BF16"}, {"float64", "F64"}};

    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strcmp(name, map[i][0]) == 0)
            name = map[i][1];
    snprintf(w->dtype, sizeof w->dtype, "%s", name);
}

static void plain(struct weight *w, const struct qs_st_tensor *t)
{
    memset(w, 0, sizeof *w);
    w->main = t;
    snprintf(w->format, sizeof w->format, "-");
    snprintf(w->dtype, sizeof w->dtype, "%s", t->dtype);
    w->ndim = t->ndim;
    memcpy(w->shape, t->shape, sizeof w->shape);
    w->numel = t->numel;
    w->bytes = t->end - t->begin;
    w->parts = 1;
}

/* The module prefix P of "P.weight", else the name itself. */
static void prefix_of(const char *name, char *out, size_t n)
{
    size_t len = strlen(name);

    if (ends_with(name, ".weight"))
        len -= 7;
    snprintf(out, n, "%.*s", (int)len, name);
}

static size_t collect(const struct qs_st_file *f, struct weight *ws, char *used)
{
    json_t *rec = NULL;
    size_t nw = 0;
    static const char *const bnb_suffix[] = {".quant_state.bitsandbytes__nf4",
                                             ".quant_state.bitsandbytes__fp4"};

    if (f->metadata) {
        json_t *s = json_object_get(f->metadata, "qsparse.quantized");
        if (json_is_string(s))
            rec = json_loads(json_string_value(s), JSON_REJECT_DUPLICATES, NULL);
        if (rec && !json_is_object(rec)) {
            json_decref(rec);
            rec = NULL;
        }
    }

    /* 1. bitsandbytes 4-bit weights: their quant_state says format, blocksize and shape. */
    for (size_t i = 0; i < f->count; i++) {
        const struct qs_st_tensor *t = &f->tensors[i];
        for (int k = 0; k < 2; k++) {
            char base[1024];
            const struct qs_st_tensor *m;
            json_t *js;
            struct weight *w;
            if (!ends_with(t->name, bnb_suffix[k]) || strcmp(t->dtype, "U8") != 0)
                continue;
            snprintf(base, sizeof base, "%.*s", (int)(strlen(t->name) - strlen(bnb_suffix[k])),
                     t->name);
            m = qs_st_find(f, base);
            if (!m || used[m - f->tensors])
                continue;
            w = &ws[nw++];
            plain(w, m);
            used[m - f->tensors] = 1;
            js = json_loadb((const char *)t->data, t->end - t->begin, 0, NULL);
            snprintf(w->format, sizeof w->format, "%s", k == 0 ? "nf4" : "fp4");
            if (json_is_object(js)) {
                json_t *dt = json_object_get(js, "dtype");
                json_t *bs = json_object_get(js, "blocksize");
                set_shape_json(w, json_object_get(js, "shape"));
                if (json_is_string(dt))
                    set_dtype(w, json_string_value(dt));
                snprintf(w->format, sizeof w->format, "%s%s/%lld%s", k == 0 ? "nf4" : "fp4", "",
                         json_is_integer(bs) ? (long long)json_integer_value(bs) : 0LL,
                         json_object_get(js, "nested_offset") ? "+dq" : "");
            }
            json_decref(js);
            fold(f, used, w, base, ".absmax");
            fold(f, used, w, base, ".quant_map");
            fold(f, used, w, base, ".nested_absmax");
            fold(f, used, w, base, ".nested_quant_map");
            fold(f, used, w, base, bnb_suffix[k]);
        }
    }

    /* 2. Weights recorded by `qsparse quantize` and other scaled layouts. */
    for (size_t i = 0; i < f->count; i++) {
        const struct qs_st_tensor *t = &f->tensors[i];
        json_t *r = rec ? json_object_get(rec, t->name) : NULL;
        char prefix[1024], name[1100];
        struct weight *w;

        if (used[i])
            continue;
        prefix_of(t->name, prefix, sizeof prefix);
        snprintf(name, sizeof name, "%s_scale", t->name);
        if (json_is_object(r)) {
            json_t *fmt = json_object_get(r, "format"), *dt = json_object_get(r, "dtype");
            w = &ws[nw++];
            plain(w, t);
            used[i] = 1;
            snprintf(w->format, sizeof w->format, "%s",
                     json_is_string(fmt) ? json_string_value(fmt) : "?");
            if (json_is_string(dt))
                set_dtype(w, json_string_value(dt));
            set_shape_json(w, json_object_get(r, "shape"));
            fold(f, used, w, t->name, "_scale");
            fold(f, used, w, t->name, "_scale_2");
            fold(f, used, w, prefix, ".SCB");
            fold(f, used, w, prefix, ".weight_format");
            continue;
        }
        if (strcmp(t->dtype, "I8") == 0 && ends_with(t->name, ".weight")) {
            char scb[1100];
            snprintf(scb, sizeof scb, "%s.SCB", prefix);
            if (qs_st_find(f, scb)) {
                w = &ws[nw++];
                plain(w, t);
                used[i] = 1;
                snprintf(w->format, sizeof w->format, "llm_int8");
                fold(f, used, w, prefix, ".SCB");
                fold(f, used, w, prefix, ".weight_format");
                continue;
            }
        }
        if ((strcmp(t->dtype, "F8_E4M3") == 0 || strcmp(t->dtype, "F8_E5M2") == 0) &&
            qs_st_find(f, name)) {
            w = &ws[nw++];
            plain(w, t);
            used[i] = 1;
            snprintf(w->format, sizeof w->format, "%s",
                     strcmp(t->dtype, "F8_E4M3") == 0 ? "fp8_e4m3" : "fp8_e5m2");
            fold(f, used, w, t->name, "_scale");
            continue;
        }
    }

    /* 3. Everything else as it is. */
    for (size_t i = 0; i < f->count; i++)
        if (!used[i]) {
            plain(&ws[nw++], &f->tensors[i]);
            used[i] = 1;
        }
    if (rec)
        json_decref(rec);
    return nw;
}

static double bits_of(const struct weight *w)
{
    return w->numel > 0 ? 8.0 * (double)w->bytes / (double)w->numel : 0.0;
}

static void shape_str(const struct weight *w, char *buf, size_t n)
{
    size_t k = 0;

    k += (size_t)snprintf(buf + k, n - k, "[");
    for (int d = 0; d < w->ndim && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, d ? ", %lld" : "%lld", (long long)w->shape[d]);
    if (k < n)
        snprintf(buf + k, n - k, "]");
}

int qs_cmd_inspect(int argc, char **argv)
{
    const char *path = NULL;
    int as_json = 0, rc = 1;
    struct qs_st_file f;
    struct weight *ws = NULL;
    char *used = NULL, err[512];
    size_t nw;
    int64_t params = 0, qparams = 0;
    uint64_t qbytes = 0, tbytes = 0;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            as_json = 1;
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            printf("usage: qsparse inspect FILE.safetensors [--json]\n"
                   "Lists tensors, dtypes, shapes, formats, bits per weight and sizes.\n");
            return 0;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "qsparse inspect: unknown option '%s'\n", argv[i]);
            return 2;
        } else if (!path) {
            path = argv[i];
        } else {
            fprintf(stderr, "qsparse inspect: one file at a time\n");
            return 2;
        }
    }
    if (!path) {
        fprintf(stderr, "usage: qsparse inspect FILE.safetensors [--json]\n");
        return 2;
    }
    if (qs_st_open(&f, path, err, sizeof err) != 0) {
        fprintf(stderr, "qsparse inspect: error: %s\n", err);
        return 1;
    }
    ws = calloc(f.count + 1, sizeof *ws);
    used = calloc(f.count + 1, 1);
    if (!ws || !used) {
        fprintf(stderr, "qsparse inspect: error: out of memory\n");
        goto done;
    }
    nw = collect(&f, ws, used);
    for (size_t i = 0; i < nw; i++) {
        params += ws[i].numel;
        tbytes += ws[i].bytes;
        if (strcmp(ws[i].format, "-") != 0) {
            qparams += ws[i].numel;
            qbytes += ws[i].bytes;
        }
    }

    if (as_json) {
        json_t *root = json_object(), *list = json_array();
        char *text;
        for (size_t i = 0; i < nw; i++) {
            json_t *shape = json_array();
            for (int d = 0; d < ws[i].ndim; d++)
                json_array_append_new(shape, json_integer(ws[i].shape[d]));
            json_array_append_new(list, json_pack("{s:s, s:s, s:s, s:o, s:I, s:I, s:f, s:i}",
                                                  "name", ws[i].main->name, "dtype", ws[i].dtype,
                                                  "format", ws[i].format, "shape", shape, "numel",
                                                  (json_int_t)ws[i].numel, "bytes",
                                                  (json_int_t)ws[i].bytes, "bits_per_weight",
                                                  bits_of(&ws[i]), "tensors", ws[i].parts));
        }
        json_object_set_new(root, "file", json_string(path));
        json_object_set_new(root, "file_bytes", json_integer((json_int_t)f.map_size));
        json_object_set_new(root, "header_bytes", json_integer((json_int_t)f.header_len));
        json_object_set_new(root, "tensors", json_integer((json_int_t)f.count));
        json_object_set_new(root, "parameters", json_integer(params));
        json_object_set_new(root, "quantized_parameters", json_integer(qparams));
        json_object_set_new(root, "weights", list);
        if (f.metadata)
            json_object_set(root, "metadata", f.metadata);
        text = json_dumps(root, JSON_INDENT(1));
        json_decref(root);
        if (!text) {
            fprintf(stderr, "qsparse inspect: error: out of memory\n");
            goto done;
        }
        puts(text);
        free(text);
        rc = 0;
        goto done;
    }

    printf("%s: %zu tensors, %zu bytes (header %llu)\n", path, f.count, f.map_size,
           (unsigned long long)f.header_len);
    printf("%-56s %-8s %-16s %-12s %7s %12s\n", "name", "dtype", "shape", "format", "bits/w",
           "bytes");
    for (size_t i = 0; i < nw; i++) {
        char shape[128];
        shape_str(&ws[i], shape, sizeof shape);
        printf("%-56s %-8s %-16s %-12s %7.3f %12llu\n", ws[i].main->name, ws[i].dtype, shape,
               ws[i].format, bits_of(&ws[i]), (unsigned long long)ws[i].bytes);
    }
    printf("total: %lld parameters in %llu bytes (%.3f bits/weight)", (long long)params,
           (unsigned long long)tbytes, params ? 8.0 * (double)tbytes / (double)params : 0.0);
    if (qparams)
        printf("; quantized: %lld parameters, %.3f bits/weight", (long long)qparams,
               8.0 * (double)qbytes / (double)qparams);
    printf("\n");
    rc = 0;
done:
    free(ws);
    free(used);
    qs_st_close(&f);
    return rc;
}
