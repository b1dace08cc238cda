# Sourced by run.sh and ab.sh (repository root, $O the output folder): the lab from the checkout,
# the peers of .dev/peers, and step().
PY=${PY:-python3}
export PYTHONPATH=$PWD/lab PYTHONUNBUFFERED=1
P=$PWD/.dev/peers

step() {  # step NAME LIMIT_S CMD...: runs CMD with a limit, log in $O/NAME.log
  local name=$1 lim=$2 s; shift 2
  s=$(date +%s)
  timeout -k 5 "$lim" "$@" >"$O/$name.log" 2>&1
  echo "== $name: rc=$? in $(($(date +%s) - s)) s" | tee -a "$O/$name.log"
}
