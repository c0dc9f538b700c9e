/* node_internal.h - what node_ops.c (the calls the lock makes to one
 * server) uses of node.c (the calls in flight): open, fill, send and end a
 * dlock_node_call. A call that failed at any step carries its code and
 * text (call->rc, call->err) to the end, and every later step skips it. */
#ifndef DLOCK_NODE_INTERNAL_H
#define DLOCK_NODE_INTERNAL_H

#include "lock/node.h"

/* Starts a call on a connection: the caller's own (opened when missing) or
 * a pooled one. 0, or -1 with the call failed (nothing sent). */
int dlock__call_open(dlock_node *n, dlock_node_call *call, redisContext **own);

/* Marks the call failed with the calling thread's error (or the text why,
 * when given); the first failure stands. */
void dlock__call_fail(dlock_node_call *call, int code, const char *why);

/* Appends EVALSHA of script s with nkeys keys and nargs arguments in all
 * (args, arg_lens) to the call's output, loading the script first when the
 * node has no SHA for it yet. */
void dlock__call_append_script(dlock_node_call *call, enum dlock_script s, int nkeys, int nargs,
                               const char **args, const size_t *arg_lens);

/* A single script call with the arguments stored in the call (argv, lens:
 * kept for a NOSCRIPT redo at end). */
void dlock__call_script(dlock_node_call *call, enum dlock_script s, int nkeys, int nargs);

/* Writes what the call appended. */
void dlock__call_send(dlock_node_call *call);

/* The result of a single command: its checked reply (caller frees), or
 * NULL with the error set (the call's failure, or an error reply). A
 * NOSCRIPT reply is redone here with the script's body. Closes the call. */
redisReply *dlock__call_result(dlock_node_call *call);

/* The same for reply i of a pipelined call, whose script s with these
 * arguments is redone on NOSCRIPT; the call stays open (dlock__call_close). */
redisReply *dlock__call_reply_at(dlock_node_call *call, int i, enum dlock_script s, int nkeys,
                                 int nargs, const char **args, const size_t *arg_lens);

/* Gives the call's connection back and counts the call: its round trip
 * when answered, an error when not. */
void dlock__call_close(dlock_node_call *call);

/* A number as a script argument, into buf; its length. By hand: a call
 * formats five of them. */
size_t dlock__arg_int(char buf[24], int64_t v);

#endif
