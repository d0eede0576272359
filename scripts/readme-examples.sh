#!/usr/bin/env bash
# Check (or, with --update, rewrite) the example outputs in README.md and docs/*.md against the binary.
# An example is a fenced block whose first line is "$ dplan ARGS" (a pipe to head/tail
# is allowed); the rest of the block is that command's output. Run from anywhere:
#   scripts/readme-examples.sh [--update] [BUILD_DIR/dplan] [FILE.md ...]
set -euo pipefail
cd "$(dirname "$0")/.."
update=0
[ "${1:-}" = --update ] && { update=1; shift; }
dplan=${1:-build/dplan}
shift || true
files=("$@")
[ ${#files[@]} -gt 0 ] || files=(README.md docs/*.md)
[ -x "$dplan" ] || { echo "readme-examples: $dplan: not an executable (build first)" >&2; exit 2; }
dplan=$(cd "$(dirname "$dplan")" && pwd)/$(basename "$dplan")
export DPLAN_PROFILES=${DPLAN_PROFILES:-$PWD/profiles}
python3 - "$update" "$dplan" "${files[@]}" <<'PY'
import subprocess, sys
update, dplan, files = sys.argv[1] == "1", sys.argv[2], sys.argv[3:]
bad = total = 0
for path in files:
    fbad = 0
    lines = open(path).read().split("\n")
    out, i, n = [], 0, 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        if line.startswith("```") and i + 1 < len(lines) and lines[i + 1].startswith("$ dplan "):
            cmd = lines[i + 1][2:]
            j = i + 2
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            old = lines[i + 2:j]
            shell = "dplan() { \"$DPLAN_BIN\" \"$@\"; }; " + cmd
            r = subprocess.run(["bash", "-c", shell], capture_output=True, text=True,
                               env={**__import__("os").environ, "DPLAN_BIN": dplan})
            new = r.stdout.rstrip("\n").split("\n")
            n += 1
            if new != old:
                if update:
                    print(f"{path}:{i + 2}: updated: {cmd}")
                else:
                    fbad += 1
                    print(f"{path}:{i + 2}: output differs from the binary's: {cmd}")
                    import difflib
                    for d in list(difflib.unified_diff(old, new, path, "binary", lineterm=""))[:12]:
                        print("    " + d)
            out.append(lines[i + 1])
            out.extend(new if update else old)
            i = j
            continue
        i += 1
    if update:
        open(path, "w").write("\n".join(out))
    if n:
        print(f"{path}: {n} examples checked" + ("" if update else f", {fbad} differ"))
    bad += fbad
    total += n
if total == 0:  # nothing checked: the examples moved away, or the marker changed
    print("no \"$ dplan\" example found in " + " ".join(files))
    bad += 1
sys.exit(1 if bad else 0)
PY
