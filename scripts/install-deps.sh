#!/usr/bin/env bash
# Installs exactly the Debian packages gradmesh needs; safe to run repeatedly.
# usage: scripts/install-deps.sh [--bench]   (--bench adds PyTorch for the anchors)
set -euo pipefail

packages=(
  cmake ninja-build g++ make pkg-config   # build
  libopenblas-dev                         # GEMM (cblas_sgemm)
  libtomlplusplus-dev                     # config files
  nlohmann-json3-dev                      # safetensors headers, JSONL
  libcli11-dev                            # command line
  zlib1g-dev                              # gzipped IDX files
  libxxhash-dev                           # stable hashes (store-key file names, shm segment names, collective fingerprints)
  libhiredis-dev redis-server             # cluster rendezvous store (tests start a real server)
  libgloo-dev                             # TCP collectives
  libcpp-httplib-dev                      # the HTTP server of gradmesh serve
  libopenmpi-dev openmpi-bin              # the MPI backend and mpirun
  iproute2                                # network-namespace tests (two emulated hosts)
  libgtest-dev libgmock-dev               # tests
  dataset-fashion-mnist                   # the reference dataset
  fortunes                                # the default text corpus (gradmesh data prepare-text)
)
if [[ "${1:-}" == "--bench" ]]; then
  packages+=(python3-torch python3-numpy)  # the PyTorch anchor in bench/
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
echo "installing: ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
