# calls.awk - the call graph of a set of objects, from nm: reads lines
# "def FILE SYMBOL" (FILE defines SYMBOL) and "use FILE SYMBOL" (FILE uses
# it), and prints one "FROM TO SYMBOL" line per file that uses a symbol
# another file defines (the first symbol seen for that pair, then "+N" more).
# Used by test_layers.sh.
$1 == "def" { def[$3] = $2; next }
$1 == "use" { uses[++n] = $2; names[n] = $3; next }
END {
    for (i = 1; i <= n; i++) {
        to = def[names[i]]
        if (to == "" || to == uses[i])
            continue
        pair = uses[i] " " to
        if (!(pair in first)) {
            first[pair] = names[i]
            order[++np] = pair
        } else {
            more[pair]++
        }
    }
    for (i = 1; i <= np; i++)
        print order[i], first[order[i]] (more[order[i]] ? " +" more[order[i]] : "")
}
