#!/usr/bin/env bash
# Install Debian's Slurm (controller, node daemon, client) and munge, without the
# optional plugins that `slurm-wlm`'s recommends pull in (keeps CI fast).
# A no-op when they are installed already. Needs root and apt.
set -uo pipefail
if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null \
   && command -v munged >/dev/null; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "[slurm-ci] cannot install Slurm here (needs root and apt-get)"; exit 3
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null && \
  apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null
