/*
 * launch internals shared by its files; not for other modules.
 */
#ifndef DPLAN_LAUNCH_INTERNAL_H
#define DPLAN_LAUNCH_INTERNAL_H

#include <signal.h>

#include "launch.h"

/* SIGINT and SIGTERM: recorded, and forwarded to the running job's process group.
 * dp__launch_catch(true) installs the handler (saving the old ones), false restores. */
void dp__launch_catch(bool on);
/* The signal caught since the supervisor started (0: none). */
int dp__launch_signal(void);

#endif
