#!/usr/bin/env bash
# Stop the single-node CI cluster started by start.sh (slurmd, slurmctld, munged), by pid file.
set -uo pipefail
stop_pidfile() {  # name pidfile
  local pid
  [ -f "$2" ] || return 0
  pid=$(cat "$2" 2>/dev/null)
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    echo "[slurm-ci] stopped $1 ($pid)"
  fi
}
# Only a cluster this folder configured is ours to stop.
if head -1 /etc/slurm/slurm.conf 2>/dev/null | grep -qF "# lze-bench CI single-node cluster"; then
  stop_pidfile slurmd /run/slurmd.pid
  stop_pidfile slurmctld /run/slurmctld.pid
  stop_pidfile munged /run/munge/munged.pid
else
  echo "[slurm-ci] /etc/slurm/slurm.conf is not ours; leaving the cluster alone"
fi
