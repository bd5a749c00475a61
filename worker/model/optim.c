/* See optim.h. */
#include "worker/model/optim.h"

#include <math.h>

double lr_at(const lr_opts *o, double epoch) {
    if (o->warmup_epochs > 0 && epoch < o->warmup_epochs) return o->lr * epoch / o->warmup_epochs;
    switch (o->schedule) {
    case SCHED_COSINE: {
        double span = o->epochs - o->warmup_epochs;
        double t = span > 0 ? (epoch - o->warmup_epochs) / span : 1;
        if (t > 1) t = 1;
        return o->lr * 0.5 * (1 + cos(M_PI * t));
    }
    case SCHED_STEP: {
        double lr = o->lr;
        for (int i = 0; i < o->nmilestones; i++)
            if (epoch >= o->milestones[i]) lr *= o->gamma;
        return lr;
    }
    case SCHED_CONSTANT: break;
    }
    return o->lr;
}

double lr_scaled(double lr, int global_batch, int reference_batch) {
    return reference_batch > 0 ? lr * global_batch / reference_batch : lr;
}
