/* coll-peek FILE: a collective record (common/coll_record.h) as one line,
 * "entered DONE step STEP pid PID", for the tests that catch a rank inside
 * a collective. Exit 1 when FILE is no record. */
#include <stdio.h>

#include "common/coll_record.h"

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: coll-peek FILE\n");
        return 2;
    }
    coll_view v;
    if (coll_record_read(argv[1], &v) != 0) return 1;
    printf("%llu %llu step %lld pid %d\n", (unsigned long long)v.entered,
           (unsigned long long)v.done, (long long)v.step, v.pid);
    return 0;
}
