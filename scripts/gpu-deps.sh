#!/usr/bin/env bash
# Download, here (a Debian 12 machine with a package registry), the .deb files that
# scripts/gpu-check.sh unpacks on a bare GPU machine (a CUDA toolkit, CMake and PyTorch,
# no registry): Open MPI, OpenBLAS, cJSON, hwloc, GSL and pkg-config, development files
# and the runtime libraries they need, into .gpu-deps/ (ignored by git; carried to the
# device machine). Packages every glibc system has (libc6, libstdc++6, zlib, ...) are
# left out on purpose: unpacked into a prefix on LD_LIBRARY_PATH they would shadow the
# machine's own. Prints the total size. docs/gpu.md says what it is for.
set -euo pipefail
cd "$(dirname "$0")/.."
out=.gpu-deps
mkdir -p "$out"

# The development packages (headers, .so links, .pc files, mpicc, mpirun), without the
# compilers and other -dev packages they depend on.
dev=(libopenmpi-dev openmpi-bin openmpi-common libopenblas-dev libopenblas-pthread-dev
     libcjson-dev libhwloc-dev libgsl-dev pkgconf pkgconf-bin libpkgconf3 libnuma-dev
     libltdl-dev libevent-dev libpmix-dev libibverbs-dev zlib1g-dev)
# Their runtime libraries: the dependency closure of these, minus the base set below.
runtime=(libopenmpi3 openmpi-bin libopenblas0-pthread libgsl27 libgslcblas0 libhwloc15
         libcjson1 libpkgconf3)
base='^(libc6|libgcc-s1|libstdc\+\+6|gcc-[0-9]+-base|zlib1g|libcrypt1|debconf|cdebconf|dpkg|tar|passwd|adduser|libpam.*|libselinux1|libsemanage.*|libsepol2|libaudit.*|libcap-ng0|libacl1|libbz2-1.0|liblzma5|libzstd1|libpcre2-8-0|libmd0|libbsd0|libdb5.3|readline-common|libreadline8|libtinfo6|install-info|libdebian-installer4|libnewt0.52|libslang2|libtextwrap1|openssh-client|libedit2|libfido2-1|libcbor0.8|libkrb5.*|libgssapi-krb5-2|libk5crypto3|libcom-err2|libkeyutils1|libssl3|libuuid1|libudev1|libhwloc-plugins|ocl-icd-libopencl1|libxnvctrl0|libx11-6|libx11-data|libxau6|libxcb1|libxdmcp6|libxext6|libpciaccess0|libicu72|libxml2)$'
mapfile -t closure < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
  --no-breaks --no-replaces --no-enhances "${runtime[@]}" 2>/dev/null |
  grep -v '^[ <]' | sort -u | grep -Ev "$base")
pkgs=($(printf '%s\n' "${dev[@]}" "${closure[@]}" | sort -u))
echo "gpu-deps: ${#pkgs[@]} packages into $out/"
(cd "$out" && rm -f ./*.deb && apt-get download "${pkgs[@]}" > /dev/null 2>&1) || {
  echo "gpu-deps: apt-get download failed (is there a package registry?)" >&2
  exit 1
}
du -cb "$out"/*.deb | tail -1 | awk '{printf "gpu-deps: %.1f MiB of .deb files\n", $1 / 1048576}'
