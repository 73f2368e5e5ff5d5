/*
 * SIGHUP for a running worker: re-read the configuration and apply what can
 * change while running (run.h, "Reload"). Called by the queuer thread.
 */
#ifndef QW_RUN_RELOAD_H
#define QW_RUN_RELOAD_H

#include "shared/shared.h"

/**
 * Re-reads the configuration through w->reload_load and applies the
 * reloadable keys (log.level, admin.listen, dlt.pause_base_ms/max_ms),
 * logging each change, each other key that changed (needs a restart), or
 * why the new configuration was refused (the running one is kept). Call on
 * the queuer thread only: it owns w->admin.
 */
void qw_worker_apply_reload(struct qw_worker *w);

#endif
