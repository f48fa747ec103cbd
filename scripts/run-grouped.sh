#!/usr/bin/env bash
# Runs a grouped deployment in the foreground: one arca process per YAML file of a config
# directory (default config/grouped), each log line prefixed with the file's name.
# Ctrl-C or SIGTERM stops them all, proxy first, storage last; if one process exits on its own
# the others are stopped too. Exits 0 only if every process exited 0, otherwise with the
# first non-zero code seen.
#
#   scripts/run-grouped.sh [CONFIG_DIR]      ARCA_BIN=path/to/arca overrides the binary.
#
# Directories of unix:///… endpoints in the files are created first (the processes need them
# to exist).
set -euo pipefail

dir=${1:-config/grouped}
bin=${ARCA_BIN:-./target/release/arca}
# Start order: dependencies first (not required, since a remote dependency is probed rather
# than waited for, but it keeps the startup log free of "unreachable" warnings).
order=(storage-system storage-users frontend proxy)

[[ -x $bin ]] || { echo "run-grouped: $bin not found; build it first (make run-grouped)" >&2; exit 2; }
for group in "${order[@]}"; do
    [[ -f $dir/$group.yaml ]] || { echo "run-grouped: $dir/$group.yaml missing" >&2; exit 2; }
done

# mkdir -p the parent of every unix socket named in the files.
sockets=$(grep -ho 'unix://[^]"'\'' ,]*' "$dir"/*.yaml | sed 's#^unix://##' | sort -u || true)
for socket in $sockets; do
    mkdir -p "$(dirname "$socket")"
done

debug_of() { sed -n '/^debug:/,/^[^ ]/s/^ *addr: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$1"; }

pids=()
names=()
stopping=0
trap 'stopping=1' INT TERM

for group in "${order[@]}"; do
    label=$(printf '%-14s|' "$group")
    # Each process runs in its own session so a terminal Ctrl-C reaches only this script,
    # which then sends exactly one SIGTERM to each (a second signal would force an exit 130).
    # The prefixing sed ignores SIGINT so that it outlives the Ctrl-C and relays the
    # shutdown logs.
    setsid "$bin" server --config "$dir/$group.yaml" \
        > >(trap '' INT; exec sed -u "s/^/$label /") 2>&1 &
    pids+=("$!")
    names+=("$group")
    echo "run-grouped: started $group (pid $!), debug http://$(debug_of "$dir/$group.yaml")/readyz"
done
echo "run-grouped: public http://127.0.0.1:9200 once all are ready; Ctrl-C stops all"

# Wait until a signal arrives or any process exits.
code=0
while (( ! stopping )); do
    unset done_pid
    status=0
    wait -n -p done_pid "${pids[@]}" || status=$?
    [[ -n ${done_pid:-} ]] || continue
    for i in "${!pids[@]}"; do
        if [[ ${pids[$i]} == "$done_pid" ]]; then
            echo "run-grouped: ${names[$i]} exited on its own with $status; stopping the others" >&2
            code=$(( status == 0 ? 1 : status ))
            unset 'pids[i]' 'names[i]'
        fi
    done
    break
done

# Stop the rest, dependants first, one SIGTERM each. A second Ctrl-C forwards SIGINT to
# those still running, which makes them exit at once (code 130).
trap 'kill -INT "${pids[@]}" 2>/dev/null || true' INT TERM
for i in $(printf '%s\n' "${!pids[@]}" | sort -rn); do
    pid=${pids[$i]}
    kill -TERM "$pid" 2>/dev/null || true
    while true; do
        status=0
        wait "$pid" || status=$?
        # wait also returns when a trapped signal arrives; only a reaped process is done.
        kill -0 "$pid" 2>/dev/null || break
    done
    echo "run-grouped: ${names[$i]} exited with $status"
    if (( status != 0 && code == 0 )); then code=$status; fi
    unset 'pids[i]'
done
wait  # for the log relays to flush
exit "$code"
