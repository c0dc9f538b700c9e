# report.sh - sourced by the shell tests: prints one test's result as cmocka
# does, for tests/run.sh. Set REPORT_SUITE first ("readme", "layers", ...).
# report NAME STATUS [DETAIL]: STATUS 0 passes; otherwise DETAIL is printed.
report() {
    echo "[ RUN      ] $REPORT_SUITE: $1"
    if [ "$2" = 0 ]; then
        echo "[       OK ] $REPORT_SUITE: $1"
    else
        printf '%s\n' "${3:-}"
        echo "[  FAILED  ] $REPORT_SUITE: $1"
    fi
}

# skip NAME REASON: the test could not run here; tests/run.sh lists REASON.
skip() {
    echo "[ RUN      ] $REPORT_SUITE: $1"
    echo "skip: $2"
    echo "[  SKIPPED ] $REPORT_SUITE: $1"
}
