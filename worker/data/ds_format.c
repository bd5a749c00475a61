/* What the data set formats share (see ds_format.h): their error
 * messages, paths, and the in-memory byte set two of them read into. */
#include "worker/data/ds_format.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/err.h"

int ds_join_path(char *out, size_t len, const char *dir, const char *name, char *err,
                 size_t errlen) {
    int n = snprintf(out, len, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= len) {
        return err_set(err, errlen, -ENAMETOOLONG, "the path %s/%s is too long", dir, name);
    }
    return 0;
}

int ds_file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* In memory nothing can fail: err stays untouched. */
int ds_stored_sample(const void *state, int64_t index, const ds_draw *dr, void *px,
                     int32_t *label, char *err, size_t errlen) {
    (void)dr;
    (void)err, (void)errlen;
    const ds_stored *s = state;
    memcpy(px, s->pixels + (size_t)index * s->bytes, s->bytes);
    *label = s->labels[index];
    return 0;
}

void ds_stored_close(void *state) {
    ds_stored *s = state;
    if (!s) return;
    free(s->pixels);
    free(s->labels);
    free(s);
}
