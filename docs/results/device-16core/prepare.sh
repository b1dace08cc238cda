#!/bin/bash
# Prepares a device call of run.sh or ab.sh, from the repository root on the 2-core VM:
#   prepare.sh           builds strata and the peers here, copies the peers the device lacks
#                        (Debian's mimalloc 2, jemalloc, tcmalloc; the wheel's mimalloc 3) into
#                        .dev/peers, and ignores .dev/ (.git/info/exclude)
#   prepare.sh untrack   takes docs/results' JSON and HTML documents out of the index and ignores
#                        them, so that the tree the device tool sends fits its 64 MiB
#   prepare.sh restore   puts them back (git reset; the exclude lines removed)
# Carry: build/bin build/lib build/peers build/lab .dev
set -eu
X=.git/info/exclude
case "${1:-}" in
  untrack)
    git ls-files 'docs/results/*.json' 'docs/results/*.html' > /tmp/strata-untracked.txt
    printf '/docs/results/**/*.json\n/docs/results/**/*.html\n' >> "$X"
    git rm -q --cached --pathspec-from-file=/tmp/strata-untracked.txt
    echo "untracked $(wc -l < /tmp/strata-untracked.txt) documents; run '$0 restore' after the call"
    ;;
  restore)
    git reset -q
    sed -i '\|^/docs/results/\*\*/\*\.json$|d; \|^/docs/results/\*\*/\*\.html$|d' "$X"
    git status --short | head
    ;;
  "")
    cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build build
    [ -f build/peers/libsnmalloc.so ] && [ -f build/peers/librpmalloc.so ] || scripts/build_peers.sh
    mkdir -p .dev/peers
    grep -qx '/.dev/' "$X" || echo '/.dev/' >> "$X"
    for so in libmimalloc.so.2 libjemalloc.so.2 libtcmalloc_minimal.so.4; do
      cp -L "/usr/lib/x86_64-linux-gnu/$so" .dev/peers/
    done
    cp -L .venv/lib/python3*/site-packages/cmeel.prefix/lib/libmimalloc.so.3 .dev/peers/
    ls -la .dev/peers
    ;;
  *) echo "usage: $0 [untrack|restore]" >&2; exit 2 ;;
esac
