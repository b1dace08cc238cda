#!/usr/bin/env bash
# Installs what strata needs on a fresh Debian 12 machine: compilers and build tools, GoogleTest,
# the peer allocators (the system's packages) and the programs the experiments drive, then the
# lab's Python virtual environment (with mimalloc 3.x from the cmeel-mimalloc wheel).
# Run as root it installs what is missing; otherwise it names what is missing and fails.
# With --build, only what compiling strata needs (make build): no peers, servers or lab.
set -euo pipefail
cd "$(dirname "$0")/.."

build_debs=(build-essential cmake ninja-build libgtest-dev pkg-config)
if [[ ${1:-} == --build ]]; then
  debs=("${build_debs[@]}")
else
  debs=("${build_debs[@]}"
      libmimalloc2.0 libjemalloc2 libgoogle-perftools4 libtcmalloc-minimal4
      redis-server redis-tools wrk nginx-light
      python3 python3-venv sqlite3 perl jq git clang valgrind chromium nodejs
      openjdk-17-jdk-headless dpkg-dev)   # Java: Spark executors and preload tests; dpkg-dev: make deb
  # python3-venv: Debian's python3 leaves out ensurepip, without which `python3 -m venv` fails.
  # Rust's cargo (bindings/rust, the peers' crates): Debian's unless rustup's is there.
  if ! command -v cargo >/dev/null && [[ ! -x $HOME/.cargo/bin/cargo ]]; then
    debs+=(cargo)
  fi
fi
missing=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -eq 0 ]]; then
    echo "setup: installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
    # The packaged servers must not keep running as system services: the lab starts its own.
    for svc in redis-server nginx; do
      (command -v systemctl >/dev/null && systemctl stop "$svc" >/dev/null 2>&1) || true
      (command -v service >/dev/null && service "$svc" stop >/dev/null 2>&1) || true
    done
  else
    echo "setup: missing Debian packages: ${missing[*]}" >&2
    echo "setup: install them with: sudo apt-get install ${missing[*]}" >&2
    exit 1
  fi
fi
[[ ${1:-} == --build ]] && exit 0

venv=.venv
stamp=$venv/.strata-setup
if [[ ! -f $stamp || lab/pyproject.toml -nt $stamp ]]; then
  echo "setup: preparing the lab's virtual environment in $venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip >/dev/null
  if [[ -f lab/pyproject.toml ]]; then
    "$venv/bin/python" -m pip install -q -e "lab[test,spark]"
  fi
  "$venv/bin/python" -m pip install -q cmeel-mimalloc pytest
  touch "$stamp"
fi
scripts/build_peers.sh || echo "setup: snmalloc/rpmalloc not built (make bench needs them): fix the above, then run scripts/build_peers.sh" >&2
