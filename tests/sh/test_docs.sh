#!/usr/bin/env bash
# test_docs.sh - keeps the pages joined up: every relative link in a *.md file
# of the tree points at a file that exists and, with #anchor, at a heading of
# that page (anchors made as GitHub makes them); the check is first shown to
# catch a broken link and a broken anchor on pages of its own. Also: the ACL
# user that docs/operations.md gives operators may run exactly
# DLOCK_ACL_COMMANDS. Prints cmocka-style lines for tests/run.sh.
set -uo pipefail
cd "$(dirname "$0")/../.."

REPORT_SUITE=docs
. tests/sh/report.sh

# check_links FILE...: one line "FILE: TARGET: what is wrong" per bad link.
check_links() {
    perl -CSD -Mutf8 -e '
use strict;
use warnings;
use File::Basename qw(dirname);

sub read_page {
    my ($path) = @_;
    open(my $fh, "<:encoding(UTF-8)", $path) or return undef;
    local $/;
    my $text = <$fh>;
    # Fenced blocks hold code, not links or headings.
    $text =~ s/^[ ]{0,3}(```|~~~).*?^[ ]{0,3}\1[^\n]*$//msg;
    return $text;
}

# The anchors GitHub gives a page: each heading lower-cased, stripped of all
# but word characters (letters, digits, marks, "_"), "-" and spaces, spaces
# made "-"; a repeated one gets "-1", "-2", ...; plus <a name|id="...">.
my %anchors;
sub anchors_of {
    my ($path) = @_;
    return $anchors{$path} if $anchors{$path};
    my (%a, %seen);
    my $text = read_page($path) // "";
    for my $line (split /\n/, $text) {
        if ($line =~ /^#{1,6}\s+(.*?)\s*#*\s*$/) {
            my $t = lc $1;
            $t =~ s/\[([^\]]*)\]\([^)]*\)/$1/g;
            $t =~ s/[^\w\- ]//g;
            $t =~ s/ /-/g;
            my $slug = $seen{$t}++ ? "$t-" . ($seen{$t} - 1) : $t;
            $a{$slug} = 1;
        }
        $a{$1} = 1 while $line =~ /<a\s+(?:name|id)="([^"]+)"/g;
    }
    return $anchors{$path} = \%a;
}

for my $page (@ARGV) {
    my $text = read_page($page);
    if (!defined $text) { print "$page: cannot be read\n"; next; }
    $text =~ s/(`+).+?\1//sg; # code spans, also across lines
    my @targets;
    push @targets, $1 while $text =~ /\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g;
    push @targets, $1 while $text =~ /^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)/mg;
    for my $target (@targets) {
        next if $target =~ /^[a-z][a-z0-9+.-]*:/i; # http:, mailto:, ...
        my ($path, $anchor) = $target =~ /^([^#]*)(?:#(.*))?$/;
        my $file = $path eq "" ? $page : dirname($page) . "/" . $path;
        if (!-e $file) { print "$page: $target: no such file\n"; next; }
        next unless defined $anchor;
        if ($file =~ /\.md$/) {
            print "$page: $target: no such heading in $file\n"
                unless anchors_of($file)->{$anchor};
        } elsif ($anchor !~ /^L\d+(-L\d+)?$/) {
            print "$page: $target: an anchor into a file that is not a page\n";
        }
    }
}
' "$@"
}

# 1. The check itself, on pages of its own: it must name exactly the two
# broken links and none of the good ones (nor links in code).
tmp=$(mktemp -d /tmp/test-docs.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/sub"
cat >"$tmp/a.md" <<'EOF'
# A page

## A heading: with `code`, punctuation's (and) more
## A heading: with `code`, punctuation's (and) more

Good: [b](sub/b.md#the-b-page), [here](#a-heading-with-code-punctuations-and-more-1),
[picture](sub/b.md), [web](https://example.org/x.md#nope), [split
text](sub/b.md#the-b-page), `[in code](gone.md)`.
Broken: [gone](gone.md) and [no heading](sub/b.md#no-such-heading).

```sh
[in a block](gone-too.md)
```
EOF
printf '# The B page\n\nBack: [a](../a.md#a-page).\n' >"$tmp/sub/b.md"
out=$(check_links "$tmp/a.md" "$tmp/sub/b.md")
expected="$tmp/a.md: gone.md: no such file
$tmp/a.md: sub/b.md#no-such-heading: no such heading in $tmp/sub/b.md"
[ "$out" = "$expected" ]
report "the link check finds a missing page and a missing heading, and only those" $? \
    "got:"$'\n'"$out"$'\n'"expected:"$'\n'"$expected"

# 2. The tree's pages (those git knows, committed or not).
mapfile -t pages < <(git ls-files --cached --others --exclude-standard '*.md')
out=$(check_links "${pages[@]}")
[ "${#pages[@]}" -gt 0 ] && [ -z "$out" ]
report "every relative link of the ${#pages[@]} pages reaches its file and heading" $? "$out"

# 3. The ACL user of docs/operations.md may run what the lock sends, no more.
acl_h=$(printf '#include "dlock.h"\nDLOCK_ACL_COMMANDS\n' | cc -E -P -Ilock -x c - 2>&1 |
    tail -n 1 | tr -d '"' | tr -s ' ' '\n' | grep . | sort)
acl_doc=$(awk '/ACL SETUSER/ { on = 1 } on && !NF { exit } on' docs/operations.md |
    tr -s ' ' '\n' | grep -E '^[-+]' | sort)
[ -n "$acl_h" ] && [ "$acl_h" = "$acl_doc" ]
report "docs/operations.md's ACL user has exactly DLOCK_ACL_COMMANDS" $? \
    "dlock.h (<) vs docs/operations.md (>):"$'\n'"$(diff <(echo "$acl_h") <(echo "$acl_doc"))"
