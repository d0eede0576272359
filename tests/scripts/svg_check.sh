#!/usr/bin/env bash
# Every SVG dplan draws is well-formed XML and renders: for each golden SVG
# (tests/golden/svg_*/expected_stdout, written by `dplan ... --svg -`) and one
# SVG written to a file by each command, parse it with xmllint (libxml2) and
# render it with rsvg-convert (librsvg) to PNG, whose size must be the SVG's.
# Both tools come from scripts/install-deps.sh; a missing one fails the test.
set -u
dplan=$1
golden=$2
for tool in xmllint rsvg-convert; do
  command -v "$tool" > /dev/null || { echo "svg_check: $tool not found (scripts/install-deps.sh installs it)"; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The same pictures written through --svg FILE (the atomic file path, not stdout).
"$dplan" memory llama2-7b --system dgx-h100 --tp 2 --gbs 64 --svg "$tmp/memory.svg" > /dev/null || exit 1
"$dplan" suggest llama2-7b --system dgx-h100 --top 3 --svg "$tmp/suggest.svg" > /dev/null || exit 1
"$dplan" whatif llama2-7b --systems dgx-h100 --nodes 1,2 --svg "$tmp/whatif.svg" > /dev/null || exit 1
"$dplan" simulate llama2-7b --system dgx-h100 --tp 2 --pp 4 --vpp 2 --gbs 16 --svg "$tmp/gantt.svg" > /dev/null || exit 1
"$dplan" simulate llama2-7b --system dgx-h100 --tp 2 --pp 4 --vpp 2 --gbs 16 --framework torchtitan \
  --pipeline-schedule dualpipev --svg "$tmp/gantt-dualpipev.svg" > /dev/null || exit 1
"$dplan" validate --svg "$tmp/validate.svg" > /dev/null || exit 1
ls "$tmp"/*.tmp.* > /dev/null 2>&1 && { echo "svg_check: a temporary file was left behind"; exit 1; }
fail=0 n=0
for svg in "$golden"/svg_*/expected_stdout "$tmp"/*.svg; do
  n=$((n + 1))
  if ! xmllint --noout "$svg" 2> "$tmp/xml.err"; then
    echo "$svg: not well-formed XML:"; head -5 "$tmp/xml.err"; fail=1; continue
  fi
  if ! rsvg-convert "$svg" -o "$tmp/out.png" 2> "$tmp/rsvg.err"; then
    echo "$svg: rsvg-convert failed:"; head -5 "$tmp/rsvg.err"; fail=1; continue
  fi
  # PNG IHDR: width and height as big-endian 32-bit integers at bytes 16..23
  dims=$(od -An -tu1 -j16 -N8 "$tmp/out.png" | awk '{printf "%d %d", $1*16777216+$2*65536+$3*256+$4, $5*16777216+$6*65536+$7*256+$8}')
  want=$(sed -n 's/.*<svg [^>]*width="\([0-9.]*\)" height="\([0-9.]*\)".*/\1 \2/p' "$svg" | head -1 |
         awk '{printf "%d %d", $1 + 0.5, $2 + 0.5}')
  if [ "$dims" != "$want" ]; then
    echo "$svg: rendered $dims px, the SVG says $want"; fail=1
  fi
done
[ "$n" -ge 12 ] || { echo "svg_check: only $n SVGs checked"; exit 1; }
[ $fail = 0 ] && echo "svg_check: $n SVGs well-formed and rendered"
exit $fail
