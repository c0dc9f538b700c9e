/* notify.h - what stockd tells the service manager that started it, through
 * libsystemd's sd_notify: ready, reloading, stopping, and a one-line status
 * that `systemctl status` shows. Under a Type=notify unit systemd puts
 * NOTIFY_SOCKET in the environment; without it (any other run) every call
 * here does nothing and returns 0. */
#ifndef NOTIFY_H
#define NOTIFY_H

/* 1 when a service manager listens (NOTIFY_SOCKET is set), else 0: main
 * checks readiness only for one that does. */
int notify_wanted(void);

/* Each sends one message: its state, then STATUS= and the printf-style text
 * (control characters in it become spaces: a detail quoted from a file or a
 * server can't add an assignment of its own). Returns 1 when sent, 0 without
 * NOTIFY_SOCKET, a negative errno when the message could not be sent.
 * Thread-safe; each is one datagram, which systemd reads at once. */

/* STATUS= alone. */
int notify_status(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* READY=1: started (systemd finishes the unit's start) or, after
 * notify_reloading, reloaded. */
int notify_ready(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* RELOADING=1, with MONOTONIC_USEC= (the clock's now, which a newer systemd's
 * Type=notify-reload asks for): a reload begins; notify_ready ends it. */
int notify_reloading(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* STOPPING=1: the stop begins; STATUS= updates may follow while it drains. */
int notify_stopping(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
