#!/usr/bin/env bash
# The Docker engine the image lane needs (scripts/test.sh, lane image):
#   docker-engine.sh start   use the engine that answers; else install Debian's docker.io when no
#                            dockerd is installed, start dockerd, and remember that we did
#   docker-engine.sh stop    stop the engine only if `start` started it
# State (dockerd's pid, its log, the "we started it" mark) is in $CHL_ENGINE_STATE
# (/run/chl-docker-engine). Exit 0 when an engine answers (start) or nothing of ours runs (stop).
set -euo pipefail
STATE=${CHL_ENGINE_STATE:-/run/chl-docker-engine}
say() { echo "docker-engine: $*"; }

answers() { docker info >/dev/null 2>&1; }

start() {
  if command -v docker >/dev/null && answers; then
    say "an engine answers already ($(docker version -f '{{.Server.Version}}' 2>/dev/null || echo '?')); not ours to stop"
    return 0
  fi
  if ! command -v dockerd >/dev/null; then
    [ "$(id -u)" -eq 0 ] || { say "no dockerd, and installing docker.io needs root" >&2; return 1; }
    say "installing Debian's docker.io"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q -t bookworm --no-install-recommends docker.io </dev/null >/dev/null
    # The package may have started its own service: use it if it answers (then it is the system's).
    if answers; then say "docker.io's service answers; not ours to stop"; return 0; fi
  fi
  [ "$(id -u)" -eq 0 ] || { say "starting dockerd needs root" >&2; return 1; }
  mkdir -p "$STATE"
  dockerd --pidfile "$STATE/dockerd.pid" >"$STATE/dockerd.log" 2>&1 </dev/null &
  echo $! >"$STATE/started"
  for _ in $(seq 1 120); do
    if answers; then
      say "started dockerd (pid $(cat "$STATE/started"), log $STATE/dockerd.log)"
      return 0
    fi
    if ! kill -0 "$(cat "$STATE/started")" 2>/dev/null; then
      say "dockerd exited at start:" >&2
      tail -n 20 "$STATE/dockerd.log" >&2
      rm -f "$STATE/started"
      return 1
    fi
    sleep 0.5
  done
  say "dockerd did not answer within 60 s (log: $STATE/dockerd.log)" >&2
  return 1
}

stop() {
  [ -f "$STATE/started" ] || { say "no engine of ours to stop"; return 0; }
  local pid
  pid=$(cat "$STATE/started")
  rm -f "$STATE/started"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$pid" 2>/dev/null && { say "dockerd $pid ignored SIGTERM for 30 s: killing it"; kill -KILL "$pid"; }
  fi
  say "stopped the dockerd we started ($pid)"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: docker-engine.sh start|stop" >&2; exit 2 ;;
esac
