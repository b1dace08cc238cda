#!/usr/bin/env bash
# Builds the peer allocators that Debian does not package, from the sources their crates.io
# packages bundle, as preloadable shared libraries with stable paths:
#
#   build/peers/libsnmalloc.so   snmalloc's libsnmallocshim.so (its own CMake build), from snmalloc-sys
#   build/peers/librpmalloc.so   rpmalloc.c with ENABLE_PRELOAD/ENABLE_OVERRIDE, from rpmalloc-sys
#   build/peers/versions.json    which crate (and so which bundled sources) each was built from
#
# cargo only downloads the crates (a throwaway project that depends on them, then `cargo fetch`);
# nothing is compiled through cargo. Idempotent: a library already built from the crate version
# that the lock file pins is kept. Works as any user with cargo, a C/C++ compiler, CMake and Ninja.
# Usage: scripts/build_peers.sh [--force]
set -euo pipefail
cd "$(dirname "$0")/.."

# The crate versions, pinned so that every machine measures the same peers.
SNMALLOC_SYS=0.7.6
RPMALLOC_SYS=0.2.3

out=build/peers
force=0
[[ ${1:-} == --force ]] && force=1

stamp_ok() {  # stamp_ok LIB CRATE-VERSION: the library exists and was built from that crate
  [[ $force -eq 0 && -f $1 && -f $1.crate && $(cat "$1.crate") == "$2" ]]
}
if stamp_ok $out/libsnmalloc.so "snmalloc-sys $SNMALLOC_SYS" &&
   stamp_ok $out/librpmalloc.so "rpmalloc-sys $RPMALLOC_SYS" && [[ -f $out/versions.json ]]; then
  exit 0
fi

cargo_bin=$(command -v cargo || true)
[[ -z $cargo_bin && -x $HOME/.cargo/bin/cargo ]] && cargo_bin=$HOME/.cargo/bin/cargo
if [[ -z $cargo_bin ]]; then
  echo "build_peers: cargo is not installed: snmalloc and rpmalloc are not built" >&2
  echo "build_peers: install Rust's cargo (rustup, or: sudo apt-get install cargo), then run scripts/build_peers.sh" >&2
  exit 1
fi
for tool in cmake ninja cc c++; do
  command -v "$tool" >/dev/null || { echo "build_peers: $tool is missing (scripts/setup.sh installs it)" >&2; exit 1; }
done

# Fetch: a throwaway cargo project in a cache directory outside the repository.
cache=${STRATA_PEERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/strata-peers}
mkdir -p "$cache/fetch/src" "$out"
cat > "$cache/fetch/Cargo.toml" <<EOF
[package]
name = "strata-peers-fetch"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
snmalloc-sys = "=$SNMALLOC_SYS"
rpmalloc-sys = "=$RPMALLOC_SYS"
EOF
echo 'fn main() {}' > "$cache/fetch/src/main.rs"
echo "build_peers: fetching snmalloc-sys $SNMALLOC_SYS and rpmalloc-sys $RPMALLOC_SYS with cargo"
"$cargo_bin" fetch -q --manifest-path "$cache/fetch/Cargo.toml"

cargo_home=${CARGO_HOME:-$HOME/.cargo}
crate_dir() {  # crate_dir NAME VERSION-PREFIX: where cargo unpacked it
  local d
  for d in "$cargo_home"/registry/src/*/"$1-$2"*; do
    [[ -d $d ]] && { echo "$d"; return 0; }
  done
  echo "build_peers: cargo fetched $1 $2 but its sources are not under $cargo_home/registry/src" >&2
  return 1
}
# The exact version (rpmalloc-sys carries the upstream commit as build metadata: 0.2.3+b097fd0).
locked_version() {
  awk -v n="$1" '$0 == "name = \"" n "\"" {getline; gsub(/version = |"/, ""); print; exit}' \
    "$cache/fetch/Cargo.lock"
}
sn_src=$(crate_dir snmalloc-sys "$SNMALLOC_SYS")
rp_src=$(crate_dir rpmalloc-sys "$RPMALLOC_SYS")
sn_version=$(locked_version snmalloc-sys)
rp_version=$(locked_version rpmalloc-sys)

jobs=${JOBS:-$(nproc)}

# snmalloc: its CMake's preloadable shim (malloc & co plus operator new/delete), Release build.
if ! stamp_ok $out/libsnmalloc.so "snmalloc-sys $SNMALLOC_SYS"; then
  echo "build_peers: building snmalloc (snmalloc-sys $sn_version) -> $out/libsnmalloc.so"
  bdir=$cache/snmalloc-$sn_version-build
  cmake -S "$sn_src/upstream" -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DSNMALLOC_BUILD_TESTING=OFF -DSNMALLOC_STATIC_LIBRARY=OFF >/dev/null
  cmake --build "$bdir" --target snmallocshim -j "$jobs" >/dev/null
  cp "$bdir/libsnmallocshim.so" "$out/libsnmalloc.so.tmp"  # rename: a running program keeps the old
  mv "$out/libsnmalloc.so.tmp" "$out/libsnmalloc.so"
  echo "snmalloc-sys $SNMALLOC_SYS" > "$out/libsnmalloc.so.crate"
fi

# rpmalloc: rpmalloc.c with its malloc.c overrides compiled in, as its own configure.py builds
# the preloadable librpmallocwrap.so (same defines, -O3, C11).
if ! stamp_ok $out/librpmalloc.so "rpmalloc-sys $RPMALLOC_SYS"; then
  echo "build_peers: building rpmalloc (rpmalloc-sys $rp_version) -> $out/librpmalloc.so"
  cc -std=c11 -O3 -fPIC -shared -D_GNU_SOURCE=1 -DNDEBUG -DBUILD_DYNAMIC_LINK=1 \
     -DENABLE_PRELOAD=1 -DENABLE_OVERRIDE=1 -ftls-model=initial-exec -Wno-attributes \
     -o "$out/librpmalloc.so.tmp" "$rp_src/rpmalloc/rpmalloc/rpmalloc.c" -lpthread
  mv "$out/librpmalloc.so.tmp" "$out/librpmalloc.so"
  echo "rpmalloc-sys $RPMALLOC_SYS" > "$out/librpmalloc.so.crate"
fi

# rpmalloc's release is the first line of its CHANGELOG. snmalloc's sources carry no version: the
# crate is published from snmalloc's own repository with snmalloc's version, and its revision is
# the one the crate records.
rp_release=$(head -n1 "$rp_src/rpmalloc/CHANGELOG" | tr -d '[:space:]')
vcs_sha() { sed -n 's/.*"sha1": *"\([0-9a-f]*\)".*/\1/p' "$1/.cargo_vcs_info.json" 2>/dev/null | head -n1; }
cat > "$out/versions.json.tmp" <<EOF
{
  "snmalloc": {"version": "$sn_version (snmalloc-sys; snmalloc git $(vcs_sha "$sn_src" | cut -c1-12))", "crate": "snmalloc-sys", "crate_version": "$sn_version",
               "crate_git": "$(vcs_sha "$sn_src")", "library": "libsnmalloc.so", "built_from": "upstream/ CMake target snmallocshim, Release"},
  "rpmalloc": {"version": "$rp_release (rpmalloc-sys $rp_version)", "crate": "rpmalloc-sys", "crate_version": "$rp_version",
               "crate_git": "$(vcs_sha "$rp_src")", "library": "librpmalloc.so", "built_from": "rpmalloc.c -O3 -DENABLE_PRELOAD=1 -DENABLE_OVERRIDE=1"}
}
EOF
mv "$out/versions.json.tmp" "$out/versions.json"
echo "build_peers: $out/libsnmalloc.so, $out/librpmalloc.so ($out/versions.json)"
