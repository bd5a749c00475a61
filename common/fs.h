/* File-system helpers shared by the agent (log directories) and the
 * trainer (checkpoint directories, the files it reads back). */
#ifndef DDPRUN_COMMON_FS_H
#define DDPRUN_COMMON_FS_H

#include <sys/types.h>

/* mkdir -p: creates dir and its missing parents (mode 0755). 0, or -errno
 * of the first component that could not be made (-ENAMETOOLONG for a path
 * of PATH_MAX or more). */
int fs_mkdir_p(const char *dir);

/* rm -rf: removes path and everything below it, without following
 * symbolic links; best effort (what cannot be removed stays). */
void fs_remove_tree(const char *path);

/* Opens path with flags (O_RDONLY, O_RDWR, O_CREAT, O_NOFOLLOW ...; a file
 * it creates gets mode 0644 less the umask) only if it is a regular file.
 * The open itself is non-blocking, so a FIFO without a writer or a device
 * cannot hold it up; the file is then fstat'ed, and O_NONBLOCK cleared for
 * the caller. Returns the descriptor (O_CLOEXEC), or -errno from open or
 * fstat with *kind NULL, or, for a file of another type, -EISDIR (a
 * directory) or -EINVAL (anything else) with *kind its words ("a FIFO",
 * fs_kind). kind may be NULL. */
int fs_open_regular(const char *path, int flags, const char **kind);

/* The kind of file a mode says, as words for messages: "a regular file",
 * "a directory", "a FIFO", "a socket", "a character device", "a block
 * device", "a symbolic link", else "not a regular file". */
const char *fs_kind(mode_t mode);

#endif
