/* Algorithm choices kept across processes: what --cudnn-benchmark timed,
 * so that a machine times each convolution once, not in every process
 * (every restart of a job would otherwise time them all again, seconds
 * for ResNet-50 before its first step).
 *
 * One file per machine kind and library versions (the caller names it:
 * GPU model, its multiprocessors, cuDNN, CUDA and driver versions), in a
 * directory (ddp-train --cudnn-cache, default ~/.cache/ddprun). Each line
 * is one entry: a key (the direction, the shape, the types: the caller's
 * words), then the candidates as the timing ranked them, fastest first:
 *
 *     KEY|N ALGO STATUS DETERMINISM MATH MEMORY ...
 *
 * Entries are appended with one write() each, so ranks sharing the file
 * never interleave within a line; a line a crash cut short (no newline) or
 * that does not parse is ignored, and a key written twice keeps its first
 * line. A file that cannot be read or written costs the timing, never the
 * run: the caller is told why once, and goes on without it.
 *
 * Pure C, no GPU library: the file's rules are tested on any machine. */
#ifndef DDPRUN_WORKER_BACKEND_ALGO_CACHE_H
#define DDPRUN_WORKER_BACKEND_ALGO_CACHE_H

#include <stddef.h>
#include <stdint.h>

#define ALGO_CACHE_MAX 8   /* candidates per entry */
#define ALGO_CACHE_KEY 128 /* the longest key, with its NUL */

/* One candidate, in the library's own numbers. */
typedef struct {
    int algo, status, determinism, math;
    uint64_t memory;
} algo_choice;

typedef struct algo_cache algo_cache;

/* Opens dir/name, making dir if needed, and reads every whole entry.
 * 0, or -errno with why (nothing to read is no error: an empty cache). */
int algo_cache_open(const char *dir, const char *name, algo_cache **out, char *why, size_t len);
/* The candidates kept for key (at most max into out): their count, or -1
 * when key was never timed here. */
int algo_cache_get(const algo_cache *c, const char *key, algo_choice *out, int max);
/* Keeps key's candidates (n <= ALGO_CACHE_MAX), in memory and appended to
 * the file. 0, or -errno with why (in memory all the same; -EINVAL: a key
 * with '|' or a newline, or too long, is kept nowhere). */
int algo_cache_put(algo_cache *c, const char *key, const algo_choice *v, int n, char *why,
                   size_t len);
/* The file's path; how many entries it held when opened. */
const char *algo_cache_path(const algo_cache *c);
int algo_cache_loaded(const algo_cache *c);
void algo_cache_close(algo_cache *c);

#endif
