#!/usr/bin/env bash
# Run torch_ref.py (dplan's training steps against PyTorch) with a Python that has torch:
# $DPLAN_PYTHON if set, else Debian's /usr/bin/python3 (python3-torch installs there; a
# pyenv or virtualenv python3 first in PATH usually lacks it), else python3 from PATH.
# Exit 77 (ctest: skipped) when none imports torch, or 1 when DPLAN_REQUIRE_TORCH=1 (.ci/run
# sets it: CI installs python3-torch, so a skip there would hide a broken install).
#   torch_ref.sh DPLAN OUT_DIR MODEL
set -u
here=$(dirname "$0")
for py in ${DPLAN_PYTHON:-} /usr/bin/python3 python3; do
  if command -v "$py" > /dev/null 2>&1 && "$py" -c 'import torch' > /dev/null 2>&1; then
    exec "$py" "$here/torch_ref.py" "$@"
  fi
done
if [ "${DPLAN_REQUIRE_TORCH:-0}" = 1 ]; then
  echo "torch_ref: no Python with torch, and DPLAN_REQUIRE_TORCH=1 (Debian: apt-get install python3-torch; or set DPLAN_PYTHON)"
  exit 1
fi
echo "torch_ref: no Python with torch (Debian: apt-get install python3-torch; or set DPLAN_PYTHON): skipped"
exit 77
