# docker-engine.sh - sourced by docker-demo.sh and test-deb.sh: a Docker
# engine for the run. When none answers, dockerd is started in its own
# session and stopped again by PID at the end (stop_dockerd, from the
# caller's EXIT trap). The caller sets ENGINE_WHO (its name, for messages)
# and ENGINE_LOG (where dockerd's output goes) before calling.

need_root() {
    [ "$(id -u)" -eq 0 ] && return 0
    echo "$ENGINE_WHO: $1 needs root: sudo make $ENGINE_WHO" >&2
    exit 1
}

dockerd_pid=""
start_dockerd() {
    docker info >/dev/null 2>&1 && return 0
    need_root "starting dockerd"
    echo "$ENGINE_WHO: no Docker engine answers; starting dockerd (log: $ENGINE_LOG)"
    # Its own session: a Ctrl-C must not stop it before the clean-up ran.
    setsid dockerd >"$ENGINE_LOG" 2>&1 </dev/null &
    dockerd_pid=$!
    for _ in $(seq 120); do
        docker info >/dev/null 2>&1 && return 0
        kill -0 "$dockerd_pid" 2>/dev/null || break
        sleep 0.5
    done
    tail -n 20 "$ENGINE_LOG" >&2
    echo "$ENGINE_WHO: dockerd did not start (see $ENGINE_LOG)" >&2
    return 1
}

stop_dockerd() {
    [ -n "$dockerd_pid" ] || return 0
    kill -TERM "$dockerd_pid" 2>/dev/null || return 0
    for _ in $(seq 60); do
        kill -0 "$dockerd_pid" 2>/dev/null || return 0
        sleep 0.5
    done
    kill -KILL "$dockerd_pid" 2>/dev/null || true
}
