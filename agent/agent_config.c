/* The agent's configuration: the one question asked of it, which streams a
 * local rank's output goes to. */
#include "agent/agent_config.h"

int stream_for_rank(const stream_spec *spec, int local_rank) {
    for (int i = 0; i < spec->n; i++)
        if (spec->rank[i] == local_rank) return spec->value[i];
    return spec->dflt;
}
