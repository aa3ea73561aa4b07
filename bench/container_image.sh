#!/usr/bin/env bash
# The container image, end to end: builds deploy/Containerfile with buildah
# (deploy/build-image.sh; --local-base when no registry is reachable), then in
# the image: `gradmesh --version`, the user it runs as (not root), and a short
# two-worker training run of the reference MLP on the image's Fashion-MNIST.
# Reports the image sizes (runtime alone, and with the dataset layer).
# Not a CI test: the first build downloads the build packages and compiles
# gradmesh (about 10 minutes on 2 cores).
#
# usage: bench/container_image.sh [--local-base]     (as root, or rootless buildah)
set -euo pipefail
cd "$(dirname "$0")/.."
deploy/build-image.sh --target runtime --tag localhost/gradmesh-runtime "$@"
deploy/build-image.sh --target dataset --tag localhost/gradmesh "$@"

container=$(buildah from --pull=never localhost/gradmesh:latest)
trap 'buildah rm "$container" >/dev/null' EXIT
run() { buildah run --isolation chroot "$container" -- "$@"; }

echo "== gradmesh --version"
run gradmesh --version
echo "== user"
uid=$(run id -u)
echo "uid $uid ($(run id -un))"
[[ "$uid" != 0 ]] || { echo "the image runs as root" >&2; exit 1; }
echo "== a short 2-worker training run"
run gradmesh launch --nproc-per-node 2 -- gradmesh train /usr/share/gradmesh/examples/mlp.toml \
  --set data.limit_train=4096 --set data.limit_test=1000 --set train.epochs=1 --set train.threads=1 \
  --set output.dir=/tmp/runs --set output.run_id=image-check 2>&1 | tail -4
run test -f /tmp/runs/image-check/metrics.jsonl

size() { buildah images --format '{{.Size}}' "$1" | head -1; }
echo "== sizes"
echo "| image | size |"
echo "|---|---|"
echo "| localhost/gradmesh-runtime:latest (runtime stage) | $(size localhost/gradmesh-runtime:latest) |"
echo "| localhost/gradmesh:latest (with Fashion-MNIST) | $(size localhost/gradmesh:latest) |"
echo "| debian:bookworm-slim (the base) | $(size docker.io/library/debian:bookworm-slim) |"
