#!/usr/bin/env bash
# Builds deploy/Containerfile with buildah, which needs no container daemon
# (--isolation chroot runs each RUN step in a chroot), as root or rootless.
#
#   deploy/build-image.sh                        # localhost/gradmesh:<version> and :latest, with the dataset
#   deploy/build-image.sh --target runtime       # without the dataset layer
#   deploy/build-image.sh --local-base           # no registry: build the Debian base here first
#
# --local-base builds debian:bookworm-slim's equivalent from Debian's
# packages with mmdebstrap (minbase variant, this host's apt mirror) and
# stores it in buildah's local storage under the name the Containerfile's
# FROM uses, so the build pulls nothing: 72 MB, as debian:bookworm-slim
# (docs/kubernetes.md, "Image size"). The Containerfile itself stays the
# standard one docker and podman build.
set -euo pipefail
cd "$(dirname "$0")/.."

target=dataset
tag=localhost/gradmesh
local_base=0
release=bookworm
while [[ $# -gt 0 ]]; do
  case "$1" in
    --target) target="$2"; shift 2 ;;
    --tag) tag="$2"; shift 2 ;;
    --local-base) local_base=1; shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "build-image.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case "$target" in runtime|dataset) ;; *) echo "build-image.sh: --target is runtime or dataset, not '$target'" >&2; exit 2 ;; esac
for tool in buildah $([[ $local_base == 1 ]] && echo mmdebstrap); do
  command -v "$tool" >/dev/null || { echo "build-image.sh: $tool is not installed (apt-get install $tool)" >&2; exit 2; }
done

version=$(sed -n 's/^project(gradmesh VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
source=$(git config --get remote.origin.url 2>/dev/null || echo "file://$PWD")
base="docker.io/library/debian:${release}-slim"

if [[ $local_base == 1 ]] && ! buildah inspect --type image "$base" >/dev/null 2>&1; then
  mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
  mirror=${mirror:-http://deb.debian.org/debian}
  rootfs=$(mktemp --suffix=.tar)
  trap 'rm -f "$rootfs"' EXIT
  echo "build-image.sh: building the ${release} base with mmdebstrap from $mirror"
  # minbase, slimmed as debian:*-slim is (debuerreotype's slimify list): no
  # manuals, documentation or translations (dpkg keeps excluding them for
  # every later install).
  slim=()
  for path in '/usr/share/doc/*' '/usr/share/man/*' '/usr/share/info/*' '/usr/share/locale/*' \
              '/usr/share/groff/*' '/usr/share/lintian/*' '/usr/share/linda/*'; do
    slim+=(--dpkgopt="path-exclude=$path")
  done
  slim+=(--dpkgopt='path-include=/usr/share/doc/*/copyright' --dpkgopt='path-include=/usr/share/locale/locale.alias')
  # Merged /usr as debootstrap (and so debian:*-slim) sets it up, with
  # usr-is-merged: left to apt, init-system-helpers' "usrmerge |
  # usr-is-merged" picks usrmerge, which brings perl (48 MB of the 135 MB
  # this base weighed before).
  merged_usr=/usr/share/mmdebstrap/hooks/merged-usr
  [[ -d $merged_usr ]] || { echo "build-image.sh: $merged_usr is missing (mmdebstrap 1.0 or later)" >&2; exit 2; }
  # ca-certificates (and with it openssl, 9 MB) only where apt needs it: an
  # https mirror, which the Containerfile's apt-get reaches again.
  certs=()
  [[ $mirror == https://* ]] && certs=(--include=ca-certificates)
  # What the official image leaves out too: apt's lists and caches, the
  # previous copies of dpkg's and debconf's databases, the install logs.
  mmdebstrap --variant=minbase "${certs[@]}" --skip=output/dev --format=tar "${slim[@]}" \
    --hook-dir="$merged_usr" \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/cache/debconf/*-old "$1"/var/lib/dpkg/*-old "$1"/var/cache/ldconfig/aux-cache "$1"/var/log/apt/* "$1"/var/log/dpkg.log "$1"/var/log/alternatives.log' \
    "$release" "$rootfs" "$mirror"
  container=$(buildah from scratch)
  buildah add "$container" "$rootfs" /
  buildah config --cmd '["bash"]' --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$container"
  buildah commit --rm "$container" "$base"
fi

pull=missing
[[ $local_base == 1 ]] && pull=never
buildah build --isolation chroot --layers --pull="$pull" -f deploy/Containerfile --target "$target" \
  --build-arg VERSION="$version" --build-arg REVISION="$revision" --build-arg SOURCE="$source" \
  -t "$tag:$version" -t "$tag:latest" .
echo "build-image.sh: built $tag:$version ($target)"
