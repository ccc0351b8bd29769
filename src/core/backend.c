/* SPDX-License-Identifier: MIT */
/*
 * The backend registry: which backends a context may run on, and the loading of plugin backends
 * (backend.h). The CPU backend is always there, and AUTO is the CPU. A plugin is looked for once
 * per process, when CUDA is first asked for (a context, qs_backend_available, a qs_cuda_* call)
 * or when qs_backend_load asks explicitly: the file named
 * by QS_PLUGIN_PATH, else libqsparse-cuda.so beside the loaded library. Every failure (no file,
 * not loadable, no init symbol, another ABI version, incomplete operations) leaves the CPU
 * backend working and keeps a message naming the cause and the file.
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

#define PLUGIN_FILE "libqsparse-cuda.so"
/* Where a program that has the library linked into it finds the plugin, relative to the
 * program's directory: the build sets it for the Python package's tool, which lives in the
 * scripts folder while the package installs the plugin beside its libqsparse.so. */
#ifndef QS_PLUGIN_PROGRAM_DIR
#define QS_PLUGIN_PROGRAM_DIR ""
#endif
#define BACKEND_MAX QS_BACKEND_CUDA

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static const struct qs_backend_ops *plugin_ops[BACKEND_MAX + 1];
/* Why each plugin backend is not available; "" when it is or nothing was tried. Written under
 * the lock; qs_backend_message hands out a pointer, so a message is never shortened in place
 * while another thread may read it, only replaced by a complete new one. */
static char message[BACKEND_MAX + 1][2][512];
static int message_idx[BACKEND_MAX + 1];
/* The file each registered plugin came from, for messages. */
static char plugin_file[BACKEND_MAX + 1][4096];
static int default_tried;

static const char *const backend_names[] = {"auto", "cpu", "cuda"};

QS_API const char *qs_backend_name(int32_t backend)
{
    return backend >= 0 && backend <= BACKEND_MAX ? backend_names[backend] : NULL;
}

QS_API int32_t qs_backend_from_name(const char *name)
{
    if (!name)
        return -1;
    for (int32_t b = 0; b <= BACKEND_MAX; b++)
        if (strcmp(name, backend_names[b]) == 0)
            return b;
    return -1;
}

/* Replace the message of backend b (lock held). */
static void record(int32_t b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void record(int32_t b, const char *fmt, ...)
{
    va_list ap;
    int next = !message_idx[b];

    va_start(ap, fmt);
    vsnprintf(message[b][next], sizeof message[b][next], fmt, ap);
    va_end(ap);
    message_idx[b] = next;
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
 * message recorded (lock held). */
static int absolute_path(const char *given, char *out, size_t cap)
{
    char cwd[4096];
    int n;

    if (given[0] == '/') {
        n = snprintf(out, cap, "%s", given);
    } else if (!getcwd(cwd, sizeof cwd)) {
        record(QS_BACKEND_CUDA, "backend plugin %s: relative path, and the current directory "
               "is unknown", given);
        return -1;
    } else {
        n = snprintf(out, cap, "%s%s%s", cwd, strcmp(cwd, "/") ? "/" : "", given);
    }
    if (n < 0 || (size_t)n >= cap) {
        record(QS_BACKEND_CUDA, "backend plugin %.256s...: the path is too long", given);
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

/* The default plugin's absolute path in out: libqsparse-cuda.so in the directory of the shared
 * library holding this code, or, when the code is linked into the program, in the program's
 * directory (joined with QS_PLUGIN_PROGRAM_DIR). 0, or -1 with the message recorded (lock
 * held). */
static int default_path(char *out, size_t cap)
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
            record(QS_BACKEND_CUDA, "backend plugin %s: the program's own path is unknown "
                   "(/proc/self/exe), set QS_PLUGIN_PATH", PLUGIN_FILE);
            return -1;
        }
        own[len] = '\0';
    } else if (!dladdr((void *)qs_backend_name, &info) || !info.dli_fname) {
        record(QS_BACKEND_CUDA, "backend plugin %s: the library's own path is unknown (dladdr), "
               "set QS_PLUGIN_PATH", PLUGIN_FILE);
        return -1;
    } else if (info.dli_fname[0] != '/') {
        /* loaded through a relative name (a relative LD_LIBRARY_PATH entry): relative to a
         * directory that may have changed since */
        record(QS_BACKEND_CUDA, "backend plugin %s: the library was loaded as %.256s, not by "
               "an absolute path, set QS_PLUGIN_PATH", PLUGIN_FILE, info.dli_fname);
        return -1;
    } else {
        n = snprintf(own, sizeof own, "%s", info.dli_fname);
        if (n < 0 || (size_t)n >= sizeof own) {
            record(QS_BACKEND_CUDA, "backend plugin %s: the library's path is too long",
                   PLUGIN_FILE);
            return -1;
        }
        sub = "";
    }
    *strrchr(own, '/') = '\0'; /* own starts with '/' */
    n = snprintf(out, cap, "%s%s%s/%s", own, *sub ? "/" : "", sub, PLUGIN_FILE);
    if (n < 0 || (size_t)n >= cap) {
        record(QS_BACKEND_CUDA, "backend plugin %s: the path beside the library is too long",
               PLUGIN_FILE);
        return -1;
    }
    return 0;
}

/* Load one plugin file and register its operations (lock held). */
static qs_status load_locked(const char *given)
{
    char path[4096];
    struct stat sb;
    void *handle;
    void *sym;
    qs_backend_init_fn *init;
    const struct qs_backend_ops *ops;
    const char *problem;

    if (absolute_path(given, path, sizeof path) != 0)
        return QS_ERR_BACKEND;
    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        record(QS_BACKEND_CUDA, "backend plugin %s: no such file", path);
        return QS_ERR_BACKEND;
    }
    if ((problem = elf_problem(path, sb.st_size)) != NULL) {
        record(QS_BACKEND_CUDA, "backend plugin %s: cannot be loaded: %s", path, problem);
        return QS_ERR_BACKEND;
    }
    handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char *e = dlerror();
        record(QS_BACKEND_CUDA, "backend plugin %s: cannot be loaded: %s", path, e ? e : "?");
        return QS_ERR_BACKEND;
    }
    sym = dlsym(handle, QS_BACKEND_INIT_SYMBOL);
    if (!sym) {
        record(QS_BACKEND_CUDA, "backend plugin %s: does not export %s", path,
               QS_BACKEND_INIT_SYMBOL);
        dlclose(handle);
        return QS_ERR_BACKEND;
    }
    /* POSIX: a dlsym result converts to the function pointer it names. */
    memcpy(&init, &sym, sizeof init);
    ops = init(QS_BACKEND_ABI_VERSION);
    if (!ops) {
        record(QS_BACKEND_CUDA, "backend plugin %s: refused backend ABI version %d", path,
               QS_BACKEND_ABI_VERSION);
        dlclose(handle);
        return QS_ERR_BACKEND;
    }
    if (ops->abi_version != QS_BACKEND_ABI_VERSION) {
        record(QS_BACKEND_CUDA,
               "backend plugin %s: built for backend ABI version %d, this library has %d", path,
               ops->abi_version, QS_BACKEND_ABI_VERSION);
        dlclose(handle);
        return QS_ERR_BACKEND;
    }
    if (ops->backend <= QS_BACKEND_CPU || ops->backend > BACKEND_MAX || !ops->name ||
        !ops->available || !ops->quantize || !ops->dequantize) {
        record(QS_BACKEND_CUDA, "backend plugin %s: backend %d or its operations are incomplete",
               path, ops->backend);
        dlclose(handle);
        return QS_ERR_BACKEND;
    }
    /* Registered for the life of the process: contexts keep pointers into the module. */
    plugin_ops[ops->backend] = ops;
    snprintf(plugin_file[ops->backend], sizeof plugin_file[ops->backend], "%s", path);
    record(ops->backend, "%s", "");
    return QS_OK;
}

/* The default search, once per process (lock held). */
static void load_default_locked(void)
{
    const char *env = getenv("QS_PLUGIN_PATH");
    char path[4096];

    if (default_tried)
        return;
    default_tried = 1;
    if (env && *env) {
        load_locked(env);
        return;
    }
    if (default_path(path, sizeof path) == 0)
        load_locked(path);
}

QS_API qs_status qs_backend_load(const char *path)
{
    qs_status st;

    pthread_mutex_lock(&lock);
    if (path) {
        default_tried = 1; /* an explicit plugin replaces the default search */
        st = load_locked(path);
    } else {
        default_tried = 0;
        load_default_locked();
        st = plugin_ops[QS_BACKEND_CUDA] ? QS_OK : QS_ERR_BACKEND;
    }
    pthread_mutex_unlock(&lock);
    return st;
}

/* The operations of plugin backend b if it is registered and can run (lock held). */
static const struct qs_backend_ops *usable_locked(int32_t b)
{
    char why[256] = "";

    load_default_locked();
    if (!plugin_ops[b])
        return NULL;
    if (!plugin_ops[b]->available(why, sizeof why)) {
        record(b, "backend plugin %s: %s backend not available: %s", plugin_file[b],
               plugin_ops[b]->name, why);
        return NULL;
    }
    return plugin_ops[b];
}

const struct qs_backend_ops *qs_backend_select(int32_t backend)
{
    const struct qs_backend_ops *ops = NULL;

    /* AUTO is the CPU for host arrays: a GPU is used for device pointers (qs_cuda_*, which ask
     * for CUDA themselves) or when a context asks for CUDA; never behind a caller's back. */
    if (backend == QS_BACKEND_CPU || backend == QS_BACKEND_AUTO)
        return qs_backend_cpu();
    pthread_mutex_lock(&lock);
    if (backend > QS_BACKEND_CPU && backend <= BACKEND_MAX)
        ops = usable_locked(backend);
    pthread_mutex_unlock(&lock);
    return ops;
}

QS_API int32_t qs_backend_available(int32_t backend)
{
    if (backend < QS_BACKEND_AUTO || backend > BACKEND_MAX)
        return 0;
    return qs_backend_select(backend) != NULL;
}

QS_API const char *qs_backend_message(int32_t backend)
{
    const char *m;

    if (backend <= QS_BACKEND_CPU || backend > BACKEND_MAX)
        return "";
    pthread_mutex_lock(&lock);
    m = message[backend][message_idx[backend]];
    pthread_mutex_unlock(&lock);
    return m;
}
