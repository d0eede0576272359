#!/usr/bin/env bash
# What the planner chooses for a framework, that framework can run: for each framework,
# suggest's winner (uneven splits included) exports to the framework's own settings
# (export/<framework>.c refuses what the framework cannot express, e.g. a split that is
# not torchtitan's layers-per-stage rule, or any uneven split for DeepSpeed's
# PipelineModule). Failed before the search knew each framework's split rule: llama3-8b
# on one DGX H100 under torchtitan chose 3,4*4,3*4,1, and DeepSpeed plans had sequence
# parallelism, which DeepSpeed's AutoTP does not offer.
#   suggest_exports.sh DPLAN
set -u
dplan=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bad=0 n=0
for fw in megatron torchtitan deepspeed; do
  for case in "llama3-8b 1" "llama3-8b 4" "llama3-70b 8" "llama3-405b 32" "llama3-405b 64"; do
    set -- $case
    plan=$tmp/$fw-$1-$2.json
    if ! "$dplan" suggest "$1" --system dgx-h100 --nodes "$2" --framework "$fw" -o "$plan" \
      > /dev/null 2> "$tmp/err"; then
      echo "FAIL: suggest $1 --nodes $2 --framework $fw: $(cat "$tmp/err")"
      bad=1
      continue
    fi
    n=$((n + 1))
    if ! "$dplan" export "$plan" --format "$fw" > /dev/null 2> "$tmp/err"; then
      echo "FAIL: $fw cannot run what suggest chose for $1 on $2 nodes: $(cat "$tmp/err")"
      bad=1
    fi
  done
done
[ "$n" -eq 15 ] || { echo "FAIL: $n of 15 suggestions made"; bad=1; }
[ $bad = 0 ] && echo "suggest_exports: 15 winners, each exported to its framework"
exit $bad
