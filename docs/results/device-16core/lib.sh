# Sourced by run.sh, ab.sh and ../device-16core-s35/e2-host.sh (repository root, $O the output
# folder): the lab from the checkout, the peers of .dev/peers (ALLOC: strata and all of them),
# and step().
PY=${PY:-python3}
export PYTHONPATH=$PWD/lab PYTHONUNBUFFERED=1
P=$PWD/.dev/peers
# strata beside every peer the lab has (the Debian and wheel ones from .dev/peers)
ALLOC="strata,glibc,mimalloc=$P/libmimalloc.so.2,mimalloc3=$P/libmimalloc.so.3,jemalloc=$P/libjemalloc.so.2"
ALLOC="$ALLOC,tcmalloc=$P/libtcmalloc_minimal.so.4,snmalloc,rpmalloc"

step() {  # step NAME LIMIT_S CMD...: runs CMD with a limit, log in $O/NAME.log
  local name=$1 lim=$2 s; shift 2
  s=$(date +%s)
  timeout -k 5 "$lim" "$@" >"$O/$name.log" 2>&1
  echo "== $name: rc=$? in $(($(date +%s) - s)) s" | tee -a "$O/$name.log"
}
