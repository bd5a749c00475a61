/* File-system helpers shared by the agent (log directories) and the
 * trainer (checkpoint directories). */
#ifndef DDPRUN_COMMON_FS_H
#define DDPRUN_COMMON_FS_H

/* mkdir -p: creates dir and its missing parents (mode 0755). 0, or -errno
 * of the first component that could not be made (-ENAMETOOLONG for a path
 * of PATH_MAX or more). */
int fs_mkdir_p(const char *dir);

#endif
