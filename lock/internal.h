/* internal.h - what the library's own files see of its API: the public
 * vocabulary (dlock_base.h: codes, limits, config and options, the
 * request), never the headers of the calls (dlock.h and its siblings), which
 * only the files that define those calls include. Calls go down the files
 * of lock/, and an include of a public header from below would run back up.
 *
 * Names: a function of the library that no public header declares is
 * dlock__name (as libuv's uv__name), so that a reader sees which calls cross
 * the public API; file-local statics keep plain names. Only what the public
 * headers declare between DLOCK_BEGIN_DECLS and DLOCK_END_DECLS is exported
 * from libdlock.so: the rest is built hidden. */
#ifndef DLOCK_INTERNAL_H
#define DLOCK_INTERNAL_H

#include "lock/dlock_base.h"

#endif
