#!/usr/bin/env bash
# `make images`: builds one FROM-scratch image per service with podman (or docker with a running
# engine), from static release binaries, then checks each image: its config (numeric non-root
# user, entrypoint, OCI labels), its size, and its root filesystem, exported and started against
# the local control plane (E2E_KUBECONFIG, set by scripts/with-plane.sh) until /readyz answers.
# Running the containers themselves is not tried: this machine's sandbox forbids the setrlimit
# a container runtime needs, so the exported binary is started directly instead.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${STRATA_CACHE:-$HOME/.cache/strata}"
services=(layer-controller drift-observer rollout-operator admission-webhook)
target=x86_64-unknown-linux-gnu
log() { echo "images: $*" >&2; }

version="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' "$root/Cargo.toml")"
revision="$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)"
# The source label: the workspace's `repository` (never a git remote, whose URL may carry a
# token); whatever is given, user:password@ is stripped.
source_url="${IMAGE_SOURCE:-$(sed -n '/^\[workspace.package\]/,/^\[/s/^repository *= *"\(.*\)"/\1/p' "$root/Cargo.toml")}"
source_url="$(sed -E 's#^([a-z+]+://)[^/@]*@#\1#' <<<"$source_url")"
# The registry the chart's `global.image.registry` names: `localhost` is where podman keeps
# local images, so a chart left at its default never pulls a stranger's `strata/*` image.
registry_prefix="${IMAGE_REGISTRY:-localhost}/strata"
# SBOMs (CycloneDX JSON, from Cargo.lock) are written here, one per image.
sbom_dir="${IMAGE_SBOM_DIR:-$cache/images}"

# The image tool: podman when present; docker only with a running engine. Debian's podman is
# installed when neither is usable and this is a root shell with apt (the CI machine).
engine=""
if command -v podman >/dev/null; then engine=podman
elif command -v docker >/dev/null && docker info >/dev/null 2>&1; then engine=docker
elif [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
  log "installing podman from Debian's packages"
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends podman >&2
  engine=podman
else
  log "no podman, and no docker engine: install podman (or start a docker engine) first"; exit 1
fi

# Static binaries: glibc's crt-static (no musl target in this toolchain). RUSTFLAGS apply to the
# target only (--target), so build scripts and proc macros stay ordinary host binaries; the
# separate target dir keeps these flags from invalidating the development build.
export CARGO_TARGET_DIR="$cache/cargo-target-static"
log "building static binaries (profile image: fat LTO, stripped)"
pkgs=(); for s in "${services[@]}"; do pkgs+=(-p "$s"); done
# build_info's commit label (docs/metrics.md); `-dirty` when the tree has uncommitted changes.
STRATA_COMMIT="$(git -C "$root" describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)"
export STRATA_COMMIT
RUSTFLAGS="-C target-feature=+crt-static" cargo build --locked --profile image --target "$target" "${pkgs[@]}" --bins >&2
bindir="$CARGO_TARGET_DIR/$target/image"

context="$(mktemp -d)"
work="$(mktemp -d)"
trap 'rm -rf "$context" "$work"' EXIT
mkdir -p "$context/bin"
cp /etc/ssl/certs/ca-certificates.crt "$context/ca-certificates.crt"
for s in "${services[@]}"; do
  if readelf -l "$bindir/$s" | grep -q INTERP || readelf -d "$bindir/$s" | grep -q NEEDED; then
    log "$s is not a static binary"; exit 1
  fi
  # Test-only flags exist only in builds with the `test-hooks` feature: never ship one.
  if "$bindir/$s" --pod-address-override=x --help >/dev/null 2>&1; then
    log "$s accepts the test-only --pod-address-override: built with test hooks"; exit 1
  fi
  install -m 0555 "$bindir/$s" "$context/bin/$s"
done

log "writing SBOMs to $sbom_dir"
mkdir -p "$sbom_dir"
# strata-sbom comes with `make build` (a dependency of `make images`).
sbom="${STRATA_BIN_DIR:-$cache/cargo-target/debug}/strata-sbom"
for s in "${services[@]}"; do
  (cd "$root" && "$sbom" "$s" --target "$target") >"$sbom_dir/$s-$version.cdx.json"
done

fail=0
printf '| image | uncompressed size | binary |\n|---|---|---|\n'
for s in "${services[@]}"; do
  image="$registry_prefix/$s:$version"
  log "building $image"
  "$engine" build --quiet --target "$s" -t "$image" \
    --build-arg VERSION="$version" --build-arg REVISION="$revision" --build-arg SOURCE="$source_url" \
    -f "$root/images/Containerfile" "$context" >/dev/null

  # Config: numeric non-root user, the binary as entrypoint, the OCI labels.
  user="$("$engine" image inspect "$image" --format '{{.Config.User}}')"
  entry="$("$engine" image inspect "$image" --format '{{json .Config.Entrypoint}}')"
  labels="$("$engine" image inspect "$image" --format '{{json .Config.Labels}}')"
  [[ $user == 65532:65532 ]] || { log "$image: user is '$user', want 65532:65532"; fail=1; }
  [[ $entry == "[\"/$s\"]" ]] || { log "$image: entrypoint is $entry"; fail=1; }
  for key in source version revision; do
    grep -q "\"org.opencontainers.image.$key\":\"[^\"]" <<<"$labels" || { log "$image: label $key missing"; fail=1; }
  done
  grep -q "\"org.opencontainers.image.version\":\"$version\"" <<<"$labels" || { log "$image: wrong version label"; fail=1; }

  # Root filesystem: exported, exactly the binary and the CA bundle (no shell).
  rootfs="$work/$s"; mkdir -p "$rootfs"
  ctr="$("$engine" create "$image")"
  "$engine" export "$ctr" | tar -x -C "$rootfs"
  "$engine" rm "$ctr" >/dev/null
  files="$(cd "$rootfs" && find . -type f | LC_ALL=C sort | tr '\n' ' ')"
  want="$(printf '%s\n' "./$s" ./etc/ssl/certs/ca-certificates.crt | LC_ALL=C sort | tr '\n' ' ')"
  [[ $files == "$want" ]] || { log "$image: unexpected files: $files"; fail=1; }
  [[ ! -e $rootfs/bin/sh ]] || { log "$image: has a shell"; fail=1; }

  # The binary inside starts against the local control plane and becomes ready.
  if [[ -n ${E2E_KUBECONFIG:-} ]]; then
    port=$((20000 + RANDOM % 20000))
    args=(--kubeconfig "$E2E_KUBECONFIG" --leader-elect=false --admin-address "127.0.0.1:$port")
    [[ $s == admission-webhook ]] && args+=(--tls-address "127.0.0.1:$((port + 1))" --inject-ca-bundle=false)
    POD_NAMESPACE=default "$rootfs/$s" "${args[@]}" >"$work/$s.log" 2>&1 &
    pid=$!
    ready=0
    for _ in $(seq 1 300); do
      if curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1; then ready=1; break; fi
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true
    if [[ $ready == 1 ]]; then log "$image: its binary started against the control plane and became ready"
    else log "$image: the binary from the image did not become ready:"; cat "$work/$s.log" >&2; fail=1; fi
  else
    "$rootfs/$s" --version >/dev/null || { log "$image: the binary from the image does not start"; fail=1; }
  fi

  size="$("$engine" image inspect "$image" --format '{{.Size}}')"
  bin_size="$(stat -c %s "$rootfs/$s")"
  awk -v i="$image" -v s="$size" -v b="$bin_size" 'BEGIN { printf "| `%s` | %.1f MiB | %.1f MiB |\n", i, s/1048576, b/1048576 }'
  if (( size > 20 * 1048576 )); then log "$image: $size bytes, over the 20 MiB goal"; fail=1; fi
done
exit $fail
