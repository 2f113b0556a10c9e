# Sourced by the start-cost benches (cpu_isolation.sh, numa_passthrough.sh): one `ch-launcher run`
# of a VMI file, timed from its start to the launcher's own "domain event Started" log line, then
# killed. Needs CHL, VMM, W (a scratch directory holding kernel/guest.elf) and NAME (the bench's
# name, for its errors); the bench prints the load average with its figures.

# median: the median of the numbers on stdin.
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

# start_to_running VMI-FILE CPU-SET [AFTER]: start -> Running in microseconds on stdout. AFTER, a
# command, runs once the VM runs and before the kill (its output to stderr).
start_to_running() {
  rm -rf "$W/state" "$W/run.log"  # else the wait below may read the previous run's log (the shell truncates it only once the background job starts)
  local t0 lp ts t1
  t0=$(( $(date +%s%N) / 1000 ))
  "$CHL" run --vmi "$1" --state-dir "$W/state" --vmm-binary "$VMM" --cpu-set "$2" \
    --volume "kernel-boot=$W/kernel" --log-level info 2> "$W/run.log" &
  lp=$!
  until grep -q '"msg":"domain event Started' "$W/run.log" 2>/dev/null; do
    if ! kill -0 "$lp" 2>/dev/null; then cat "$W/run.log" >&2; echo "$NAME: the launcher ended" >&2; exit 1; fi
    sleep 0.005
  done
  ts=$(grep -m1 '"msg":"domain event Started' "$W/run.log" | sed 's/.*"timestamp":"\([^"]*\)".*/\1/')
  t1=$(date -d "$ts" +%s%6N)
  if [ -n "${3:-}" ]; then $3 >&2 || true; fi
  "$CHL" kill --state-dir "$W/state" > /dev/null
  wait "$lp" 2>/dev/null || true
  echo $((t1 - t0))
}
