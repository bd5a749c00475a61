/* coll-peek [--ring] FILE: a collective record (common/coll_record.h) as
 * one line, "ENTERED DONE step STEP pid PID", for the tests that catch a
 * rank inside a collective; with --ring, then one line per collective
 * still in its ring, oldest first: "SEQ OP BYTES done|open RC". Exit 1
 * when FILE is no record. */
#include <stdio.h>
#include <string.h>

#include "common/coll_record.h"

int main(int argc, char **argv) {
    int ring = argc == 3 && strcmp(argv[1], "--ring") == 0;
    if (argc != 2 + ring) {
        fprintf(stderr, "usage: coll-peek [--ring] FILE\n");
        return 2;
    }
    coll_view v;
    if (coll_record_read(argv[argc - 1], &v) != 0) return 1;
    printf("%llu %llu step %lld pid %d\n", (unsigned long long)v.entered,
           (unsigned long long)v.done, (long long)v.step, v.pid);
    for (int i = 0; ring && i < v.n; i++) {
        const coll_entry_view *e = &v.ring[i];
        printf("%llu %s %llu %s %d\n", (unsigned long long)e->seq, e->op,
               (unsigned long long)e->bytes, e->ended_ns ? "done" : "open", e->rc);
    }
    return 0;
}
