/* The snapshot directory: a directory in memory (tmpfs, /dev/shm) that the
 * agent makes for its workers, that survives their restarts, and that goes
 * when the agent ends. The workers find it in DDPRUN_SNAPSHOT_DIR: a
 * training script saves its state there every step (torch.save costs a
 * memory copy, not a disk write) and loads it when it starts again, so a
 * restart loses at most the step under way. Where /dev/shm cannot be used,
 * the directory is on disk under the agent's log directory. */
#ifndef DDPRUN_AGENT_SNAPSHOT_DIR_H
#define DDPRUN_AGENT_SNAPSHOT_DIR_H

#include <stddef.h>

typedef struct {
    char path[512]; /* "" until made */
    int in_memory;  /* made under the memory root (else on disk) */
    char disk[512]; /* with in_memory: a directory on disk for when the memory is full */
                    /* (DDPRUN_SNAPSHOT_DISK_DIR); "" otherwise */
    int owner_fd, disk_owner_fd; /* each one's owner file, locked while the agent runs (-1) */
} snapshot_dir;

/* Makes a fresh directory under mem_root ("ddprun-snap.<pid>.XXXXXX"),
 * and one under disk_root for the workers to turn to if the memory fills
 * up; or, when mem_root cannot be used, only the one under disk_root; why
 * says what went wrong with mem_root ("" when nothing did). Each holds an
 * owner file (.owner) that this process keeps locked until
 * snapshot_dir_remove or its end. Before that, removes what agents that
 * are gone (SIGKILLed without a janitor) left under mem_root: directories
 * whose owner file no one holds (a lock is seen across PID namespaces;
 * a pid is not), or, lacking one, whose pid is gone. 0, or -errno when
 * neither could be made. */
int snapshot_dir_make(snapshot_dir *d, const char *mem_root, const char *disk_root, char *why,
                      size_t whylen);

/* Removes the directories and all in them. */
void snapshot_dir_remove(snapshot_dir *d);

#endif
