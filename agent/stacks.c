/* See stacks.h. */
#include "agent/stacks.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int stacks_signal(void) { return SIGRTMIN + 2; }

/* Whether pid's SigCgt mask (hexadecimal, signal N at bit N - 1) has sig. */
static int catches(pid_t pid, int sig) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f) return 0;
    int yes = 0;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "SigCgt:", 7) == 0) {
            unsigned long long mask = strtoull(line + 7, NULL, 16);
            yes = sig >= 1 && sig <= 64 && (mask >> (sig - 1) & 1);
            break;
        }
    fclose(f);
    return yes;
}

int stacks_ask(pid_t pid) {
    int sig = stacks_signal();
    return pid > 0 && catches(pid, sig) && kill(pid, sig) == 0;
}
