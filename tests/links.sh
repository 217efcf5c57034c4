#!/usr/bin/env bash
# tests/links.sh - every relative link in the repository's Markdown resolves.
#
#   bash tests/links.sh          self-test, then every *.md file git knows (tracked,
#                                or new and not ignored) in this repository
#   bash tests/links.sh DIR      only the *.md files under DIR, DIR being the root
#
# A link is [text](target), ![alt](target) or a reference definition
# "[id]: target", outside fenced code blocks and code spans. Absolute links
# (http:, https:, mailto:, any scheme) are not checked. A relative target must
# name a file or directory inside the root (a path that climbs out of it is
# broken even where it exists: a clone has only the repository), and its
# #anchor must be a heading of the target Markdown file (or of this file, for a
# bare #anchor), under GitHub's rule: the heading's text as rendered (code
# spans keep their text, emphasis, links and HTML tags drop their markup),
# lowercased, every character that is not a letter, digit, space, '-' or '_'
# dropped (so `>>trace` gives "trace"), each space a '-'; a repeated slug gets
# -1, -2, ... in order. <a name="x"> and id="x" count as anchors too. An anchor
# into a file that is not Markdown must be a line anchor (#L10, #L10-L20).
#
# Each broken link is printed as "FILE:LINE: TARGET -> why"; the last line is
# "links: N passed, N failed" (N passed: the links that resolve, plus the
# self-test's checks), and the exit status is non-zero when anything failed.
set -uo pipefail

self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")

# md_scan FILE...: one record per heading anchor ("H<TAB>file<TAB>slug") and per
# link ("L<TAB>file<TAB>line<TAB>target"), files relative to the current dir.
md_scan() {
    # shellcheck disable=SC1112 # the typographic quotes are characters the slug drops
    awk '
    function flush_file() { infence = 0; prev = "" }
    function hashes(s) { sub(/^ */, "", s); match(s, /^#+/); return RLENGTH }
    function alnum(c) { return c ~ /^[A-Za-z0-9]$/ }
    # underscores of emphasis (_x_, __x__) are markup; inside a word (snake_case) text
    function unemphasize(s,    i, j, out, before, after) {
        out = ""
        for (i = 1; i <= length(s); i = j + 1) {
            j = i
            if (substr(s, i, 1) != "_") { out = out substr(s, i, 1); continue }
            while (substr(s, j + 1, 1) == "_") j++
            before = i > 1 ? substr(s, i - 1, 1) : ""
            after = substr(s, j + 1, 1)
            if (alnum(before) && alnum(after)) out = out substr(s, i, j - i + 1)
        }
        return out
    }
    # the text of a heading as rendered, then GitHub slugged
    function slug(t,    out, seg, n, i, c, code, punct, pieces, k) {
        gsub(/\t/, " ", t)
        # [text](url) -> text
        while (match(t, /\[[^\]]*\]\([^)]*\)/)) {
            seg = substr(t, RSTART + 1, RLENGTH - 1)
            sub(/\]\(.*$/, "", seg)
            t = substr(t, 1, RSTART - 1) seg substr(t, RSTART + RLENGTH)
        }
        # split into code spans (kept as written) and the rest (markup dropped)
        out = ""
        n = split(t, pieces, "`")
        for (k = 1; k <= n; k++) {
            seg = pieces[k]
            if (k % 2 == 1 || k == n) { # outside a code span
                gsub(/<[A-Za-z\/][^>]*>/, "", seg)             # HTML tags
                gsub(/\\/, "", seg)                            # backslash escapes
                seg = unemphasize(seg)
            }
            out = out seg
        }
        t = tolower(out)
        # drop punctuation and symbols: ASCII, then the common non-ASCII ones
        punct = "!\"#$%&'"'"'()*+,./:;<=>?@[\\]^`{|}~"
        out = ""
        for (i = 1; i <= length(t); i++) {
            c = substr(t, i, 1)
            if (index(punct, c) == 0) out = out c
        }
        gsub(/—|–|→|←|’|‘|“|”|…|×|≤|≥|·|•|±|≈|≠|°|©|§/, "", out)
        gsub(/ /, "-", out)
        return out
    }
    # a heading: its text trimmed, slugged, numbered when the slug repeats
    function heading(text,    s, base) {
        sub(/[ \t]+#+[ \t]*$/, "", text)   # closing #s
        sub(/^[ \t]+/, "", text); sub(/[ \t]+$/, "", text)
        s = slug(text)
        base = s
        if ((FILENAME, base) in seen) { seen[FILENAME, base]++; s = base "-" seen[FILENAME, base] }
        else seen[FILENAME, base] = 0
        printf "H\t%s\t%s\n", FILENAME, s
    }
    FNR == 1 { flush_file() }
    {
        line = $0
        # fenced code blocks: ``` or ~~~, closed by the same character, at least as long
        if (infence) {
            if (line ~ /^ ? ? ?(```+|~~~+)[ \t]*$/) {
                f = line; sub(/^ +/, "", f); sub(/[ \t]+$/, "", f)
                if (substr(f, 1, 1) == fchar && length(f) >= flen) infence = 0
            }
            prev = ""
            next
        }
        if (match(line, /^ ? ? ?(```+|~~~+)/)) {
            f = substr(line, RSTART, RLENGTH); sub(/^ +/, "", f)
            fchar = substr(f, 1, 1); flen = length(f); infence = 1; prev = ""
            next
        }
        if (line ~ /^(    |\t)/ && prev == "") next             # indented code block
        # headings: ATX (# ...) and setext (text, then === or ---)
        if (line ~ /^ ? ? ?#+([ \t]|$)/ && hashes(line) <= 6) {
            text = line; sub(/^ ? ? ?#+/, "", text); heading(text); prev = ""
        } else if (prev != "" && (line ~ /^ ? ? ?=+[ \t]*$/ || line ~ /^ ? ? ?-+[ \t]*$/)) {
            heading(prev); prev = ""; next
        }
        # explicit anchors
        s = line
        while (match(s, /<a[ \t][^>]*(name|id)="[^"]*"/)) {
            a = substr(s, RSTART, RLENGTH); sub(/^.*(name|id)="/, "", a); sub(/"$/, "", a)
            printf "H\t%s\t%s\n", FILENAME, a
            s = substr(s, RSTART + RLENGTH)
        }
        # links, outside code spans (`...` and ``...``)
        s = line
        gsub(/``[^`]*``/, " ", s)
        gsub(/`[^`]*`/, " ", s)
        if (match(s, /^ ? ? ?\[[^\]]+\]:[ \t]*[^ \t]+/)) {         # reference definition
            t = substr(s, RSTART, RLENGTH); sub(/^[^\]]*\]:[ \t]*/, "", t)
            sub(/^</, "", t); sub(/>$/, "", t)
            printf "L\t%s\t%d\t%s\n", FILENAME, FNR, t
        }
        while (match(s, /\]\([^)]*\)/)) {
            t = substr(s, RSTART + 2, RLENGTH - 3)
            s = substr(s, RSTART + RLENGTH)
            sub(/^[ \t]+/, "", t)
            if (substr(t, 1, 1) == "<") { sub(/^</, "", t); sub(/>.*$/, "", t) }
            else sub(/[ \t].*$/, "", t)                         # a title follows
            if (t != "") printf "L\t%s\t%d\t%s\n", FILENAME, FNR, t
        }
        prev = (line ~ /^[ \t]*$/ || line ~ /^ ? ? ?#/) ? "" : line
    }
    ' "$@"
}

# normalize PATH: resolve "." and ".." textually; prints "" when it climbs above the start
normalize() {
    local IFS=/ part out=()
    for part in $1; do
        case $part in
        '' | .) ;;
        ..)
            [ ${#out[@]} -gt 0 ] || { echo ""; return; }
            unset 'out[${#out[@]}-1]'
            ;;
        *) out+=("$part") ;;
        esac
    done
    local joined=${out[*]:-}
    echo "${joined:-.}"
}

# check_dir ROOT: check every Markdown file under ROOT; prints the broken links,
# then "links: N passed, N failed" for them.
check_dir() {
    local root=$1 files=() f
    cd "$root" || { echo "links: 0 passed, 1 failed"; return 1; }
    if [ -z "${LINKS_NO_GIT:-}" ] && git rev-parse --show-toplevel >/dev/null 2>&1 &&
        [ "$(git rev-parse --show-toplevel)" = "$(pwd -P)" ]; then
        while IFS= read -r f; do [ -f "$f" ] && files+=("$f"); done \
            < <(git ls-files --cached --others --exclude-standard -- '*.md')
    else
        while IFS= read -r f; do files+=("${f#./}"); done \
            < <(find . -name .git -prune -o -name build -prune -o -type f -name '*.md' -print | sort)
    fi
    local passed=0 failed=0
    if [ ${#files[@]} -eq 0 ]; then
        echo "links: 0 passed, 0 failed (no Markdown files)"
        return 0
    fi
    declare -A anchors=() scanned=()
    local kind a b c
    local links=()
    while IFS=$'\t' read -r kind a b c; do
        if [ "$kind" = H ]; then
            anchors["$a#$b"]=1
            scanned["$a"]=1
        else
            links+=("$a"$'\t'"$b"$'\t'"$c")
        fi
    done < <(md_scan "${files[@]}")
    for f in "${files[@]}"; do scanned["$f"]=1; done

    local rec file line target path anchor dir resolved why
    for rec in "${links[@]}"; do
        IFS=$'\t' read -r file line target <<<"$rec"
        why=""
        case $target in
        [A-Za-z]*:*)
            # a scheme (http:, https:, mailto:, ...): not checked
            scheme=${target%%:*}
            case $scheme in *[!A-Za-z0-9+.-]*) ;; *) continue ;; esac
            ;;
        //*) continue ;;
        esac
        path=${target%%#*}
        anchor=""
        [ "$path" = "$target" ] || anchor=${target#*#}
        path=${path%%\?*}
        path=${path//%20/ }
        if [ -z "$path" ]; then
            resolved=$file
        else
            case $path in
            /*) resolved=$(normalize "$path") ;;
            *)
                dir=$(dirname "$file")
                resolved=$(normalize "$dir/$path")
                ;;
            esac
        fi
        if [ -z "$resolved" ]; then
            why="outside the repository"
        elif [ ! -e "$resolved" ]; then
            why="no such file: $resolved"
        elif [ -n "$anchor" ]; then
            if [ -d "$resolved" ]; then
                why="an anchor on a directory"
            elif [[ $resolved == *.md ]]; then
                if [ -z "${scanned[$resolved]:-}" ]; then
                    while IFS=$'\t' read -r kind a b _; do
                        [ "$kind" = H ] && anchors["$a#$b"]=1
                    done < <(md_scan "$resolved")
                    scanned["$resolved"]=1
                fi
                [ -n "${anchors["$resolved#$anchor"]:-}" ] || why="no heading '#$anchor' in $resolved"
            elif ! [[ $anchor =~ ^L[0-9]+(-L[0-9]+)?$ ]]; then
                why="an anchor into $resolved, which is not Markdown (only #L<n> line anchors)"
            fi
        fi
        if [ -n "$why" ]; then
            echo "$file:$line: $target -> $why"
            failed=$((failed + 1))
        else
            passed=$((passed + 1))
        fi
    done
    echo "links: $passed passed, $failed failed (${#files[@]} files)"
    [ "$failed" -eq 0 ]
}

# self_test: a directory with good links and broken ones; the checker must report
# exactly the broken ones, each on its line, and fail.
self_test() {
    local tmp out rc want got
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/links_test.XXXXXX") || return 1
    mkdir -p "$tmp/docs" "$tmp/sub"
    cat >"$tmp/README.md" <<'EOF'
# Title

## Sharded checkpoints (`par_params_save` / `par_params_load`)
## Traces (`>>trace`): per-rank timelines
## Dup
## Dup
Setext heading
--------------

[good file](docs/guide.md) and [good anchor](docs/guide.md#a-guide-heading)
[same file](#sharded-checkpoints-par_params_save--par_params_load) [code](#traces-trace-per-rank-timelines)
[second dup](#dup-1) [setext](#setext-heading) [dir](sub) [line](code.c#L3)
[missing file](docs/missing.md)
[missing anchor](docs/guide.md#no-such-heading) and [web](https://example.com/x.md#nope)
`[in a code span](nowhere.md)`
[outside](../README.md)
[dup past the count](#dup-2)

```
[in a fence](nowhere.md)
```
EOF
    cat >"$tmp/docs/guide.md" <<'EOF'
# A guide heading

Back to [the top](../README.md#title), [a subdir](../sub/deep.md#deep).
[ref]: ../README.md#nope
EOF
    printf '# Deep\n' >"$tmp/sub/deep.md"
    printf 'int x;\n' >"$tmp/code.c"
    out=$(LINKS_NO_GIT=1 bash "$self" "$tmp" 2>&1)
    rc=$?
    want=$(printf '%s\n' \
        "README.md:13: docs/missing.md" \
        "README.md:14: docs/guide.md#no-such-heading" \
        "README.md:16: ../README.md" \
        "README.md:17: #dup-2" \
        "docs/guide.md:4: ../README.md#nope")
    got=$(grep -- ' -> ' <<<"$out" | sed 's/ -> .*//' | sort)
    rm -rf "$tmp"
    st_passed=0 st_failed=0
    if [ "$got" = "$(sort <<<"$want")" ]; then
        st_passed=$((st_passed + 1))
    else
        st_failed=$((st_failed + 1))
        echo "self-test: expected exactly these broken links:"
        # shellcheck disable=SC2001
        sed 's/^/  /' <<<"$want"
        echo "self-test: the checker reported:"
        # shellcheck disable=SC2001
        sed 's/^/  /' <<<"$out"
    fi
    if [ "$rc" -ne 0 ] && grep -q '^links: 10 passed, 5 failed' <<<"$out"; then
        st_passed=$((st_passed + 1))
    else
        st_failed=$((st_failed + 1))
        echo "self-test: expected exit status non-zero and 'links: 10 passed, 5 failed', got $rc and: $(tail -n 1 <<<"$out")"
    fi
}

if [ $# -ge 1 ]; then
    check_dir "$1"
    exit
fi

self_test
root=$(cd "$(dirname "$0")/.." && pwd)
result=$(check_dir "$root")
rc=$?
grep -v '^links: ' <<<"$result"
summary=$(grep '^links: ' <<<"$result" | tail -n 1)
p=$(sed -E 's/^links: ([0-9]+) passed, ([0-9]+) failed.*/\1/' <<<"$summary")
f=$(sed -E 's/^links: ([0-9]+) passed, ([0-9]+) failed.*/\2/' <<<"$summary")
[ -n "$p" ] || { p=0 f=1; }
[ "$rc" -eq 0 ] || [ "$f" -gt 0 ] || f=1
echo "self-test: $st_passed passed, $st_failed failed; $summary"
echo "links: $((p + st_passed)) passed, $((f + st_failed)) failed"
[ $((f + st_failed)) -eq 0 ]
