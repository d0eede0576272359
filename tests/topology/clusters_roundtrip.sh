#!/usr/bin/env bash
# The cluster files in clusters/: `dplan topo --topology xml/X.xml -o` must
# reproduce each byte for byte (DPLAN_UPDATE_GOLDEN=1 rewrites them), and the
# planning commands must accept each with --cluster, at 1 and at 4 nodes.
set -u
dplan=$1
cd "$(dirname "$0")" || exit 1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
while read -r xml name; do
  if ! "$dplan" topo --topology "xml/$xml" -o "$tmp/$name.json" > "$tmp/out" 2>&1; then
    echo "topo --topology xml/$xml -o failed:"; cat "$tmp/out"; fail=1; continue
  fi
  if [ "${DPLAN_UPDATE_GOLDEN:-0}" = 1 ]; then
    cp "$tmp/$name.json" "clusters/$name.json"; echo "clusters/$name.json: updated"
  elif ! diff -u "clusters/$name.json" "$tmp/$name.json" > /dev/null; then
    echo "clusters/$name.json differs from what dplan topo writes:"
    diff -u "clusters/$name.json" "$tmp/$name.json" | head -30; fail=1
  fi
  for nodes in 1 4; do
    if ! "$dplan" memory llama2-7b --cluster "clusters/$name.json" --nodes $nodes --tp 8 \
         > "$tmp/out" 2>&1; then
      echo "memory --cluster clusters/$name.json --nodes $nodes failed:"; cat "$tmp/out"; fail=1
    fi
  done
done <<LIST
dgx-h100.xml dgx-h100
dgx-a100.xml dgx-a100
pcie-8x-l40s.xml pcie-8x-l40s
dgx-h100-no-nvml.xml dgx-h100-no-nvlink
LIST
exit $fail
