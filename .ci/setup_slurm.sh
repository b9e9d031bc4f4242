#!/usr/bin/env bash
# A real single-node SLURM (Debian slurm-wlm + munge) for tests/e2e/test_slurm.py. Idempotent: run it
# again and it only (re)starts what is not running. Needs root; no systemd, no cgroup setup (containers).
#   bash .ci/setup_slurm.sh          # install, configure, start, wait until the node is idle
# Logs: /var/log/slurm/{slurmctld,slurmd}.log. The node is named "localhost" (slurmd -N localhost).
set -euo pipefail

if [ "$(id -u)" != 0 ]; then
  echo "setup_slurm: needs root" >&2
  exit 1
fi

# --- packages --------------------------------------------------------------------------------
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null \
   || ! command -v sbatch >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
fi

# --- munge ------------------------------------------------------------------------------------
install -d -o munge -g munge -m 0700 /etc/munge /var/log/munge
install -d -o munge -g munge -m 0711 /var/lib/munge
install -d -o munge -g munge -m 0755 /run/munge
if [ ! -s /etc/munge/munge.key ]; then
  dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
fi
chown munge:munge /etc/munge/munge.key
chmod 0400 /etc/munge/munge.key
if ! munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
  rm -f /run/munge/munged.pid /run/munge/munge.socket.2*
  runuser -u munge -- /usr/sbin/munged
  for _ in $(seq 50); do munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.2; done
fi

# --- slurm.conf ---------------------------------------------------------------------------------
# CPUs/sockets/memory as slurmd itself detects them (a mismatch drains the node).
hw="$(slurmd -C | head -n1)"
get() { sed -n "s/.*\b$1=\([0-9]*\).*/\1/p" <<<"$hw"; }
cpus="$(get CPUs)"; cpus="${cpus:-$(nproc)}"
sockets="$(get SocketsPerBoard)"; cores="$(get CoresPerSocket)"; threads="$(get ThreadsPerCore)"
mem="$(get RealMemory)"; mem="${mem:-1024}"
mem=$(( mem * 9 / 10 ))   # leave some headroom so the node is never drained for "Low RealMemory"
topo=""
if [ -n "$sockets" ] && [ -n "$cores" ] && [ -n "$threads" ]; then
  topo="Sockets=$sockets CoresPerSocket=$cores ThreadsPerCore=$threads"
fi

install -d -m 0755 /etc/slurm /var/log/slurm /var/spool/slurmctld /var/spool/slurmd
conf=/etc/slurm/slurm.conf
new="$(mktemp)"
cat >"$new" <<EOF
# Written by vtrain/.ci/setup_slurm.sh: one node, no accounting, no cgroups.
ClusterName=vtrain-ci
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPort=6817
SlurmdPort=6818
SlurmdTimeout=300
InactiveLimit=0
KillWait=10
MinJobAge=300
Waittime=0
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus $topo RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
changed=0
if ! cmp -s "$new" "$conf"; then
  install -m 0644 "$new" "$conf"
  changed=1
fi
rm -f "$new"
# No cgroup.conf: slurm 22.05 has no CgroupPlugin=disabled; with proctrack/linuxproc and task/none the
# autodetected cgroup plugin is loaded but never used for jobs.

running() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

if [ "$changed" = 1 ]; then   # a new config: restart the daemons this script started
  for pidf in /run/slurmd.pid /run/slurmctld.pid; do
    if running "$pidf"; then kill "$(cat "$pidf")" || true; sleep 1; fi
  done
fi
running /run/slurmctld.pid || /usr/sbin/slurmctld
running /run/slurmd.pid || /usr/sbin/slurmd -N localhost || {
  echo "setup_slurm: slurmd did not start; last log lines:" >&2; tail -n 5 /var/log/slurm/slurmd.log >&2; exit 1; }

# --- wait until the node is idle -------------------------------------------------------------------
for i in $(seq 60); do
  state="$(sinfo -h -n localhost -o '%T' 2>/dev/null | head -n1 || true)"
  case "$state" in
    idle|mixed|allocated) echo "setup_slurm: node localhost is $state"; sinfo; exit 0 ;;
    down*|drain*|*drain) scontrol update NodeName=localhost State=RESUME >/dev/null 2>&1 || true ;;
  esac
  sleep 1
done
echo "setup_slurm: node not idle after 60 s (state: ${state:-unknown}); see /var/log/slurm/" >&2
sinfo >&2 || true
exit 1
