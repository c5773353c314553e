#!/usr/bin/env bash
# Start a single-node Slurm cluster on localhost for CI: munged, slurmctld, slurmd.
#
# Idempotent: daemons already running are left alone; the config is rewritten
# only when it is ours (first line marker), never over a real cluster's.
# Needs root and Debian's packages `slurm-wlm munge` (see install.sh).
# Exit status 0 when `sinfo` shows the node idle; non-zero (and the logs) otherwise,
# so the caller can decide to go on without Slurm (tests then skip, saying why).
set -uo pipefail

MARKER="# lze-bench CI single-node cluster (.ci/slurm/start.sh)"
CONF_DIR=/etc/slurm
CONF="$CONF_DIR/slurm.conf"
LOG_DIR=/var/log/slurm
STATE_DIR=/var/spool/slurmctld
SPOOL_DIR=/var/spool/slurmd

say() { echo "[slurm-ci] $*"; }

for tool in munged slurmctld slurmd sinfo; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    say "missing $tool: install Debian's slurm-wlm and munge (.ci/slurm/install.sh)"; exit 3
  fi
done
if [ "$(id -u)" != 0 ]; then say "must run as root (it writes $CONF and starts daemons)"; exit 3; fi

# --- munge: the authentication daemon every Slurm daemon and client talks to
mkdir -p /etc/munge /var/lib/munge /var/log/munge /run/munge
if [ ! -s /etc/munge/munge.key ]; then
  say "creating /etc/munge/munge.key"
  dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
fi
chown -R munge:munge /etc/munge /var/lib/munge /var/log/munge /run/munge
chmod 0700 /etc/munge; chmod 0400 /etc/munge/munge.key
if ! pgrep -x munged >/dev/null; then
  runuser -u munge -- /usr/sbin/munged || { say "munged failed to start"; exit 4; }
fi
for _ in $(seq 20); do munge -n >/dev/null 2>&1 && break; sleep 0.25; done
munge -n | unmunge >/dev/null 2>&1 || { say "munge round trip failed"; exit 4; }

# --- slurm.conf: this machine as the only node, its real CPUs and memory (slurmd -C),
# no cgroups (containers rarely allow them), no accounting daemon (not needed for sbatch/squeue).
if [ -f "$CONF" ] && ! head -1 "$CONF" | grep -qF "$MARKER"; then
  say "$CONF exists and is not ours: using it as it is"
else
  NODE_LINE=$(slurmd -C | head -1)           # NodeName=<host> CPUs=... RealMemory=...
  HOST=$(echo "$NODE_LINE" | sed -E 's/^NodeName=([^ ]+).*/\1/')
  mkdir -p "$CONF_DIR"
  cat > "$CONF.tmp" <<CONF_EOF
$MARKER
ClusterName=lzeci
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$STATE_DIR
SlurmdSpoolDir=$SPOOL_DIR
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=300
KillWait=5
Waittime=0
$NODE_LINE NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF_EOF
  mv "$CONF.tmp" "$CONF"
fi
mkdir -p "$LOG_DIR" "$STATE_DIR" "$SPOOL_DIR"

# --- daemons (-c: clear saved state; a stale state from an old config confuses slurmctld)
if ! pgrep -x slurmctld >/dev/null; then slurmctld -c || { say "slurmctld failed to start"; tail -20 "$LOG_DIR/slurmctld.log"; exit 5; }; fi
if ! pgrep -x slurmd >/dev/null; then slurmd -c || { say "slurmd failed to start"; tail -20 "$LOG_DIR/slurmd.log"; exit 5; }; fi

# --- wait until the node is usable (idle/mixed/allocated), at most ~30 s
for _ in $(seq 60); do
  state=$(sinfo -h -N -o '%t' 2>/dev/null | head -1)
  case "$state" in
    idle|mix|alloc|idle\*) say "cluster up: $(sinfo -h -o '%P %D %t %c' | head -1)"; exit 0;;
    drain*|down*) scontrol update nodename="$(sinfo -h -N -o '%N' | head -1)" state=resume >/dev/null 2>&1;;
  esac
  sleep 0.5
done
say "the node did not become idle (state: ${state:-none})"
sinfo -N -l 2>&1 | tail -3; tail -20 "$LOG_DIR/slurmctld.log" "$LOG_DIR/slurmd.log" 2>/dev/null
exit 6
