/* The hooks' outbox rows, between the table (outbox.c) and the delivery thread (hooks.c); see
 * job/hooks.h for what they mean. */
#ifndef ANVIL_JOB_OUTBOX_H
#define ANVIL_JOB_OUTBOX_H

#include <stdint.h>

#include "job/hooks.h"
#include "job/store.h"

/* One event for one hook. */
typedef struct {
    int64_t id, job_id; /* id: the event_id */
    double at;
    char *status, *secondary, *message;
    anvil_hook_kind kind;
    char *target;
    int attempts;
    double next_at, delivered_at, given_up_at; /* 0: not yet */
    char *last_error;
} anvil_outbox_row;

/* The rows due at now, oldest first, each the oldest open one of its job and hook. */
int anvil_outbox_due(anvil_store *st, double now, anvil_outbox_row **rows, int *n);
/* Stores r's attempts, next_at, delivered_at, given_up_at and last_error. */
int anvil_outbox_record(anvil_store *st, const anvil_outbox_row *r);
/* Frees the rows' strings (not the array). */
void anvil_outbox_rows_free(anvil_outbox_row *rows, int n);

#endif
