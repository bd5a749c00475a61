/* libjpeg-turbo's errors as the project judges them, for every place that
 * decodes a JPEG (the host pipeline, worker/data/ds_imagefolder.c, and the
 * GPU decoder's host twin, worker/backend/cpu/cpu_jpeg.c), so both refuse
 * the same files: an error leaves by longjmp with libjpeg's words in msg;
 * of the warnings, a stream cut short is an error (PIL's "image file is
 * truncated"), the rest (extraneous bytes and the like) pass, as PIL lets
 * them. Header only: the callers link libjpeg, nothing else here does. The
 * caller sets the jump with setjmp(e.jump) after jpeg_fail_init. */
#ifndef DDPRUN_COMMON_JPEG_FAIL_H
#define DDPRUN_COMMON_JPEG_FAIL_H

#include <setjmp.h>
#include <stdio.h>

#include <jpeglib.h>
#include <jerror.h>

struct jpeg_fail {
    struct jpeg_error_mgr mgr;
    jmp_buf jump;
    char msg[JMSG_LENGTH_MAX];
};

static inline void jpeg_fail_exit(j_common_ptr c) {
    struct jpeg_fail *e = (struct jpeg_fail *)c->err;
    c->err->format_message(c, e->msg);
    longjmp(e->jump, 1);
}

static inline void jpeg_fail_note(j_common_ptr c, int level) {
    if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF) jpeg_fail_exit(c);
}

/* ci's error manager: e's. */
static inline void jpeg_fail_init(struct jpeg_decompress_struct *ci, struct jpeg_fail *e) {
    ci->err = jpeg_std_error(&e->mgr);
    e->mgr.error_exit = jpeg_fail_exit;
    e->mgr.emit_message = jpeg_fail_note;
}

#endif
