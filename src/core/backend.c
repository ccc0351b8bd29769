/* SPDX-License-Identifier: MIT */
/*
 * The backend registry: which backends a context may run on, and the loading of plugin backends
 * (backend.h, include/qsparse/plugin.h). One entry per backend, keyed by name: the built-in ones
 * of `builtin` (AUTO and the CPU, always there; plugin backends with the file their plugin is
 * looked for under), then backends of other names in the order their plugins are loaded. A
 * built-in plugin backend's file is looked for once per process, when that backend is first
 * asked for (a context, qs_backend_available, a qs_cuda_* call) or when qs_backend_load asks
 * explicitly: the file named by QS_PLUGIN_PATH, else the backend's file beside the loaded
 * library. Every failure (no file, not loadable, no init symbol, another ABI version, a bad name,
 * no room) leaves the CPU backend working and keeps a message naming the cause and the file.
 *
 * Every path is made absolute before anything looks at it, and that one path is checked and
 * loaded: dlopen searches the library path for a name without a slash, so a relative name would
 * be checked in one place and loaded from another. The current directory is never searched: the
 * directory of a library linked into the program itself is the program's own, read from
 * /proc/self/exe (dladdr would give argv[0], which is the name as typed, or whatever the
 * starting process chose).
 */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <elf.h>
#include <link.h> /* ElfW */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h> /* getcwd, readlink */

#include "backend.h"

/* Where a program that has the library linked into it finds a plugin, relative to the program's
 * directory: the build sets it for the Python package's tool, which lives in the scripts folder
 * while the package installs the plugin beside its libqsparse.so. */
#ifndef QS_PLUGIN_PROGRAM_DIR
#define QS_PLUGIN_PROGRAM_DIR ""
#endif

/* The built-in backends, by code (include/qsparse.h QS_BACKEND_*): a plugin backend names the
 * file its plugin is looked for under beside the library. A ROCm or Metal backend is one more
 * line here (and its QS_BACKEND_* code). */
static const struct {
    const char *name;
    const char *file;
} builtin[] = {
    [QS_BACKEND_AUTO] = {"auto", NULL},
    [QS_BACKEND_CPU] = {"cpu", NULL},
    [QS_BACKEND_CUDA] = {"cuda", "libqsparse-cuda.so"},
};
#define BUILTIN_COUNT ((int32_t)(sizeof builtin / sizeof builtin[0]))
/* Entries in all: the built-in ones and backends of other names, which plugins bring. */
#define ENTRY_MAX 16
#define NAME_MAX_LEN 31

struct entry {
    char name[NAME_MAX_LEN + 1];  /* "" for a free entry */
    const qs_backend_ops *ops;    /* the registered plugin's, NULL if none */
    char file[4096];              /* the file it came from, for messages */
    /* Why the backend is not available; "" when it is or nothing was tried. Written under the
     * lock; qs_backend_message hands out a pointer, so a message is never shortened in place
     * while another thread may read it, only replaced by a complete new one. */
    char message[2][512];
    int message_idx;
    int default_tried; /* built-in plugin backends: the search beside the library ran */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct entry entries[ENTRY_MAX];
static int32_t entry_count = BUILTIN_COUNT; /* entries in use; built-in names are not copied */
static int env_tried;                       /* QS_PLUGIN_PATH was loaded */

/* The name of entry b (lock held, or b built in). */
static const char *entry_name(int32_t b)
{
    return b < BUILTIN_COUNT ? builtin[b].name : entries[b].name;
}

QS_API const char *qs_backend_name(int32_t backend)
{
    const char *name = NULL;

    if (backend >= 0 && backend < BUILTIN_COUNT)
        return builtin[backend].name;
    pthread_mutex_lock(&lock);
    if (backend >= BUILTIN_COUNT && backend < entry_count)
        name = entries[backend].name; /* never changes once set */
    pthread_mutex_unlock(&lock);
    return name;
}

/* The code of `name` (lock held), or -1. */
static int32_t find_locked(const char *name)
{
    for (int32_t b = 0; b < entry_count; b++)
        if (strcmp(name, entry_name(b)) == 0)
            return b;
    return -1;
}

QS_API int32_t qs_backend_from_name(const char *name)
{
    int32_t b;

    if (!name)
        return -1;
    pthread_mutex_lock(&lock);
    b = find_locked(name);
    pthread_mutex_unlock(&lock);
    return b;
}

/* Replace the message of backend b (lock held). QS_BACKEND_AUTO stands for a file whose backend
 * is not known (it failed before naming one): every built-in plugin backend gets the message,
 * since the file may have been meant for any of them. */
static void record(int32_t b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void record(int32_t b, const char *fmt, ...)
{
    char text[sizeof entries[0].message[0]];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    for (int32_t e = 0; e < entry_count; e++)
        if (b == QS_BACKEND_AUTO ? e < BUILTIN_COUNT && builtin[e].file != NULL : e == b) {
            int next = !entries[e].message_idx;
            memcpy(entries[e].message[next], text, sizeof text);
            entries[e].message_idx = next;
        }
}

/* A name a plugin may register: 1..NAME_MAX_LEN of [a-z0-9_-]. */
static int name_valid(const char *name)
{
    size_t len = strnlen(name, NAME_MAX_LEN + 1);

    if (len == 0 || len > NAME_MAX_LEN)
        return 0;
    for (size_t i = 0; i < len; i++)
        if (!((name[i] >= 'a' && name[i] <= 'z') || (name[i] >= '0' && name[i] <= '9') ||
              name[i] == '_' || name[i] == '-'))
            return 0;
    return 1;
}

/* Register the operations of the plugin in `path` (lock held); target as for load_locked. */
static qs_status register_locked(const char *path, const qs_backend_ops *ops, int32_t target)
{
    int32_t b;

    if (!ops->name || !name_valid(ops->name)) {
        record(target, "backend plugin %s: its backend name is missing or not 1 to %d "
               "characters of a-z, 0-9, _ and -", path, NAME_MAX_LEN);
        return QS_ERR_BACKEND;
    }
    b = find_locked(ops->name);
    if (b == QS_BACKEND_AUTO || b == QS_BACKEND_CPU) {
        record(target, "backend plugin %s: the backend name \"%s\" is the library's own", path,
               ops->name);
        return QS_ERR_BACKEND;
    }
    if (!ops->available) {
        record(b >= 0 ? b : target, "backend plugin %s: %s backend lacks its available() "
               "function", path, ops->name);
        return QS_ERR_BACKEND;
    }
    if (b < 0) {
        if (entry_count == ENTRY_MAX) {
            record(target, "backend plugin %s: no room for the %s backend (%d backends "
                   "registered)", path, ops->name, ENTRY_MAX);
            return QS_ERR_BACKEND;
        }
        b = entry_count;
        snprintf(entries[b].name, sizeof entries[b].name, "%s", ops->name);
        entry_count++; /* after the name: readers of entry_count see it whole */
    }
    /* Registered for the life of the process: contexts keep pointers into the module. A
     * built-in backend's search beside the library is then not needed (qs_backend_load(NULL)
     * repeats it). */
    entries[b].ops = ops;
    entries[b].default_tried = 1;
    snprintf(entries[b].file, sizeof entries[b].file, "%s", path);
    record(b, "%s", "");
    return QS_OK;
}

/* A truncated or damaged shared object can crash dlopen itself: glibc maps the segments that the
 * program headers name, and touching a page beyond the end of the file raises SIGBUS. So the
 * file's ELF header, program headers and section header table are checked against its size
 * first. Returns NULL when they fit, else what is wrong. */
static const char *elf_problem(const char *path, off_t size)
{
    ElfW(Ehdr) eh;
    ElfW(Phdr) ph;
    FILE *f = fopen(path, "rb");
    const char *why = NULL;

    if (!f)
        return "cannot be opened";
    if (fread(&eh, sizeof eh, 1, f) != 1 || memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) {
        why = "not an ELF file";
    } else if (eh.e_ident[EI_CLASS] != (sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32) ||
               eh.e_type != ET_DYN || eh.e_phentsize != sizeof ph) {
        why = "not a shared object of this architecture's ELF class";
    } else if ((uint64_t)eh.e_phoff + (uint64_t)eh.e_phnum * sizeof ph > (uint64_t)size ||
               (uint64_t)eh.e_shoff + (uint64_t)eh.e_shnum * eh.e_shentsize > (uint64_t)size) {
        why = "truncated (its headers point past the end of the file)";
    } else {
        for (int i = 0; i < eh.e_phnum && !why; i++) {
            if (fseeko(f, (off_t)(eh.e_phoff + (uint64_t)i * sizeof ph), SEEK_SET) != 0 ||
                fread(&ph, sizeof ph, 1, f) != 1)
                why = "unreadable program headers";
            else if (ph.p_type == PT_LOAD && (uint64_t)ph.p_offset + ph.p_filesz > (uint64_t)size)
                why = "truncated (a segment extends past the end of the file)";
        }
    }
    fclose(f);
    return why;
}

/* `given` as an absolute path in out: itself when it starts with '/', else joined to the
 * current directory, once, so that the file checked is the file dlopen loads. 0, or -1 with the
 * message recorded for backend `target` (lock held). */
static int absolute_path(const char *given, char *out, size_t cap, int32_t target)
{
    char cwd[4096];
    int n;

    if (given[0] == '/') {
        n = snprintf(out, cap, "%s", given);
    } else if (!getcwd(cwd, sizeof cwd)) {
        record(target, "backend plugin %s: relative path, and the current directory is unknown",
               given);
        return -1;
    } else {
        n = snprintf(out, cap, "%s%s%s", cwd, strcmp(cwd, "/") ? "/" : "", given);
    }
    if (n < 0 || (size_t)n >= cap) {
        record(target, "backend plugin %.256s...: the path is too long", given);
        return -1;
    }
    return 0;
}

/* Whether an address lies in a loaded segment of the program itself, which dl_iterate_phdr
 * lists first (glibc, musl and the BSDs alike). */
struct in_program {
    uintptr_t addr;
    int found;
};

static int in_program_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    struct in_program *q = data;
    (void)size;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD && q->addr - (info->dlpi_addr + ph->p_vaddr) < ph->p_memsz)
            q->found = 1;
    }
    return 1; /* only the first object, the program */
}

/* Backend b's plugin file's absolute path in out: `file` in the directory of the shared library
 * holding this code, or, when the code is linked into the program, in the program's directory
 * (joined with QS_PLUGIN_PROGRAM_DIR). 0, or -1 with the message recorded (lock held). */
static int default_path(const char *file, int32_t b, char *out, size_t cap)
{
    struct in_program q = {(uintptr_t)(void *)qs_backend_name, 0};
    char own[4096];
    const char *sub = QS_PLUGIN_PROGRAM_DIR;
    Dl_info info;
    int n;

    dl_iterate_phdr(in_program_cb, &q);
    if (q.found) {
        ssize_t len = readlink("/proc/self/exe", own, sizeof own - 1);
        if (len <= 0 || (size_t)len >= sizeof own - 1 || own[0] != '/') {
            record(b, "backend plugin %s: the program's own path is unknown (/proc/self/exe), "
                   "set QS_PLUGIN_PATH", file);
            return -1;
        }
        own[len] = '\0';
    } else if (!dladdr((void *)qs_backend_name, &info) || !info.dli_fname) {
        record(b, "backend plugin %s: the library's own path is unknown (dladdr), "
               "set QS_PLUGIN_PATH", file);
        return -1;
    } else if (info.dli_fname[0] != '/') {
        /* loaded through a relative name (a relative LD_LIBRARY_PATH entry): relative to a
         * directory that may have changed since */
        record(b, "backend plugin %s: the library was loaded as %.256s, not by an absolute "
               "path, set QS_PLUGIN_PATH", file, info.dli_fname);
        return -1;
    } else {
        n = snprintf(own, sizeof own, "%s", info.dli_fname);
        if (n < 0 || (size_t)n >= sizeof own) {
            record(b, "backend plugin %s: the library's path is too long", file);
            return -1;
        }
        sub = "";
    }
    *strrchr(own, '/') = '\0'; /* own starts with '/' */
    n = snprintf(out, cap, "%s%s%s/%s", own, *sub ? "/" : "", sub, file);
    if (n < 0 || (size_t)n >= cap) {
        record(b, "backend plugin %s: the path beside the library is too long", file);
        return -1;
    }
    return 0;
}

/* Load one plugin file and register its operations (lock held). target: the backend the file
 * was looked for, whose message a failure replaces; QS_BACKEND_AUTO for a file given by path. */
static qs_status load_locked(const char *given, int32_t target)
{
    char path[4096];
    struct stat sb;
    void *handle;
    void *sym;
    qs_backend_init_fn *init;
    const struct qs_backend_ops *ops;
    const char *problem;

    if (absolute_path(given, path, sizeof path, target) != 0)
        return QS_ERR_BACKEND;
    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        record(target, "backend plugin %s: no such file", path);
        return QS_ERR_BACKEND;
    }
    if ((problem = elf_problem(path, sb.st_size)) != NULL) {
        record(target, "backend plugin %s: cannot be loaded: %s", path, problem);
        return QS_ERR_BACKEND;
    }
    handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char *e = dlerror();
        record(target, "backend plugin %s: cannot be loaded: %s", path, e ? e : "?");
        return QS_ERR_BACKEND;
    }
    sym = dlsym(handle, QS_BACKEND_INIT_SYMBOL);
    if (!sym) {
        record(target, "backend plugin %s: does not export %s", path,
               QS_BACKEND_INIT_SYMBOL);
        dlclose(handle);
        return QS_ERR_BACKEND;
    }
    /* POSIX: a dlsym result converts to the function pointer it names. */
    memcpy(&init, &sym, sizeof init);
    ops = init(QS_BACKEND_ABI_VERSION, qs_backend_host_services());
    if (!ops) {
        record(target, "backend plugin %s: refused backend ABI version %d", path,
               QS_BACKEND_ABI_VERSION);
        dlclose(handle);
        return QS_ERR_BACKEND;
    }
    /* abi_version is the first field in every version; nothing else is read from another one */
    if (ops->abi_version != QS_BACKEND_ABI_VERSION) {
        record(target,
               "backend plugin %s: built for backend ABI version %d, this library has %d", path,
               ops->abi_version, QS_BACKEND_ABI_VERSION);
        dlclose(handle);
        return QS_ERR_BACKEND;
    }
    if (register_locked(path, ops, target) != QS_OK) {
        dlclose(handle);
        return QS_ERR_BACKEND;
    }
    return QS_OK;
}

/* Mark every default search done (1) or to be run again (0) (lock held). */
static void set_default_tried(int tried)
{
    env_tried = tried;
    for (int32_t b = 0; b < BUILTIN_COUNT; b++)
        entries[b].default_tried = tried;
}

/* The default search for built-in plugin backend b, once per process (lock held): the file
 * QS_PLUGIN_PATH names (one search for every backend), else b's file beside the library. */
static void load_default_locked(int32_t b)
{
    const char *env = getenv("QS_PLUGIN_PATH");
    const char *file = builtin[b].file;
    char path[4096];

    if (env && *env) {
        if (!env_tried) {
            set_default_tried(1); /* the file replaces every backend's search */
            load_locked(env, QS_BACKEND_AUTO);
        }
        return;
    }
    if (entries[b].default_tried)
        return;
    entries[b].default_tried = 1;
    if (default_path(file, b, path, sizeof path) == 0)
        load_locked(path, b);
}

QS_API qs_status qs_backend_load(const char *path)
{
    qs_status st = QS_ERR_BACKEND;

    pthread_mutex_lock(&lock);
    if (path) {
        st = load_locked(path, QS_BACKEND_AUTO);
    } else {
        set_default_tried(0);
        for (int32_t b = 0; b < BUILTIN_COUNT; b++)
            if (builtin[b].file)
                load_default_locked(b);
        for (int32_t b = 0; b < entry_count; b++)
            if (entries[b].ops)
                st = QS_OK;
    }
    pthread_mutex_unlock(&lock);
    return st;
}

/* The operations of plugin backend b if it is registered and can run (lock held). */
static const qs_backend_ops *usable_locked(int32_t b)
{
    char why[256] = "";

    if (b < BUILTIN_COUNT)
        load_default_locked(b);
    if (!entries[b].ops)
        return NULL;
    if (!entries[b].ops->available(why, sizeof why)) {
        record(b, "backend plugin %s: %s backend not available: %s", entries[b].file,
               entries[b].ops->name, why);
        return NULL;
    }
    return entries[b].ops;
}

const qs_backend_ops *qs_backend_select(int32_t backend)
{
    const qs_backend_ops *ops = NULL;

    /* AUTO is the CPU for host arrays: a GPU is used for device pointers (qs_cuda_*, which ask
     * for CUDA themselves) or when a context asks for a plugin backend; never behind a caller's
     * back. */
    if (backend == QS_BACKEND_CPU || backend == QS_BACKEND_AUTO)
        return qs_backend_cpu();
    pthread_mutex_lock(&lock);
    if (backend > QS_BACKEND_CPU && backend < entry_count)
        ops = usable_locked(backend);
    pthread_mutex_unlock(&lock);
    return ops;
}

QS_API int32_t qs_backend_available(int32_t backend)
{
    return backend >= QS_BACKEND_AUTO && backend < ENTRY_MAX && qs_backend_select(backend) != NULL;
}

QS_API const char *qs_backend_message(int32_t backend)
{
    const char *m = "";

    if (backend <= QS_BACKEND_CPU || backend >= ENTRY_MAX)
        return m;
    pthread_mutex_lock(&lock);
    if (backend < entry_count)
        m = entries[backend].message[entries[backend].message_idx];
    pthread_mutex_unlock(&lock);
    return m;
}
