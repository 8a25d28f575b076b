#!/bin/sh
# Installs what moesim needs to build and test on Debian 12 (bookworm), only what is missing.
# Usage: sh tools/setup.sh [--test]   (--test adds what the test suite needs)
# Runs as root, or through sudo when it is available. Never touches anything but apt packages.
set -eu

packages="g++ cmake ninja-build pkg-config libsimgrid-dev libglpk-dev libyaml-cpp-dev
libboost-program-options-dev doctest-dev nlohmann-json3-dev zlib1g-dev libssl-dev"
# The tests also open the study report in a real browser (chromium, headless; fonts so that text
# renders), run sharded studies through GNU parallel, and build the project with Clang too, once plain
# and once with libFuzzer, ASan and UBSan (their runtimes are in libclang-rt-14-dev, which plain clang only
# recommends), and start a one-node Slurm cluster (slurmctld, slurmd, munge) for tools/slurm-study.sh.
test_packages="chromium fonts-dejavu-core parallel clang libclang-rt-14-dev slurmctld slurmd slurm-client munge"
for arg in "$@"; do
  case "$arg" in
    --test) packages="$packages $test_packages" ;;
    *) echo "setup.sh: unknown option $arg (expected --test)" >&2; exit 2 ;;
  esac
done

missing=""
for p in $packages; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  case "$status" in
    *"install ok installed"*) ;;
    *) missing="$missing $p" ;;
  esac
done

if [ -z "$missing" ]; then
  echo "setup.sh: all dependencies are installed"
  exit 0
fi

as_root=""
if [ "$(id -u)" != "0" ]; then
  if command -v sudo >/dev/null 2>&1; then
    as_root="sudo"
  else
    echo "setup.sh: these Debian packages are missing:$missing" >&2
    echo "setup.sh: run this script as root (or install them) and try again" >&2
    exit 1
  fi
fi

echo "setup.sh: installing:$missing"
$as_root apt-get update -q
DEBIAN_FRONTEND=noninteractive $as_root apt-get install -y -q --no-install-recommends $missing
