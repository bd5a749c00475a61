/* ddprun's command line: everything torchrun's flags (and its PET_*
 * environment variables) can say, parsed and validated into the agent's
 * configuration (agent/agent_config.h), which the launcher hands to the
 * agent. Parsing never exits the process:
 * it returns an error with a one-line message and main decides. */
#ifndef DDPRUN_LAUNCHER_CONFIG_H
#define DDPRUN_LAUNCHER_CONFIG_H

#include <stddef.h>

#include "agent/agent_config.h"

/* Fills cfg from argv and environ (PET_<NAME> gives a flag's default, as
 * in torchrun; a flag on the command line wins). On a bad flag or value
 * returns -EINVAL and writes a one-line message naming it into err (no
 * program-name prefix); on --help returns 1 with the help text printed to
 * stdout. cfg is overwritten, not freed first; after any nonzero return
 * it holds nothing to free (config_free is still safe). Resolves
 * --nproc-per-node cpu/gpu/auto. Builds cfg->argv as torchrun does: without
 * --no-python every PROGRAM, .py or not, runs as "$PYTHON_EXEC -u PROGRAM
 * ARGS" (PYTHON_EXEC from environ_, default python3), -m as "... -u -m
 * MODULE ARGS", and --no-python as "PROGRAM ARGS". */
int config_parse(int argc, char **argv, char **environ_, agent_config *cfg, char *err,
                 size_t errlen);
void config_free(agent_config *cfg);
/* The help text. */
const char *config_usage(void);

#endif
