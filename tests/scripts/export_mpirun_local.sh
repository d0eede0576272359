#!/usr/bin/env bash
# The exported mpirun script runs: a plan for one node of 4 GPUs, exported with
# --program pointing at a probe that records the torch.distributed variables
# each rank sees; the script runs on localhost (its hostfile line rewritten)
# and every rank must get RANK 0..3, LOCAL_RANK = RANK, WORLD_SIZE 4 and the
# master address and port of the export.
set -eu
dplan=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
"$dplan" suggest tiny-gpt --gpu h100-sxm5-80gb --gpus 4 -o plan.json > /dev/null
cat > probe.sh <<'PROBE'
#!/usr/bin/env bash
echo "$RANK $LOCAL_RANK $WORLD_SIZE $MASTER_ADDR $MASTER_PORT" > "rank_$RANK.txt"
PROBE
chmod +x probe.sh
"$dplan" export plan.json --format mpirun --program ./probe.sh --port 4321 -o launch.sh
grep -q 'exec ./probe.sh' launch.sh
sed -i 's/echo "node$i slots=4"/echo "localhost slots=4"/' launch.sh
grep -q 'localhost slots=4' launch.sh
bash launch.sh
for r in 0 1 2 3; do
  want="$r $r 4 node0 4321"
  got=$(cat "rank_$r.txt")
  [ "$got" = "$want" ] || { echo "rank $r: got \"$got\", want \"$want\""; exit 1; }
done
echo "export mpirun: 4 ranks with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/PORT as exported"
