/* SPDX-License-Identifier: MIT */
/*
 * The tool where other people's folders meet the filesystem (tools/model_dir.h,
 * tools/folder_links.h, tools/side_file.h, tools/cmd_merge_index.c): each input builds a small
 * file tree in a scratch folder (regular files, folders, symbolic links, FIFOs, with names and
 * link targets from tables or from the input), then runs either the model-folder path of
 * `qsparse quantize` (read config.json and the index, check every shard's tensors against it,
 * copy the rest into a new output folder) or `qsparse merge-index OUT PART0 PART1` in process.
 *
 * Input: byte 0 a mode (bit 0: 0 model folder, 1 merge-index; bit 1: the parts in the other
 * order), then up to 16 entries: a kind byte (bits 0-1: file, folder, link, FIFO; bit 2: in the
 * second folder), a name byte (an index into `names`, or 0xFF then a length byte and that many
 * name bytes, '/' and NUL replaced), then for a file a u16 length and its bytes, for a link a
 * target byte (an index into `targets`, or 0xFF then a length byte and the target's bytes).
 *
 * Checked after every run, whatever it returned: nothing was created, removed or changed outside
 * the case's folder (the scratch folder holds exactly the secret file and the case); the case's
 * folder holds its input folders and the output only when the run succeeded (no temporary
 * folder left behind); the output holds regular files and folders only, none holding the bytes
 * of the secret file beside the case or of /proc/self/environ; an index in it names only plain
 * files that are in it; merge-index returned 0, 1 or 2; no run blocked on a FIFO (libFuzzer's
 * -timeout catches that) and nothing leaked (ASan).
 */
#define _GNU_SOURCE /* mkdtemp, dprintf, O_DIRECTORY */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sanitizer/common_interface_defs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "commands.h"
#include "heap.h"
#include "model_dir.h"
#include "safetensors.h"

#define MAX_ENTRIES 16
#define SECRET_LEN 32

static char root[PATH_MAX]; /* the scratch folder: secret.txt and case/ */
static char secret[SECRET_LEN + 1];
static char environ_head[64];
static size_t environ_len;
static int devnull = -1;

static const char *const names[] = {
    "config.json", "model.safetensors.index.json", "model.safetensors", "s0.safetensors",
    "s1.safetensors", "tokenizer.json", "generation_config.json", "sub", "sub/a.json", "sub/b",
    "qsparse-part.json", "hf_quant_config.json", "x.bin", ".hidden", "loop", "onnx"};
#define NNAMES (sizeof names / sizeof names[0])

static const char *const targets[] = {
    "../secret.txt", "../../secret.txt", "../../../secret.txt", "/proc/self/environ", "/etc",
    "/dev/zero", ".", "..", "sub", "sub/a.json", "config.json", "tokenizer.json", "nowhere",
    "@/secret.txt" /* '@' is the scratch folder */, "s0.safetensors", "../p1/s1.safetensors",
    "../p0/config.json", "../m/config.json"};
#define NTARGETS (sizeof targets / sizeof targets[0])

#define fail(...)                                                                                \
    do {                                                                                         \
        fprintf(stderr, "fuzz: " __VA_ARGS__);                                                   \
        fputc('\n', stderr);                                                                     \
        abort();                                                                                 \
    } while (0)
#define check(cond, ...)                                                                         \
    do {                                                                                         \
        if (!(cond))                                                                             \
            fail(__VA_ARGS__);                                                                   \
    } while (0)

typedef struct {
    const uint8_t *p;
    size_t n;
} reader;

static int u8(reader *r)
{
    if (r->n == 0)
        return -1;
    r->n--;
    return *r->p++;
}

/* rm -r without following links */
static void remove_tree(const char *path)
{
    struct stat sb;
    if (lstat(path, &sb) != 0)
        return;
    if (S_ISDIR(sb.st_mode)) {
        DIR *d = opendir(path);
        struct dirent *e;
        while (d && (e = readdir(d)) != NULL) {
            char sub[PATH_MAX];
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
            remove_tree(sub);
        }
        if (d)
            closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

static int contains(const char *buf, size_t n, const char *needle, size_t k);

static void write_file(const char *path, const void *data, size_t n)
{
    /* O_NONBLOCK: a FIFO the input made earlier under this name must not block the harness */
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    if (fd < 0)
        return; /* e.g. a name whose folder is a file: the tree simply lacks it */
    if (n && write(fd, data, n) != (ssize_t)n)
        fail("writing %s: %s", path, strerror(errno));
    close(fd);
}

static void remove_root(void)
{
    remove_tree(root);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *tmp = getenv("TMPDIR");
    unsigned char raw[SECRET_LEN / 2];
    (void)argc, (void)argv;
    qs_heap_hook_jansson(); /* as the tool's main: JSON values on the tool's heap */
    snprintf(root, sizeof root, "%s/qs-fuzz-side-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(root))
        fail("mkdtemp: %s", strerror(errno));
    atexit(remove_root);
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || read(fd, raw, sizeof raw) != (ssize_t)sizeof raw)
        fail("/dev/urandom");
    close(fd);
    for (size_t i = 0; i < sizeof raw; i++)
        snprintf(secret + 2 * i, 3, "%02x", raw[i]);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/secret.txt", root);
    write_file(path, secret, SECRET_LEN);
    /* the start of this process's environment, which a link to /proc/self/environ would copy */
    fd = open("/proc/self/environ", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t k = read(fd, environ_head, sizeof environ_head);
        environ_len = k >= 16 ? (size_t)k : 0;
        close(fd);
    }
    devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
    return 0;
}

/* Whether buf[0 ... n) contains needle[0 ... k). */
static int contains(const char *buf, size_t n, const char *needle, size_t k)
{
    for (size_t i = 0; k && i + k <= n; i++)
        if (memcmp(buf + i, needle, k) == 0)
            return 1;
    return 0;
}

/* The output: regular files and folders only, no secret bytes, an index naming its files. */
static void check_output(const char *dir, int top)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    check(d, "the output folder %s cannot be read", dir);
    while ((e = readdir(d)) != NULL) {
        char p[PATH_MAX];
        struct stat sb;
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        check(lstat(p, &sb) == 0, "%s vanished", p);
        check(S_ISREG(sb.st_mode) || S_ISDIR(sb.st_mode),
              "the output holds %s, which is neither a regular file nor a folder", p);
        if (S_ISDIR(sb.st_mode)) {
            check_output(p, 0);
            continue;
        }
        size_t n = (size_t)sb.st_size;
        char *buf = malloc(n + 1);
        int fd = open(p, O_RDONLY | O_CLOEXEC);
        check(buf && fd >= 0 && read(fd, buf, n) == (ssize_t)n, "reading %s", p);
        close(fd);
        check(!contains(buf, n, secret, SECRET_LEN),
              "the output file %s holds the secret file beside the model folder", p);
        check(!contains(buf, n, environ_head, environ_len),
              "the output file %s holds the process environment", p);
        if (top && strcmp(e->d_name, QS_INDEX_NAME) == 0) {
            buf[n] = '\0';
            json_t *j = json_loads(buf, 0, NULL), *map, *v;
            const char *k;
            check(j, "the output's index is not JSON");
            map = json_object_get(j, "weight_map");
            json_object_foreach(map, k, v)
            {
                char f[PATH_MAX];
                struct stat fs;
                check(json_is_string(v) && qs_plain_name(json_string_value(v)),
                      "the output's index names a file that is not a plain name");
                snprintf(f, sizeof f, "%s/%s", dir, json_string_value(v));
                check(lstat(f, &fs) == 0 && S_ISREG(fs.st_mode),
                      "the output's index names %s, which the output lacks", f);
            }
            json_decref(j);
        }
        free(buf);
    }
    closedir(d);
}

/* The scratch folder holds exactly secret.txt (unchanged) and case; case holds the input
 * folders and, when the run succeeded, out. */
/* The names in a folder before the run: the harness builds its entries by path, so an entry
 * named below a link it made (sub -> ..) lands beside the inputs; that is the harness's doing,
 * not the run's, and check_tree takes these names as known. */
#define SNAP_MAX 64
typedef struct {
    int n;
    char name[SNAP_MAX][256];
} snapshot;

static void snap(const char *dir, snapshot *s)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    s->n = 0;
    while (d && (e = readdir(d)) != NULL && s->n < SNAP_MAX)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            snprintf(s->name[s->n++], sizeof s->name[0], "%s", e->d_name);
    if (d)
        closedir(d);
}

static int in_snap(const snapshot *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->name[i], name) == 0)
            return 1;
    return 0;
}

static void check_tree(const char *cs, const char *const *inputs, int ninputs, int ok,
                       const snapshot *root_before, const snapshot *cs_before)
{
    DIR *d = opendir(root);
    struct dirent *e;
    int entries = 0;
    while (d && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (strcmp(e->d_name, "secret.txt") != 0 && strcmp(e->d_name, "case") != 0 &&
            in_snap(root_before, e->d_name))
            continue; /* made by the harness's build, through one of its links */
        check(strcmp(e->d_name, "secret.txt") == 0 || strcmp(e->d_name, "case") == 0,
              "the run created %s/%s, outside its folder", root, e->d_name);
        entries++;
    }
    closedir(d);
    check(entries == 2, "the run removed secret.txt or the case folder");
    char p[PATH_MAX], buf[SECRET_LEN + 8];
    snprintf(p, sizeof p, "%s/secret.txt", root);
    int fd = open(p, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    check(fd >= 0 && read(fd, buf, sizeof buf) == SECRET_LEN && memcmp(buf, secret, SECRET_LEN) == 0,
          "secret.txt changed");
    close(fd);
    int out = 0;
    d = opendir(cs);
    while (d && (e = readdir(d)) != NULL) {
        int known = strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0;
        for (int i = 0; i < ninputs; i++)
            known |= strcmp(e->d_name, inputs[i]) == 0;
        if (strcmp(e->d_name, "out") == 0)
            out = known = 1;
        else
            known |= in_snap(cs_before, e->d_name);
        check(known, "the run left %s/%s behind", cs, e->d_name);
    }
    closedir(d);
    if (in_snap(cs_before, "out")) /* the harness made out: the run must refuse to replace it */
        check(!ok, "the run replaced an existing output folder");
    else
        check(out == ok, "%s", ok ? "the run succeeded without an output folder"
                                  : "the run failed and left an output folder");
}

/* Build the entries of the input into the folders dirs[0], dirs[1]. */
static void build(reader *r, const char *const *dirs)
{
    for (int i = 0; i < MAX_ENTRIES; i++) {
        int kind = u8(r), sel = u8(r);
        char name[64], path[PATH_MAX];
        if (kind < 0 || sel < 0)
            return;
        if (sel == 0xFF) {
            int n = u8(r);
            size_t k = 0;
            for (int j = 0; j < (n < 0 ? 0 : n % 48); j++) {
                int ch = u8(r);
                name[k++] = ch <= 0 || ch == '/' ? '_' : (char)ch;
            }
            name[k] = '\0';
            if (k == 0 || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
                continue;
        } else {
            snprintf(name, sizeof name, "%s", names[sel % NNAMES]);
        }
        snprintf(path, sizeof path, "%s/%s", dirs[(kind >> 2) & 1], name);
        switch (kind & 3) {
        case 0: {
            int lo = u8(r), hi = u8(r);
            size_t n = (size_t)((lo < 0 ? 0 : lo) | (hi < 0 ? 0 : hi) << 8);
            if (n > r->n)
                n = r->n;
            /* libFuzzer learns the bytes the output checks compare against (it traces
             * memcmp): an input file holding the secret or the environment would be copied
             * legitimately, so the harness writes such a file empty */
            if (contains((const char *)r->p, n, secret, SECRET_LEN) ||
                contains((const char *)r->p, n, environ_head, environ_len))
                write_file(path, "", 0);
            else
                write_file(path, r->p, n);
            r->p += n;
            r->n -= n;
            break;
        }
        case 1:
            mkdir(path, 0755);
            break;
        case 2: {
            char target[PATH_MAX];
            int t = u8(r);
            if (t == 0xFF) {
                int n = u8(r);
                size_t k = 0;
                for (int j = 0; j < (n < 0 ? 0 : n); j++) {
                    int ch = u8(r);
                    target[k++] = ch <= 0 ? '_' : (char)ch;
                }
                target[k] = '\0';
            } else {
                const char *tt = targets[(t < 0 ? 0 : t) % NTARGETS];
                if (tt[0] == '@')
                    snprintf(target, sizeof target, "%s%s", root, tt + 1);
                else
                    snprintf(target, sizeof target, "%s", tt);
            }
            if (target[0])
                symlink(target, path);
            break;
        }
        default:
            mkfifo(path, 0644);
            break;
        }
    }
}

static int run_model_folder(const char *m, const char *out)
{
    struct qs_model_dir md;
    struct qs_model_out o;
    char err[1024];
    int rc = -1;

    if (qs_model_dir_open(&md, m, err, sizeof err) != 0)
        return -1;
    for (size_t i = 0; i < md.nshards; i++) {
        char p[PATH_MAX];
        struct qs_st_file f;
        int bad;
        snprintf(p, sizeof p, "%s/%s", m, md.shards[i]);
        if (qs_st_open(&f, p, err, sizeof err) != 0)
            goto done;
        bad = qs_model_dir_note_tensors(&md, i, &f, err, sizeof err);
        qs_st_close(&f);
        if (bad)
            goto done;
    }
    if (qs_model_dir_check_index(&md, err, sizeof err) != 0)
        goto done;
    if (qs_model_out_begin(&o, out, 0, err, sizeof err) != 0)
        goto done;
    if (qs_model_out_copy_rest(&md, &o, err, sizeof err) == 0 &&
        qs_model_out_json(&o, "config.json", md.config, err, sizeof err) == 0 &&
        qs_model_out_commit(&o, err, sizeof err) == 0)
        rc = 0;
    qs_model_out_abort(&o);
done:
    qs_model_dir_close(&md);
    return rc;
}

/* merge-index in process, its messages sent to /dev/null (the sanitizers' reports still reach
 * the real stderr). */
static int run_merge(const char *out, const char *a, const char *b)
{
    char *argv[] = {"merge-index", (char *)out, (char *)a, (char *)b, NULL};
    int saved_out, saved_err, rc;

    fflush(stdout);
    fflush(stderr);
    saved_out = dup(1);
    saved_err = dup(2);
    __sanitizer_set_report_fd((void *)(intptr_t)saved_err);
    dup2(devnull, 1);
    dup2(devnull, 2);
    rc = qs_cmd_merge_index(4, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(saved_out, 1);
    dup2(saved_err, 2);
    __sanitizer_set_report_fd((void *)(intptr_t)2);
    close(saved_out);
    close(saved_err);
    check(rc == 0 || rc == 1 || rc == 2, "merge-index returned %d", rc);
    return rc == 0 ? 0 : -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char cs[PATH_MAX], out[PATH_MAX], d0[PATH_MAX], d1[PATH_MAX];
    reader r = {data, size};
    int mode = u8(&r), merge = mode > 0 && (mode & 1);
    const char *inputs[2] = {merge ? "p0" : "m", "p1"};

    snprintf(cs, sizeof cs, "%s/case", root);
    remove_tree(cs);
    check(mkdir(cs, 0755) == 0, "mkdir %s: %s", cs, strerror(errno));
    snprintf(out, sizeof out, "%s/out", cs);
    snprintf(d0, sizeof d0, "%s/%s", cs, inputs[0]);
    snprintf(d1, sizeof d1, "%s/%s", cs, inputs[1]);
    mkdir(d0, 0755);
    if (merge)
        mkdir(d1, 0755);
    const char *dirs[2] = {d0, merge ? d1 : d0};
    build(&r, dirs);
    snapshot root_before, cs_before;
    snap(root, &root_before);
    snap(cs, &cs_before);

    int rc = merge ? run_merge(out, mode & 2 ? d1 : d0, mode & 2 ? d0 : d1)
                   : run_model_folder(d0, out);
    check_tree(cs, inputs, merge ? 2 : 1, rc == 0, &root_before, &cs_before);
    if (rc == 0)
        check_output(out, 1);
    remove_tree(cs);
    return 0;
}
