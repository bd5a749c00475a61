/* See straggler.h. */
#include "agent/straggler.h"

#include <stdlib.h>

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double straggler_median(double *v, int n) {
    if (n <= 0) return 0;
    qsort(v, (size_t)n, sizeof *v, by_value);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int straggler_update(straggler_watch *w, const rank_speed *sp, int n, int *changed, int max) {
    double *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
    if (!v) return 0;
    int m = 0;
    for (int i = 0; i < n; i++)
        if (sp[i].compute >= 0 && sp[i].steps > 0 && sp[i].rank >= 0 && sp[i].rank < w->n)
            v[m++] = sp[i].compute;
    /* of two ranks, each is compared with the other (their median, the
     * mean, would halve the difference) */
    double med = m >= 2 ? straggler_median(v, m) : 0, lo = m == 2 ? v[0] : 0, hi = m == 2 ? v[1] : 0;
    free(v);
    if (med <= 0) return 0;
    int nc = 0;
    for (int i = 0; i < n; i++) {
        const rank_speed *s = &sp[i];
        if (s->compute < 0 || s->steps <= 0 || s->rank < 0 || s->rank >= w->n) continue;
        straggler_state *st = &w->st[s->rank];
        double ref = m == 2 ? (s->compute == hi ? lo : hi) : med;
        st->rank = s->rank, st->compute = s->compute, st->median = ref;
        int slow = ref > 0 && s->compute > ref * (1 + w->threshold);
        st->slow_windows = slow ? st->slow_windows + 1 : 0;
        st->fast_windows = slow ? 0 : st->fast_windows + 1;
        int was = st->straggler;
        if (!was && st->slow_windows >= STRAGGLER_WINDOWS) st->straggler = 1;
        if (was && st->fast_windows >= STRAGGLER_WINDOWS) st->straggler = 0;
        if (st->straggler != was && nc < max) changed[nc++] = s->rank;
    }
    return nc;
}
