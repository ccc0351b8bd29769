/* SPDX-License-Identifier: MIT */
/*
 * `qsparse inspect FILE [--json]`: lists the tensors of a safetensors file with their dtypes,
 * shapes, formats, bits per weight and sizes. A quantized weight is shown once, its companion
 * tensors (absmax, quant_map, quant_state, scales, SCB, ...) folded into it. The companion keys
 * come from the checkpoint-key table that `qsparse quantize` writes by (checkpoint_keys.h), so
 * reader and writer share one key scheme. A weight is recognised from a bitsandbytes quant_state
 * key, from the "qsparse.quantized" metadata that `qsparse quantize` writes, or, without either,
 * from a weight dtype only quantized formats use (I8, F8_*) beside its first companion key. The
 * file is validated exactly as for quantize, so a hostile file gives an error, not a crash; shapes
 * taken from its metadata are checked the same way (integers >= 0 whose product fits int64), totals
 * are added with overflow checks, names and metadata strings are printed escaped (escape.h), and
 * every companion lookup is a binary search, so the cost stays n log n in the number of tensors.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qsparse.h"
#include "checkpoint_keys.h"
#include "commands.h"
#include "escape.h"
#include "layout.h"
#include "natsort.h"
#include "safetensors.h"
#include "heap.h"

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

/* The first alen bytes of a followed by b, from malloc (NULL when out of memory). */
static char *join(const char *a, size_t alen, const char *b)
{
    size_t blen = strlen(b);
    char *s = qs_heap_malloc(alen + blen + 1);

    if (s) {
        memcpy(s, a, alen);
        memcpy(s + alen, b, blen + 1);
    }
    return s;
}

/* The tensor named base + suffix, or NULL. */
static const struct qs_st_tensor *find2(const struct qs_st_file *f, const char *base,
                                        const char *suffix, int *oom)
{
    char *name = join(base, strlen(base), suffix);
    const struct qs_st_tensor *t = name ? qs_st_find(f, name) : NULL;

    if (!name)
        *oom = 1;
    qs_heap_free(name);
    return t;
}

/* Mark companion `base + suffix` as used by weight w. */
static void fold(const struct qs_st_file *f, char *used, struct weight *w, const char *base,
                 const char *suffix, int *oom)
{
    const struct qs_st_tensor *t = find2(f, base, suffix, oom);

    if (t && !used[t - f->tensors]) {
        used[t - f->tensors] = 1;
        w->bytes += t->end - t->begin;
        w->parts++;
    }
}

/* Fold every companion key of `format` (checkpoint_keys.h) of the weight named `name`, whose
 * module prefix is `prefix`. */
static void fold_keys(const struct qs_st_file *f, char *used, struct weight *w, int32_t format,
                      const char *name, const char *prefix, int *oom)
{
    for (const struct qs_ckpt_key *k = qs_ckpt_keys(format); k && k->suffix; k++)
        if (*k->suffix)
            fold(f, used, w, k->module ? prefix : name, k->suffix, oom);
}

/* The key of `format` whose bytes come from `source` (enum qs_key_source), or NULL. */
static const struct qs_ckpt_key *key_from(int32_t format, int32_t source)
{
    for (const struct qs_ckpt_key *k = qs_ckpt_keys(format); k && k->suffix; k++)
        if (k->source == source && *k->suffix)
            return k;
    return NULL;
}

/*
 * Whether tensor t, with no record saying so, is a weight of `format`: the format's weight key
 * has a dtype that plain tensors never have (I8, F8_*; not U8, which any byte tensor may be),
 * t has it, and the first companion key that every such weight has is present with its dtype
 * (a module key needs t to be named P.weight).
 */
static int looks_like(const struct qs_st_file *f, const struct qs_st_tensor *t, int32_t format,
                      const char *prefix, int *oom)
{
    const struct qs_ckpt_key *k = qs_ckpt_keys(format), *data = NULL, *mark = NULL;
    const struct qs_st_tensor *c;

    for (; k && k->suffix; k++) {
        if (!*k->suffix)
            data = k;
        else if (!mark && !k->double_quant)
            mark = k;
    }
    if (!data || !mark || !data->dtype || strcmp(data->dtype, "U8") == 0 ||
        strcmp(data->dtype, t->dtype) != 0 || (mark->module && !ends_with(t->name, ".weight")))
        return 0;
    c = find2(f, mark->module ? prefix : t->name, mark->suffix, oom);
    return c && (!mark->dtype || strcmp(c->dtype, mark->dtype) == 0);
}

/*
 * A weight's logical shape from its metadata (quant_state or qsparse.quantized), held to the
 * header's rules: at most QS_ST_MAX_DIMS integers >= 0 whose product fits int64. Returns 0, or
 * -1 with a message in err.
 */
static int set_shape_json(struct weight *w, json_t *shape, const char *where, char *err,
                          size_t errlen)
{
    size_t i;
    json_t *x;
    int64_t numel = 1;

    if (!json_is_array(shape) || json_array_size(shape) > QS_ST_MAX_DIMS) {
        snprintf(err, errlen,
                 "tensor '%s': the shape in its %s is not a list of at most %d integers",
                 w->main->name, where, QS_ST_MAX_DIMS);
        return -1;
    }
    json_array_foreach(shape, i, x)
    {
        if (!json_is_integer(x) || json_integer_value(x) < 0) {
            snprintf(err, errlen,
                     "tensor '%s': the shape in its %s has an entry that is not an "
                     "integer >= 0",
                     w->main->name, where);
            return -1;
        }
        w->shape[i] = json_integer_value(x);
        if (w->shape[i] != 0 && numel > INT64_MAX / w->shape[i]) {
            snprintf(err, errlen,
                     "tensor '%s': the shape in its %s overflows (more than 2^63 "
                     "elements)",
                     w->main->name, where);
            return -1;
        }
        numel *= w->shape[i];
    }
    w->ndim = (int)json_array_size(shape);
    w->numel = numel;
    return 0;
}

/*
 * Copy a metadata string into a fixed field, cut before a UTF-8 sequence that does not fit
 * whole: a split one would make the --json output invalid and jansson drop the whole entry.
 */
static void copy_text(char *dst, size_t n, const char *src)
{
    size_t len = strlen(src);

    if (len >= n) {
        len = n - 1;
        while (len > 0 && ((unsigned char)src[len] & 0xC0) == 0x80)
            len--; /* src[len], the first byte left out, continues a sequence: leave it all out */
    }
    memcpy(dst, src, len);
    dst[len] = '\0';
}

/* The original dtype of a quantized weight, named as safetensors names it ("float32" -> F32). */
static void set_dtype(struct weight *w, const char *name)
{
    static const char *const map[][2] = {
        {"float32", "F32"}, {"float16", "F16"}, {"bfloat16", "BF16"}, {"float64", "F64"}};

    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strcmp(name, map[i][0]) == 0)
            name = map[i][1];
    copy_text(w->dtype, sizeof w->dtype, name);
}

/*
 * A weight that the tool's own layout stores 2:4-compressed (its record says "sparsity": "2:4"
 * and the file has its meta words, checkpoint_keys.h): the meta folds into it and its shape is
 * the dense one of the record, so its bits per weight count the meta too. A loader layout's 2:4
 * weight is stored dense (no meta key) and stays as it is. Returns 0, or -1 with a message.
 */
static int fold_sparse(const struct qs_st_file *f, char *used, struct weight *w, json_t *rec,
                       const char *name, char *err, size_t errlen, int *oom)
{
    json_t *r = rec ? json_object_get(rec, name) : NULL;
    json_t *sp = r ? json_object_get(r, "sparsity") : NULL;
    size_t len;

    if (!json_is_string(sp) || strcmp(json_string_value(sp), "2:4") != 0 ||
        !find2(f, name, QS_CKPT_SP24_META, oom))
        return 0;
    fold(f, used, w, name, QS_CKPT_SP24_META, oom);
    if (set_shape_json(w, json_object_get(r, "shape"), "qsparse.quantized metadata", err,
                       errlen) != 0)
        return -1;
    len = strlen(w->format);
    snprintf(w->format + len, sizeof w->format - len, "+2:4");
    return 0;
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

/* The module prefix P of "P.weight", else the name itself; from malloc. */
static char *prefix_of(const char *name)
{
    size_t len = strlen(name);

    if (ends_with(name, ".weight"))
        len -= 7;
    return join(name, len, "");
}

/*
 * Group the tensors into weights (ws, one per output row); returns their number, or -1 with a
 * message in err.
 */
static long collect(const struct qs_st_file *f, struct weight *ws, char *used, char *err,
                    size_t errlen)
{
    json_t *rec = NULL;
    size_t nw = 0;
    int oom = 0;
    /* the bitsandbytes 4-bit formats, told apart by their quant_state key */
    static const int32_t bnb4[] = {QS_FORMAT_NF4, QS_FORMAT_FP4};

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
        for (size_t k = 0; k < sizeof bnb4 / sizeof bnb4[0]; k++) {
            const struct qs_ckpt_key *qk = key_from(bnb4[k], QS_KEY_QUANT_STATE);
            const char *name = qs_format_name(bnb4[k]);
            char *base, *prefix;
            const struct qs_st_tensor *m;
            json_t *js;
            struct weight *w;
            if (!qk || !ends_with(t->name, qk->suffix) || strcmp(t->dtype, qk->dtype) != 0)
                continue;
            if (!(base = join(t->name, strlen(t->name) - strlen(qk->suffix), ""))) {
                oom = 1;
                goto out;
            }
            m = qs_st_find(f, base);
            if (!m || used[m - f->tensors]) {
                qs_heap_free(base);
                continue;
            }
            if (!(prefix = prefix_of(base))) {
                qs_heap_free(base);
                oom = 1;
                goto out;
            }
            w = &ws[nw++];
            plain(w, m);
            used[m - f->tensors] = 1;
            js = json_loadb((const char *)t->data, t->end - t->begin, 0, NULL);
            snprintf(w->format, sizeof w->format, "%s", name);
            if (json_is_object(js)) {
                json_t *dt = json_object_get(js, "dtype");
                json_t *bs = json_object_get(js, "blocksize");
                if (set_shape_json(w, json_object_get(js, "shape"), "quant_state", err, errlen)) {
                    json_decref(js);
                    qs_heap_free(base);
                    qs_heap_free(prefix);
                    goto bad;
                }
                if (json_is_string(dt))
                    set_dtype(w, json_string_value(dt));
                snprintf(w->format, sizeof w->format, "%s/%lld%s", name,
                         json_is_integer(bs) ? (long long)json_integer_value(bs) : 0LL,
                         json_object_get(js, "nested_offset") ? "+dq" : "");
            }
            json_decref(js);
            fold_keys(f, used, w, bnb4[k], base, prefix, &oom);
            if (fold_sparse(f, used, w, rec, base, err, errlen, &oom) != 0) {
                qs_heap_free(base);
                qs_heap_free(prefix);
                goto bad;
            }
            qs_heap_free(base);
            qs_heap_free(prefix);
        }
    }

    /* 2. Weights that a loader layout renamed (compressed-tensors' P.weight_packed, ...): the
     * record names P.weight and its layout; the layout's first key is the main tensor. */
    if (rec) {
        const char *name;
        json_t *r;
        json_object_foreach(rec, name, r)
        {
            json_t *lay = json_object_get(r, "layout"), *fmt = json_object_get(r, "format");
            json_t *dt = json_object_get(r, "dtype");
            const struct qs_layout *L = json_is_string(lay)
                                            ? qs_layout_find(json_string_value(lay))
                                            : NULL;
            struct qs_layout_req req;
            const struct qs_ckpt_key *keys;
            const struct qs_st_tensor *m;
            char *prefix;
            struct weight *w;

            if (!L || L == &qs_layout_bnb || L == &qs_layout_qsparse || !json_is_string(fmt) ||
                qs_st_find(f, name))
                continue;
            memset(&req, 0, sizeof req);
            req.format = qs_format_from_name(json_string_value(fmt));
            qs_quant_params_init(&req.params, req.format);
            if (req.format <= 0 || !(keys = L->keys(&req)) || !keys->suffix)
                continue;
            if (!(prefix = prefix_of(name))) {
                oom = 1;
                goto out;
            }
            m = find2(f, keys->module ? prefix : name, keys->suffix, &oom);
            if (!m || used[m - f->tensors]) {
                qs_heap_free(prefix);
                continue;
            }
            w = &ws[nw++];
            plain(w, m);
            used[m - f->tensors] = 1;
            copy_text(w->format, sizeof w->format, json_string_value(fmt));
            if (json_is_string(dt))
                set_dtype(w, json_string_value(dt));
            if (set_shape_json(w, json_object_get(r, "shape"), "qsparse.quantized metadata", err,
                               errlen) != 0) {
                qs_heap_free(prefix);
                goto bad;
            }
            for (const struct qs_ckpt_key *k = keys + 1; k->suffix; k++)
                fold(f, used, w, k->module ? prefix : name, k->suffix, &oom);
            qs_heap_free(prefix);
        }
    }

    /* 3. Weights recorded by `qsparse quantize` and other scaled layouts. */
    for (size_t i = 0; i < f->count; i++) {
        const struct qs_st_tensor *t = &f->tensors[i];
        json_t *r = rec ? json_object_get(rec, t->name) : NULL;
        char *prefix;
        struct weight *w;

        if (used[i])
            continue;
        if (!(prefix = prefix_of(t->name))) {
            oom = 1;
            goto out;
        }
        if (json_is_object(r)) {
            json_t *fmt = json_object_get(r, "format"), *dt = json_object_get(r, "dtype");
            w = &ws[nw++];
            plain(w, t);
            used[i] = 1;
            copy_text(w->format, sizeof w->format,
                      json_is_string(fmt) ? json_string_value(fmt) : "?");
            if (json_is_string(dt))
                set_dtype(w, json_string_value(dt));
            if (set_shape_json(w, json_object_get(r, "shape"), "qsparse.quantized metadata", err,
                               errlen) != 0) {
                qs_heap_free(prefix);
                goto bad;
            }
            /* the recorded format's keys; for a format this library does not know, the keys
             * of every format (a foreign writer's companions are still counted) */
            int32_t rf = json_is_string(fmt) ? qs_format_from_name(json_string_value(fmt)) : -1;
            if (qs_ckpt_keys(rf))
                fold_keys(f, used, w, rf, t->name, prefix, &oom);
            else
                for (int32_t g = 1; g <= qs_format_count(); g++)
                    fold_keys(f, used, w, g, t->name, prefix, &oom);
            if (fold_sparse(f, used, w, rec, t->name, err, errlen, &oom) != 0) {
                qs_heap_free(prefix);
                goto bad;
            }
        } else {
            for (int32_t g = 1; g <= qs_format_count(); g++) {
                if (!looks_like(f, t, g, prefix, &oom))
                    continue;
                w = &ws[nw++];
                plain(w, t);
                used[i] = 1;
                snprintf(w->format, sizeof w->format, "%s", qs_format_name(g));
                fold_keys(f, used, w, g, t->name, prefix, &oom);
                break;
            }
        }
        qs_heap_free(prefix);
    }

    /* 4. Everything else as it is. */
    for (size_t i = 0; i < f->count; i++)
        if (!used[i]) {
            plain(&ws[nw++], &f->tensors[i]);
            used[i] = 1;
        }
out:
    if (oom) {
        snprintf(err, errlen, "out of memory");
        goto bad;
    }
    if (rec)
        json_decref(rec);
    return (long)nw;
bad:
    if (rec)
        json_decref(rec);
    return -1;
}

static int weight_cmp(const void *a, const void *b)
{
    return qs_natural_cmp(((const struct weight *)a)->main->name,
                          ((const struct weight *)b)->main->name);
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

/* An error message that may quote names from the file: printed escaped. */
static void print_error(const char *msg)
{
    fputs("qsparse inspect: error: ", stderr);
    qs_escape_print(stderr, msg);
    fputc('\n', stderr);
}

/* *sum += v unless that overflows int64 (v >= 0); returns 1 on overflow. */
static int add_overflows(int64_t *sum, int64_t v)
{
    if (v > INT64_MAX - *sum)
        return 1;
    *sum += v;
    return 0;
}

int qs_cmd_inspect(int argc, char **argv)
{
    const char *path = NULL;
    int as_json = 0, rc = 1;
    struct qs_st_file f;
    struct weight *ws = NULL;
    char *used = NULL, err[512];
    long nw_or_err;
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
    qs_st_install_signal_cleanup(); /* a file truncated while mapped: a message, not SIGBUS */
    if (qs_st_open(&f, path, err, sizeof err) != 0) {
        print_error(err);
        return 1;
    }
    ws = qs_heap_calloc(f.count + 1, sizeof *ws);
    used = qs_heap_calloc(f.count + 1, 1);
    if (!ws || !used) {
        fprintf(stderr, "qsparse inspect: error: out of memory\n");
        goto done;
    }
    if ((nw_or_err = collect(&f, ws, used, err, sizeof err)) < 0) {
        print_error(err);
        goto done;
    }
    nw = (size_t)nw_or_err;
    qsort(ws, nw, sizeof *ws, weight_cmp); /* layer.2 before layer.10 */
    /* Byte counts are bounded by the file size; element counts come from shapes (up to 2^63
     * each), so their totals are added with a check. */
    for (size_t i = 0; i < nw; i++) {
        int q = strcmp(ws[i].format, "-") != 0;
        if (add_overflows(&params, ws[i].numel) || (q && add_overflows(&qparams, ws[i].numel))) {
            char *name = qs_escape_dup(ws[i].main->name);
            fprintf(stderr,
                    "qsparse inspect: error: the parameter count overflows int64 at tensor '%s' "
                    "(hostile shapes?)\n",
                    name ? name : "?");
            qs_heap_free(name);
            goto done;
        }
        tbytes += ws[i].bytes;
        if (q)
            qbytes += ws[i].bytes;
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
        /* ASCII only: names reach a terminal as \u escapes, never as control characters. */
        text = json_dumps(root, JSON_INDENT(1) | JSON_ENSURE_ASCII);
        json_decref(root);
        if (!text) {
            fprintf(stderr, "qsparse inspect: error: out of memory\n");
            goto done;
        }
        puts(text);
        qs_heap_free(text);
        rc = 0;
        goto done;
    }

    qs_escape_print(stdout, path);
    printf(": %zu tensors, %zu bytes (header %llu)\n", f.count, f.map_size,
           (unsigned long long)f.header_len);
    printf("%-56s %-8s %-16s %-12s %7s %12s\n", "name", "dtype", "shape", "format", "bits/w",
           "bytes");
    for (size_t i = 0; i < nw; i++) {
        /* dtype and format may come from metadata strings: escaped like the name */
        char shape[128], dtype[4 * sizeof ws[i].dtype], format[4 * sizeof ws[i].format];
        char *name = qs_escape_dup(ws[i].main->name);
        shape_str(&ws[i], shape, sizeof shape);
        printf("%-56s %-8s %-16s %-12s %7.3f %12llu\n", name ? name : "?",
               qs_escape_into(ws[i].dtype, dtype, sizeof dtype), shape,
               qs_escape_into(ws[i].format, format, sizeof format), bits_of(&ws[i]),
               (unsigned long long)ws[i].bytes);
        qs_heap_free(name);
    }
    printf("total: %lld parameters in %llu bytes (%.3f bits/weight)", (long long)params,
           (unsigned long long)tbytes, params ? 8.0 * (double)tbytes / (double)params : 0.0);
    if (qparams)
        printf("; quantized: %lld parameters, %.3f bits/weight", (long long)qparams,
               8.0 * (double)qbytes / (double)qparams);
    printf("\n");
    rc = 0;
done:
    qs_heap_free(ws);
    qs_heap_free(used);
    qs_st_close(&f);
    return rc;
}
