/* Checkpoints: one file per checkpoint, written atomically (temporary file,
 * fsync, rename, fsync of the directory), with a JSON header and a CRC32
 * per tensor, so a torn or corrupted file is detected and the previous one
 * used. The format is device-independent (little-endian, fp32 or raw
 * bytes). docs/checkpoint.md describes it byte by byte. */
#ifndef DDPRUN_WORKER_CHECKPOINT_H
#define DDPRUN_WORKER_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum { CKPT_F32 = 1, CKPT_BYTES = 2 } ckpt_dtype;

typedef struct {
    const char *name;   /* "params", "grads_momentum", "bn_running", "rng", ... */
    ckpt_dtype dtype;
    const void *data;
    uint64_t nbytes;
} ckpt_tensor;

/* A checkpoint read back: header JSON text and tensors (all malloc'd). */
typedef struct {
    char *header;       /* NUL-terminated JSON */
    int n;
    struct {
        char *name;
        ckpt_dtype dtype;
        void *data;
        uint64_t nbytes;
    } *t;
} ckpt_data;

/* Writes dir/ckpt-<step, 10 digits>.ddpt atomically and then deletes all
 * but the newest `keep` checkpoints in dir (keep <= 0: keep all). The path
 * written goes to path_out if not NULL. 0 or -errno with a message. */
int ckpt_write(const char *dir, uint64_t step, const char *header_json, const ckpt_tensor *ts,
               int n, int keep, char *path_out, size_t path_len, char *err, size_t errlen);

/* Reads and verifies one checkpoint (magic, lengths, every CRC). */
int ckpt_read(const char *path, ckpt_data *out, char *err, size_t errlen);
void ckpt_data_free(ckpt_data *d);
/* The tensor named `name`, or NULL. */
const void *ckpt_find(const ckpt_data *d, const char *name, uint64_t *nbytes);

/* The newest checkpoint in dir that verifies. Newer ones that do not are
 * reported through `warn` (one line each, naming the file and the problem)
 * and skipped. -ENOENT if there is none. */
int ckpt_latest(const char *dir, char *path, size_t path_len, ckpt_data *out,
                void (*warn)(const char *line), char *err, size_t errlen);

/* `ddp-train inspect PATH`: prints the header of PATH (or of the newest
 * valid checkpoint in directory PATH) as JSON, with "path", "tensors"
 * (name, dtype, bytes, crc32) and "weights_digest" (a hash over every
 * tensor's bytes in file order) added. 0 or -errno with a message. */
int ckpt_inspect(const char *path, FILE *out, char *err, size_t errlen);

/* CRC-32 (zlib's polynomial). */
uint32_t ckpt_crc32(uint32_t crc, const void *p, size_t n);

#endif
