#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, for tests/test_slurm.py (and for reading how):
# munged, slurmctld and slurmd from Debian's slurm-wlm and munge packages, run as root in the foreground
# of background shells, with everything (key, config, state, logs, sockets) in one folder.
#
#   tests/slurm/cluster.sh start DIR     # then: export SLURM_CONF=DIR/slurm.conf; sinfo; sbatch ...
#   tests/slurm/cluster.sh stop DIR
#
# Packages: apt-get install slurmctld slurmd slurm-client munge (.ci/run installs them when it can).
# The node is this machine: its short hostname at 127.0.0.1, its CPUs (nproc, without the test worker's
# OMP_NUM_THREADS share, which nproc also reads: 1 CPU would leave a 2-worker job pending), memory for the jobs.
set -euo pipefail
cmd=${1:?start or stop}; dir=$(realpath -m "${2:?a folder}")

stop() {
    for name in slurmd slurmctld munged; do
        [ -f "$dir/$name.pid" ] && kill "$(cat "$dir/$name.pid")" 2>/dev/null || true
    done
    return 0
}

if [ "$cmd" = stop ]; then stop; exit 0; fi
[ "$cmd" = start ] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }

mkdir -p "$dir/state" "$dir/spool"
host=$(hostname -s)
port=$((20000 + RANDOM % 20000))  # slurmctld; slurmd on the next port: clusters of parallel runs stay apart
# Job ids apart too: a job's rendezvous port is 10000 + its id (bench submit), so two clusters' job 1 would meet on
# one port. Each pytest-xdist worker's cluster numbers its jobs from its own thousand.
worker=${PYTEST_XDIST_WORKER#gw}
first_job=$((1 + 1000 * (${worker:-0} % 9) + RANDOM % 500))

mungekey --create --keyfile="$dir/munge.key" --force
chmod 600 "$dir/munge.key"
munged --key-file="$dir/munge.key" --socket="$dir/munge.sock" --pid-file="$dir/munged.pid" \
    --log-file="$dir/munged.log" --seed-file="$dir/munge.seed" --force

cat > "$dir/slurm.conf" <<EOF
ClusterName=bench-test
SlurmctldHost=$host(127.0.0.1)
AuthType=auth/munge
AuthInfo=socket=$dir/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$port
FirstJobId=$first_job
SlurmdPort=$((port + 1))
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobRequeue=1
KillWait=60
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) RealMemory=4000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF

export SLURM_CONF="$dir/slurm.conf"
setsid slurmctld -D -f "$SLURM_CONF" > "$dir/slurmctld.out" 2>&1 < /dev/null &
setsid slurmd -D -f "$SLURM_CONF" > "$dir/slurmd.out" 2>&1 < /dev/null &
for _ in $(seq 60); do  # up when the node is idle
    if sinfo -h -o %t 2>/dev/null | grep -qx idle; then echo "SLURM_CONF=$SLURM_CONF"; exit 0; fi
    sleep 0.5
done
echo "the cluster did not come up; see $dir/*.log" >&2
stop
exit 1
