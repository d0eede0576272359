#!/usr/bin/env bash
# Install the Debian packages dplan builds and tests with (Debian 12).
# CUDA, cuBLAS and NCCL are optional (-DDPLAN_CUDA=ON) and come with the CUDA toolkit,
# not from here. python3-torch (PyTorch 1.13, CPU) is the reference of the executor's
# training-step test (tests/executor/torch_ref.py; ctest skips it without torch) and of
# the benchmark; it installs into Debian's /usr/bin/python3 (170 packages with its
# dependencies, 580 MB: 52 s on the development machine).
set -euo pipefail
# libxml2-utils (xmllint) and librsvg2-bin (rsvg-convert) check that the SVGs dplan draws
# are well-formed and render (tests/scripts/svg_check.sh). python3 (standard library)
# runs tests/scripts/held_out_unseen.py, the check that the validation's held-out runs are
# not fitted.
pkgs=(build-essential cmake pkg-config clang libclang-rt-dev clang-format
      libcjson-dev libgsl-dev libhwloc-dev hwloc
      libopenmpi-dev openmpi-bin libopenblas-dev libomp-dev
      libxml2-utils librsvg2-bin python3 python3-torch)
sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
echo "dplan dependencies installed"
