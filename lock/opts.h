/* opts.h - the checks of opts.c that the acquisitions share (dlock.c,
 * claim.c) beyond what dlock_base.h declares. */
#ifndef DLOCK_OPTS_H
#define DLOCK_OPTS_H

#include "lock/internal.h"

/* DLOCK_OK when cfg can start a client, else DLOCK_ERR_INVALID with
 * dlock_errstr naming what is wrong. */
int dlock__config_check(const dlock_config *cfg);

/* The options to use into *o: opts, or the defaults for NULL; checked as
 * dlock_opts_check does. */
int dlock__opts_of(const dlock_opts *opts, dlock_opts *o);

#endif
