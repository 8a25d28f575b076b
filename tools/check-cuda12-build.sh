#!/bin/sh
# Builds moesim-calibrate with a CUDA 12 toolkit, on a machine that has none: a Debian 13 (trixie)
# minbase chroot with Debian's nvidia-cuda-toolkit 12.4 (contrib/non-free), the calibrator alone
# (MOESIM_CALIBRATE_ONLY=ON: neither SimGrid nor GLPK is installed there), NCCL's header copied in from
# NCCL_INCLUDE (no NCCL package in Debian). Prints --version, a dry run and the libraries it loads.
# Needs root, debootstrap and a Debian mirror; about 2 GB of disk and 10 minutes on 2 cores.
# Usage: sh tools/check-cuda12-build.sh [CHROOT_DIR] (default /srv/moesim-trixie; kept for reruns)
set -eu
root=${1:-/srv/moesim-trixie}
mirror=${MIRROR:-http://deb.debian.org/debian}
nccl_include=${NCCL_INCLUDE:-/usr/local/cuda/include}
src=$(cd "$(dirname "$0")/.." && pwd)
[ "$(id -u)" -eq 0 ] || { echo "check-cuda12-build: needs root (debootstrap, chroot)" >&2; exit 2; }
[ -f "$nccl_include/nccl.h" ] || { echo "check-cuda12-build: no nccl.h in $nccl_include (set NCCL_INCLUDE)" >&2; exit 2; }
command -v debootstrap >/dev/null || { echo "check-cuda12-build: apt-get install debootstrap" >&2; exit 2; }
if [ ! -x "$root/usr/bin/apt-get" ]; then
  debootstrap --variant=minbase --components=main,contrib,non-free,non-free-firmware trixie "$root" "$mirror"
fi
for m in proc sys dev; do mountpoint -q "$root/$m" || mount --bind "/$m" "$root/$m"; done
trap 'for m in proc sys dev; do umount "$root/$m" 2>/dev/null || true; done' EXIT
cp /etc/resolv.conf "$root/etc/resolv.conf"
echo "deb $mirror trixie main contrib non-free non-free-firmware" > "$root/etc/apt/sources.list"
chroot "$root" /bin/sh -c 'export DEBIAN_FRONTEND=noninteractive; apt-get update -q &&
  apt-get install -y -q --no-install-recommends nvidia-cuda-toolkit nvidia-cuda-dev cmake ninja-build g++ \
  libyaml-cpp-dev libboost-program-options-dev nlohmann-json3-dev zlib1g-dev libssl-dev pkg-config git'
mkdir -p "$root/opt/nccl/include"
cp "$nccl_include/nccl.h" "$root/opt/nccl/include/"
rm -rf "$root/work/moesim"
mkdir -p "$root/work"
git clone -q "$src" "$root/work/moesim"
chroot "$root" /bin/sh -c 'cd /work/moesim && nvcc --version | tail -1 &&
  cmake -S . -B build-cal -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOESIM_CALIBRATE_ONLY=ON -DMOESIM_CALIBRATE=ON \
    -DCMAKE_CUDA_COMPILER=/usr/bin/nvcc -DCMAKE_CUDA_ARCHITECTURES="80;90" -DMOESIM_NCCL_INCLUDE_DIR=/opt/nccl/include &&
  cmake --build build-cal -j2 --target moesim-calibrate &&
  build-cal/calibrate/moesim-calibrate --version &&
  build-cal/calibrate/moesim-calibrate --plan quick --dry-run | tail -2 &&
  ldd build-cal/calibrate/moesim-calibrate'
