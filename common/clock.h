/* The monotonic clock, in the units callers want. Every deadline, timeout
 * and duration in ddprun is measured on CLOCK_MONOTONIC, so a wall-clock
 * jump (NTP, a suspended VM) never fires a timer early or late; the wall
 * clock is only for times shared with other processes (clock_wall_s). */
#ifndef DDPRUN_COMMON_CLOCK_H
#define DDPRUN_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline int64_t clock_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline int64_t clock_now_ms(void) { return clock_now_ns() / 1000000; }

/* Seconds, for durations printed to people and rates. */
static inline double clock_now_s(void) { return (double)clock_now_ns() * 1e-9; }

/* The wall clock, seconds since the epoch: only for times other processes
 * read (exit times in failure reports, torch's FileTimer deadlines, event
 * timestamps), never for a timeout of our own. */
static inline double clock_wall_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
