/* The power-cut shim of episodata's tests: an LD_PRELOAD library that records what is
 * durable (see powercut.py for the model and how the image is rebuilt from the records).
 *
 * Every successful fsync / fdatasync / sync_file_range(WAIT_AFTER) / msync(MS_SYNC) of a
 * file under $POWERCUT_ROOT copies the file's bytes into a record in $POWERCUT_SHADOW;
 * the same calls on a directory record its listing, name -> (type, identity); syncfs of
 * the root's file system and sync() record the whole tree. A record is written under a
 * temporary name and renamed when complete, so a SIGKILL never leaves half a record, and
 * records are numbered in the order their snapshots were taken: one lock (a mutex for the
 * threads, flock for the processes) covers numbering and copying. The real sync runs
 * first: a sync that fails is no sync point. With POWERCUT_NAMESPACE=journaled, every sync
 * also records the listing of every folder under the root (a metadata journal commits
 * all namespace changes made before it).
 *
 * Record format (one file "<seq>.rec", fields NUL-terminated):
 *   F dev ino btime path, then the file's bytes;
 *   D dev ino btime path, then per entry: type('d','f','l') dev ino btime name target.
 * An identity is dev ("major:minor"), inode and birth time ("sec.nsec", or "0" where the
 * file system has none), so that a reused inode number is a different file.
 *
 * Built by powercut.py with `cc -shared -fPIC`; it uses only the C library. The harness
 * also calls powercut_snapshot() through ctypes to record the tree before the run.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <unistd.h>

static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_sync_file_range)(int, off_t, off_t, unsigned int);
static int (*real_msync)(void *, size_t, int);
static int (*real_syncfs)(int);
static void (*real_sync)(void);

static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
static char root[PATH_MAX];
static size_t root_len;
static char shadow[PATH_MAX];
static int enabled;
static int journaled; /* every sync makes the whole namespace durable */
static int lock_fd = -1; /* the lock file; it also holds the record counter */
static char buffer[1 << 20];

/* The journaled mode records every folder at every sync; most listings did not change.
 * This remembers the last listing this process recorded per folder (hashes), and is
 * forgotten whenever another process wrote a record since (see lock()). */
#define LISTINGS 4096
static struct {
    uint64_t folder, listing;
} listings[LISTINGS];
static unsigned long long last_seq; /* the last record this process wrote */

static void after_fork_in_child(void) {
    /* the child shares the parent's open lock file, so flock would not exclude them */
    pthread_mutex_init(&mutex, NULL);
    lock_fd = -1;
}

static void init(void) {
    real_fsync = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    real_fdatasync = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    real_sync_file_range =
        (int (*)(int, off_t, off_t, unsigned int))dlsym(RTLD_NEXT, "sync_file_range");
    real_msync = (int (*)(void *, size_t, int))dlsym(RTLD_NEXT, "msync");
    real_syncfs = (int (*)(int))dlsym(RTLD_NEXT, "syncfs");
    real_sync = (void (*)(void))dlsym(RTLD_NEXT, "sync");
    const char *r = getenv("POWERCUT_ROOT"), *s = getenv("POWERCUT_SHADOW");
    if (r && s && *r && *s && strlen(r) < PATH_MAX && strlen(s) < PATH_MAX - 64) {
        strcpy(root, r);
        strcpy(shadow, s);
        root_len = strlen(root);
        enabled = 1;
        const char *namespace = getenv("POWERCUT_NAMESPACE");
        journaled = namespace && strcmp(namespace, "journaled") == 0;
    }
    pthread_atfork(NULL, NULL, after_fork_in_child);
}

/* A recording that fails would silently drop a sync point: say so where the harness looks. */
static void fail(const char *what, const char *path) {
    char name[PATH_MAX + 16], text[2 * PATH_MAX];
    int n = snprintf(text, sizeof text, "powercut: %s %s: %s\n", what, path, strerror(errno));
    snprintf(name, sizeof name, "%s/ERROR", shadow);
    int fd = open(name, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
        if (write(fd, text, (size_t)n) < 0) { /* nothing more to do */ }
        close(fd);
    }
    if (write(2, text, (size_t)n) < 0) { /* idem */ }
}

static int under_root(const char *path) {
    return strncmp(path, root, root_len) == 0 && (path[root_len] == '/' || path[root_len] == 0);
}

/* The path of an open fd, without the " (deleted)" of an unlinked file; 0 when unknown. */
static int fd_path(int fd, char *out) {
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, out, PATH_MAX - 1);
    if (n < 0) return 0;
    out[n] = 0;
    const char *tail = " (deleted)";
    size_t t = strlen(tail);
    if ((size_t)n > t && strcmp(out + n - t, tail) == 0) out[n - t] = 0;
    return 1;
}

static void identity(const struct statx *st, char *out, size_t size) {
    if (st->stx_mask & STATX_BTIME)
        snprintf(out, size, "%u:%u%c%llu%c%lld.%09u", st->stx_dev_major, st->stx_dev_minor, 0,
                 (unsigned long long)st->stx_ino, 0, (long long)st->stx_btime.tv_sec,
                 st->stx_btime.tv_nsec);
    else
        snprintf(out, size, "%u:%u%c%llu%c0", st->stx_dev_major, st->stx_dev_minor, 0,
                 (unsigned long long)st->stx_ino, 0);
}

/* The three NUL-terminated identity fields, as identity() lays them out. */
static size_t identity_len(const char *id) {
    size_t a = strlen(id) + 1, b = strlen(id + a) + 1;
    return a + b + strlen(id + a + b) + 1;
}

static int write_all(int fd, const void *data, size_t size) {
    const char *p = data;
    while (size) {
        ssize_t n = write(fd, p, size);
        if (n < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += n;
        size -= (size_t)n;
    }
    return 0;
}

static void lock(void) {
    pthread_mutex_lock(&mutex);
    if (lock_fd < 0) {
        char name[PATH_MAX + 16];
        snprintf(name, sizeof name, "%s/.lock", shadow);
        lock_fd = open(name, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    }
    if (lock_fd >= 0) flock(lock_fd, LOCK_EX);
    unsigned long long seq = 0;
    if (lock_fd >= 0 && pread(lock_fd, &seq, sizeof seq, 0) == sizeof seq && seq != last_seq)
        memset(listings, 0, sizeof listings); /* another process recorded since */
}

static void unlock(void) {
    if (lock_fd >= 0) flock(lock_fd, LOCK_UN);
    pthread_mutex_unlock(&mutex);
}

/* Open the next record (under the lock): its fd, with `temporary` and `final` named. */
static int begin(char *temporary, char *final) {
    unsigned long long seq = 0;
    if (lock_fd < 0 || pread(lock_fd, &seq, sizeof seq, 0) < 0) return -1;
    seq += 1;
    if (pwrite(lock_fd, &seq, sizeof seq, 0) != sizeof seq) return -1;
    last_seq = seq;
    snprintf(temporary, PATH_MAX + 32, "%s/%016llu.tmp", shadow, seq);
    snprintf(final, PATH_MAX + 32, "%s/%016llu.rec", shadow, seq);
    return open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
}

static int finish(int out, const char *temporary, const char *final, int ok) {
    if (close(out) < 0) ok = 0;
    if (ok && rename(temporary, final) == 0) return 0;
    unlink(temporary);
    return -1;
}

static int header(int out, char kind, const struct statx *st, const char *path) {
    char id[128];
    identity(st, id, sizeof id);
    char k[2] = {kind, 0};
    return write_all(out, k, 2) || write_all(out, id, identity_len(id)) ||
           write_all(out, path, strlen(path) + 1);
}

/* Record the bytes of the regular file open (readable) as `fd`. */
static int record_file(int fd, const char *path) {
    struct statx st;
    char temporary[PATH_MAX + 32], final[PATH_MAX + 32];
    if (statx(fd, "", AT_EMPTY_PATH, STATX_INO | STATX_BTIME, &st) < 0) return -1;
    int out = begin(temporary, final);
    if (out < 0) return -1;
    int ok = header(out, 'F', &st, path) == 0;
    off_t offset = 0;
    while (ok) {
        ssize_t n = pread(fd, buffer, sizeof buffer, offset);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) ok = 0;
        if (n <= 0) break;
        ok = write_all(out, buffer, (size_t)n) == 0;
        offset += n;
    }
    return finish(out, temporary, final, ok);
}

/* A growing byte buffer, for a listing built before it is written. */
struct buf {
    char *data;
    size_t len, cap;
};

static int append(struct buf *b, const void *data, size_t size) {
    if (b->len + size > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + size) cap *= 2;
        char *grown = realloc(b->data, cap);
        if (grown == NULL) return -1;
        b->data = grown;
        b->cap = cap;
    }
    memcpy(b->data + b->len, data, size);
    b->len += size;
    return 0;
}

static uint64_t fnv(const char *data, size_t size) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < size; i++) h = (h ^ (unsigned char)data[i]) * 1099511628211ULL;
    return h;
}

/* Record the listing of the directory open as `dir_fd` (which it does not close); with
 * `only_changes`, not when it equals the one this process recorded last for it. */
static int record_dir(int dir_fd, const char *path, int only_changes) {
    struct statx st;
    char temporary[PATH_MAX + 32], final[PATH_MAX + 32], id[128], target[PATH_MAX];
    if (statx(dir_fd, "", AT_EMPTY_PATH, STATX_INO | STATX_BTIME, &st) < 0) return -1;
    int copy = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *dir = copy < 0 ? NULL : fdopendir(copy);
    if (dir == NULL) {
        if (copy >= 0) close(copy);
        return -1;
    }
    struct buf entries = {NULL, 0, 0};
    int ok = 1;
    struct dirent *entry;
    while (ok && (entry = readdir(dir)) != NULL) {
        const char *name = entry->d_name;
        if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0) continue;
        struct statx es;
        if (statx(dirfd(dir), name, AT_SYMLINK_NOFOLLOW, STATX_TYPE | STATX_INO | STATX_BTIME,
                  &es) < 0)
            continue; /* removed since readdir saw it */
        char type = S_ISDIR(es.stx_mode) ? 'd' : S_ISREG(es.stx_mode) ? 'f'
                    : S_ISLNK(es.stx_mode) ? 'l' : 0;
        if (!type) continue; /* fifos, sockets: nothing of a dataset */
        target[0] = 0;
        if (type == 'l') {
            ssize_t n = readlinkat(dirfd(dir), name, target, sizeof target - 1);
            target[n < 0 ? 0 : n] = 0;
        }
        identity(&es, id, sizeof id);
        char k[2] = {type, 0};
        ok = append(&entries, k, 2) == 0 && append(&entries, id, identity_len(id)) == 0 &&
             append(&entries, name, strlen(name) + 1) == 0 &&
             append(&entries, target, strlen(target) + 1) == 0;
    }
    closedir(dir);
    identity(&st, id, sizeof id);
    uint64_t folder = fnv(id, identity_len(id));
    uint64_t listing = fnv(entries.data ? entries.data : "", entries.len);
    size_t slot = folder % LISTINGS;
    if (ok && only_changes && listings[slot].folder == folder &&
        listings[slot].listing == listing) {
        free(entries.data);
        return 0;
    }
    int out = ok ? begin(temporary, final) : -1;
    ok = out >= 0 && header(out, 'D', &st, path) == 0 &&
         write_all(out, entries.data ? entries.data : "", entries.len) == 0;
    free(entries.data);
    if (out < 0 || finish(out, temporary, final, ok) < 0) return -1;
    listings[slot].folder = folder;
    listings[slot].listing = listing;
    return 0;
}

/* Record `path` (open as `fd`) and everything under it: what sync() makes durable; with
 * `files` 0, only the folders' listings. */
static int record_tree(int fd, const char *path, int files) {
    if (record_dir(fd, path, !files) < 0) {
        fail("cannot record the folder", path);
        return -1;
    }
    int copy = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *dir = copy < 0 ? NULL : fdopendir(copy);
    if (dir == NULL) return -1;
    int result = 0;
    struct dirent *entry;
    char child[PATH_MAX];
    while ((entry = readdir(dir)) != NULL) {
        const char *name = entry->d_name;
        if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0) continue;
        if (snprintf(child, sizeof child, "%s/%s", path, name) >= (int)sizeof child) continue;
        int sub = openat(dirfd(dir), name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
        if (sub < 0) continue; /* a symlink, or removed since */
        struct stat st;
        if (fstat(sub, &st) == 0 && S_ISDIR(st.st_mode)) {
            result |= record_tree(sub, child, files);
        } else if (files && S_ISREG(st.st_mode) && record_file(sub, child) < 0) {
            fail("cannot record the file", child);
            result = -1;
        }
        close(sub);
    }
    closedir(dir);
    return result;
}

/* After a successful sync of `fd`: record what it made durable, when it is under the root. */
static void record_namespace(void) {
    int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || record_tree(fd, root, 0) < 0) fail("cannot record the folders of", root);
    if (fd >= 0) close(fd);
}

static void record_fd(int fd) {
    char path[PATH_MAX], link[64];
    if (!fd_path(fd, path) || !under_root(path)) return;
    int saved = errno;
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    lock();
    int readable = open(link, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    if (readable < 0 || fstat(readable, &st) < 0) {
        fail("cannot reopen", path);
    } else if (S_ISDIR(st.st_mode)) {
        if (record_dir(readable, path, 0) < 0) fail("cannot record the folder", path);
    } else if (S_ISREG(st.st_mode)) {
        if (record_file(readable, path) < 0) fail("cannot record the file", path);
    }
    if (readable >= 0) close(readable);
    if (journaled) record_namespace();
    unlock();
    errno = saved;
}

static void record_root(void) {
    int saved = errno;
    lock();
    int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        fail("cannot open the root", root);
    } else {
        record_tree(fd, root, 1);
        close(fd);
    }
    unlock();
    errno = saved;
}

int fsync(int fd) {
    pthread_once(&once, init);
    int result = real_fsync(fd);
    if (result == 0 && enabled) record_fd(fd);
    return result;
}

int fdatasync(int fd) {
    pthread_once(&once, init);
    int result = real_fdatasync(fd);
    if (result == 0 && enabled) record_fd(fd);
    return result;
}

int sync_file_range(int fd, off_t offset, off_t nbytes, unsigned int flags) {
    pthread_once(&once, init);
    int result = real_sync_file_range(fd, offset, nbytes, flags);
    if (result == 0 && enabled && (flags & SYNC_FILE_RANGE_WAIT_AFTER)) record_fd(fd);
    return result;
}

int msync(void *address, size_t length, int flags) {
    pthread_once(&once, init);
    int result = real_msync(address, length, flags);
    if (result != 0 || !enabled || !(flags & MS_SYNC)) return result;
    /* the file behind the mapping, from /proc/self/maps: "start-end perms off dev ino path" */
    int saved = errno;
    FILE *maps = fopen("/proc/self/maps", "re");
    char line[PATH_MAX + 128], path[PATH_MAX];
    path[0] = 0;
    while (maps && fgets(line, sizeof line, maps)) {
        unsigned long start, end;
        int at = 0;
        if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %n", &start, &end, &at) < 2) continue;
        if ((uintptr_t)address >= start && (uintptr_t)address < end && line[at] == '/') {
            snprintf(path, sizeof path, "%s", line + at);
            path[strcspn(path, "\n")] = 0;
            break;
        }
    }
    if (maps) fclose(maps);
    if (path[0] && under_root(path)) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            lock();
            if (record_file(fd, path) < 0) fail("cannot record the file", path);
            if (journaled) record_namespace();
            unlock();
            close(fd);
        }
    }
    errno = saved;
    return result;
}

int syncfs(int fd) {
    pthread_once(&once, init);
    int result = real_syncfs(fd);
    struct stat mine, theirs;
    if (result == 0 && enabled && fstat(fd, &mine) == 0 && stat(root, &theirs) == 0 &&
        mine.st_dev == theirs.st_dev)
        record_root();
    return result;
}

void sync(void) {
    pthread_once(&once, init);
    real_sync();
    if (enabled) record_root();
}

/* For the harness (through ctypes, not preloaded): record the tree `at` as records into
 * `into`, the state before the run. Returns 0, or -1 when a record failed (see ERROR). */
int powercut_snapshot(const char *at, const char *into) {
    pthread_once(&once, init);
    if (strlen(at) >= PATH_MAX || strlen(into) >= PATH_MAX - 64) return -1;
    strcpy(root, at);
    root_len = strlen(root);
    strcpy(shadow, into);
    int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    lock();
    int result = record_tree(fd, root, 1);
    unlock();
    close(fd);
    if (lock_fd >= 0) close(lock_fd);
    lock_fd = -1; /* the next call may use another shadow folder */
    return result;
}
