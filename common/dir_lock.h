/* One writer per directory: an exclusive flock(2) on DIR/.lock, taken by a
 * process before it writes (or deletes) anything in DIR, so that two jobs
 * given the same directory cannot replace each other's files. The kernel
 * drops the lock when its holder ends, however it ends (kill -9 included),
 * so a lock file left behind never blocks anyone. The file names its
 * holder (pid, host, run id, since when) for the message of whoever is
 * refused; it is never deleted (a deleted lock file lets a second process
 * lock a new file while the first still holds the old one). */
#ifndef DDPRUN_COMMON_DIR_LOCK_H
#define DDPRUN_COMMON_DIR_LOCK_H

#include <stddef.h>

#define DIR_LOCK_FILE ".lock"

/* The caller's storage; all zero is "not held". */
typedef struct {
    int held;
    int fd;
} dir_lock;

/* Who holds a directory, as its lock file says; empty strings (pid 0)
 * where it says nothing. */
typedef struct {
    long pid;
    char host[256];
    char run_id[256];
    char since[32]; /* UTC, "2026-05-01T12:00:00Z" */
} dir_lock_holder;

/* Takes the lock on dir (created with its parents if missing) without
 * waiting, and writes this process's pid, host name, run_id (NULL or "":
 * none) and the time into the lock file. 0 when held; -EWOULDBLOCK when
 * another process holds it, with *holder (may be NULL) read from its file;
 * another -errno with a message naming the directory or the file (a lock
 * file that is not a regular file, a file system without locks). */
int dir_lock_take(dir_lock *l, const char *dir, const char *run_id, dir_lock_holder *holder,
                  char *err, size_t errlen);

/* Gives the lock up (closes the file); nothing when it is not held. */
void dir_lock_release(dir_lock *l);

/* The holder as words for a message: "pid 1234 on host h1, run id foo,
 * since 2026-05-01T12:00:00Z" (parts it does not know left out). */
void dir_lock_holder_text(const dir_lock_holder *h, char *buf, size_t len);

#endif
