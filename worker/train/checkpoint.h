/* Checkpoints: one file per checkpoint, written atomically (temporary file,
 * fsync, rename, fsync of the directory), with a JSON header and a CRC32
 * per tensor, so a torn or corrupted file is detected and the previous one
 * used. The format is device-independent (little-endian, fp32 or raw
 * bytes). docs/checkpoint.md describes it byte by byte. */
#ifndef DDPRUN_WORKER_TRAIN_CHECKPOINT_H
#define DDPRUN_WORKER_TRAIN_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum { CKPT_F32 = 1, CKPT_BYTES = 2 } ckpt_dtype;

/* One tensor to save. data is host memory (a GPU run copies to the host
 * first); names are unique, 1..65535 bytes; an f32 tensor's nbytes is a
 * multiple of 4; data may be NULL only when nbytes is 0. */
typedef struct {
    const char *name;   /* "params", "grads_momentum", "bn_running", "rng", ... */
    ckpt_dtype dtype;
    const void *data;
    uint64_t nbytes;
} ckpt_tensor;

/* A checkpoint read back: header JSON text and tensors (all malloc'd; a
 * 0-byte tensor still has a non-NULL data pointer). Zeroed on failure. */
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

/* What to save, and where. */
typedef struct {
    const char *dir;          /* NULL or "": the current directory */
    uint64_t step;            /* names the file */
    const char *header_json;  /* a JSON object; NULL: "{}" */
    const ckpt_tensor *tensors;
    int ntensors;
    int keep;                 /* checkpoints left after this one (<= 0: all) */
} ckpt_save;

/* Writes dir/ckpt-<step, 10 digits>.ddpt atomically (creating dir and its
 * parents if missing) and then deletes older checkpoints (smaller step) so
 * that `keep` remain counting this one; the one just written and any with
 * a larger step are never deleted. The path written goes to path_out if
 * not NULL. 0 or -errno with a message (-EINVAL for input that could not
 * be read back as given); on failure no temporary file is left and
 * existing checkpoints are untouched. Older damaged checkpoints and
 * entries that are not regular files are neither counted nor deleted.
 * It also deletes the temporary files of earlier writes (at a step no
 * newer than this one), which it takes for dead ones: the caller must be
 * dir's only writer (ddp-train's rank 0 holds the directory's lock,
 * snapshot_lock, before its first write). */
int ckpt_write(const ckpt_save *save, char *path_out, size_t path_len, char *err, size_t errlen);

/* Reads and verifies one checkpoint (magic, lengths, every CRC, trailer).
 * -EBADMSG for a truncated or corrupt file, -errno if it cannot be opened;
 * -EISDIR or -EINVAL, at once, for a path that is not a regular file (a
 * FIFO is never waited on: "checkpoint P is a FIFO, not a checkpoint
 * file"); the message names the file and the problem. */
int ckpt_read(const char *path, ckpt_data *out, char *err, size_t errlen);
void ckpt_data_free(ckpt_data *d);
/* The tensor named `name`, or NULL. */
const void *ckpt_find(const ckpt_data *d, const char *name, uint64_t *nbytes);

/* The newest checkpoint (largest step) in dir that verifies; its path goes
 * to path if not NULL. Newer ones that do not are reported through `warn`
 * (one line each, naming the file and the problem; warn may be NULL),
 * skipped and left in place. An entry with a checkpoint's name that is not
 * a regular file (a FIFO, a directory) is never opened for long: it is
 * reported the same way, skipped, and not counted as a checkpoint. -ENOENT
 * if dir is missing or holds no checkpoint (start from scratch); -EBADMSG
 * if it holds checkpoints but none verifies (do not silently start over);
 * other -errno if dir cannot be listed. */
int ckpt_latest(const char *dir, char *path, size_t path_len, ckpt_data *out,
                void (*warn)(const char *line), char *err, size_t errlen);

/* `ddp-train inspect PATH`: prints the header of PATH (or of the newest
 * valid checkpoint in directory PATH, with warnings about newer bad ones on
 * stderr) as JSON indented by 2, with "path", "file_bytes",
 * "format_version", "tensors" (name, dtype, bytes, crc32) and
 * "weights_digest" ("fnv1a64:<16 hex>" over every tensor's name, length and
 * bytes in file order; docs/checkpoint.md) added. Prints nothing on
 * failure. 0 or -errno with a message. */
int ckpt_inspect(const char *path, FILE *out, char *err, size_t errlen);

/* CRC-32 (zlib's polynomial). */
uint32_t ckpt_crc32(uint32_t crc, const void *p, size_t n);

#endif
