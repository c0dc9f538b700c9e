# circles.awk - reads "FROM TO SYMBOL..." call edges (calls.awk) and prints
# every circle: each set of files that call each other round (a strongly
# connected component, Tarjan's), one line per circle, with the calls that
# tie it ("a.c -> b.c (b_fn), b.c -> a.c (a_fn)"). Nothing when there is none.
{
    if (!($1 in seen)) { seen[$1]; nodes[++nn] = $1 }
    if (!($2 in seen)) { seen[$2]; nodes[++nn] = $2 }
    adj[$1] = adj[$1] " " $2
    sym = $3
    for (i = 4; i <= NF; i++) sym = sym " " $i
    label[$1 " " $2] = sym
}

function connect(v,    k, i, w, n, succ, members, line, a, b, x, y) {
    index_[v] = low[v] = ++counter
    stack[++top] = v; on[v] = 1
    k = split(adj[v], succ, " ")
    for (i = 1; i <= k; i++) {
        w = succ[i]
        if (!(w in index_)) {
            connect(w)
            if (low[w] < low[v]) low[v] = low[w]
        } else if (on[w] && index_[w] < low[v]) {
            low[v] = index_[w]
        }
    }
    if (low[v] != index_[v])
        return
    n = 0
    do {
        w = stack[top--]; on[w] = 0
        members[++n] = w
    } while (w != v)
    if (n < 2)
        return
    line = ""
    for (a = 1; a <= n; a++)
        for (b = 1; b <= n; b++) {
            x = members[a]; y = members[b]
            if ((x " " y) in label)
                line = line (line == "" ? "" : ", ") x " -> " y " (" label[x " " y] ")"
        }
    print "circle: " line
}

END {
    for (i = 1; i <= nn; i++)
        if (!(nodes[i] in index_))
            connect(nodes[i])
}
