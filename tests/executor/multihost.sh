#!/usr/bin/env bash
# Two hosts on one machine: `dplan run --hostfile` across two network namespaces, a rank
# of the second host killed and the job restarted from its checkpoint.
#   multihost.sh DPLAN RUNS_DIR
# Each "host" is a network namespace with its own address on a veth pair, bridged in the
# root namespace (where mpirun runs). mpirun's remote agent (plm_rsh_agent) is a script
# that enters the host's namespace instead of ssh'ing to it; the ranks talk over MPI's TCP
# transport on the veths only (btl tcp,self: no shared memory between the hosts). Real
# clusters set the same through a hostfile and ssh, or a Slurm allocation (README
# "Several hosts"). Skipped (exit 77) without root, ip(8), network namespaces or mpirun.
set -u
dplan=$1 runs=$2
skip() { echo "SKIP multihost: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root (ip netns)"
command -v ip > /dev/null || skip "no ip(8)"
command -v "${DPLAN_MPIRUN:-mpirun}" > /dev/null || skip "no mpirun"
rm -rf "$runs"
mkdir -p "$runs"
cd "$runs" || exit 1
fail=0
bad() { echo "FAIL multihost: $*"; fail=1; }
has() { grep -Eq -- "$2" "$1" || { bad "$3: $1 lacks /$2/"; tail -5 "$1"; }; }

# Names and a subnet of this run's own, so that concurrent runs do not meet.
id=$(($$ % 10000))
net="10.$((200 + id % 50)).$((id / 50 % 250))"
br="dpl${id}br"
ns=("dpl${id}h0" "dpl${id}h1")
cleanup() {
  for n in "${ns[@]}"; do ip netns del "$n" 2> /dev/null; done
  ip link del "$br" 2> /dev/null
}
trap cleanup EXIT
ip netns add "${ns[0]}" 2> /dev/null || skip "cannot create a network namespace"
ip netns add "${ns[1]}" && ip link add "$br" type bridge && ip addr add "$net.1/24" dev "$br" &&
  ip link set "$br" up || skip "cannot set up the bridge"
for i in 0 1; do
  ip link add "dpl${id}v$i" type veth peer name eth0 netns "${ns[$i]}" &&
    ip link set "dpl${id}v$i" master "$br" && ip link set "dpl${id}v$i" up &&
    ip -n "${ns[$i]}" addr add "$net.$((i + 2))/24" dev eth0 &&
    ip -n "${ns[$i]}" link set eth0 up && ip -n "${ns[$i]}" link set lo up ||
    skip "cannot set up the veth of ${ns[$i]}"
done

# mpirun calls "AGENT HOST COMMAND...": run COMMAND in HOST's namespace, and say so.
cat > agent.sh << AGENT
#!/bin/sh
host=\$1; shift
case \$host in
$net.2) n=${ns[0]} ;;
$net.3) n=${ns[1]} ;;
*) echo "agent: unknown host \$host" >&2; exit 1 ;;
esac
echo "\$host \$n" >> "$PWD/agent.log"
exec ip netns exec "\$n" sh -c "\$*"
AGENT
chmod +x agent.sh
printf '%s slots=2\n%s slots=2\n' "$net.2" "$net.3" > hosts

ARGS=(tiny-gpt --steps 10 --gbs 8 --seq-len 32 --dp 4)
# The reference: the same job on this machine, uninterrupted.
"$dplan" run "${ARGS[@]}" --out ref > ref.out 2> ref.err || { bad "reference run failed"; tail ref.err; }

# routed=direct: each daemon talks to mpirun itself (Open MPI 4.1 failed to route to the
# second host's daemon on a relaunch otherwise: "ORTE does not know how to route").
export OMPI_MCA_plm_rsh_agent=$PWD/agent.sh OMPI_MCA_btl=tcp,self OMPI_MCA_routed=direct
export OMPI_MCA_oob_tcp_if_include=$net.0/24 OMPI_MCA_btl_tcp_if_include=$net.0/24
"$dplan" run "${ARGS[@]}" --hostfile hosts --ranks-per-node 2 --dry-run > dry.out 2>&1
has dry.out "mpirun -np 4 --hostfile HOSTFILE --map-by ppr:2:node" "--dry-run's mpirun line"
has dry.out "srun --ntasks=4 --ntasks-per-node=2" "--dry-run's Slurm line"
# Rank 3 lives on the second host (ppr:2:node: ranks 2 and 3); it is killed at step 7.
# Open MPI's daemon wire-up over the veths sometimes fails, on the first launch or on the
# relaunch, before that launch's ranks start (mpirun
# dies with signal 11 after "ORTE does not know how to route" or "an inability to create a
# connection back to mpirun", in about one run of three on the loaded 2-core machine): that
# launch is Open MPI's, not the job's (the log's failed record says "reason":"launch", and
# the restart it costs leaves the injected kill untested), so the whole scenario is retried
# (at most five times, and said) only then; any other failure counts. Three tries were not
# enough once in session 8's CI (all three launches failed so, the host slowing this VM).
for try in 1 2 3 4 5 6; do
  rm -rf ck mh agent.log
  DPLAN_FAULT_INJECT=3:7:kill "$dplan" run "${ARGS[@]}" --hostfile hosts --ranks-per-node 2 \
    --ckpt-dir ck --ckpt-every 5 --max-restarts 1 --out mh > mh.out 2> mh.err
  rc=$?
  [ "$try" -lt 6 ] && grep -q '"reason":"launch"' mh/log.jsonl 2> /dev/null || break
  echo "multihost: Open MPI failed to launch its daemons over the veths (try $try): again"
done
[ "$rc" = 0 ] || { bad "multi-host run: exit $rc"; tail -20 mh.err; }
# Two launches (the first and the restart), each starting one daemon in each namespace.
for n in "${ns[@]}"; do
  [ "$(grep -c " $n\$" agent.log 2> /dev/null)" = 2 ] || bad "$n: not entered twice ($(cat agent.log 2> /dev/null))"
done
has mh/log.jsonl '"status":"failed","rank":3,"step":7,"reason":"signal"' "failed record"
has mh/log.jsonl '"status":"restarting","restart":1,.*"resume_step":5' "restarting record"
has mh/log.jsonl '"status":"finished".*"restarts":1' "finished record"
# The checkpoints hold a shard of every rank: ranks 0 and 1 wrote theirs from the first
# host, 2 and 3 from the second.
for s in 5 10; do
  d=ck/step_$(printf %08d $s)
  [ "$(ls "$d" 2> /dev/null | grep -c '^rank_0000[0-3].safetensors$')" = 4 ] || bad "$d: not 4 shards"
done
# Over TCP between namespaces, restarted from step 5: the same weights, to the bit.
cmp -s ref/model.safetensors mh/model.safetensors ||
  bad "mh/model.safetensors differs from the one-machine run's"
[ "$fail" = 0 ] && echo "multihost: 4 ranks on 2 namespaces ($net.2, $net.3), rank 3 killed at step 7, restarted from step 5: final weights bit-identical to the one-machine run"
exit $fail
