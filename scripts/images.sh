#!/usr/bin/env bash
# Builds one FROM-scratch image per service (and the in-cluster tests' workload, strata-test-pod)
# with podman from static binaries and images/Containerfile, checks each image's config (numeric
# non-root user, entrypoint, OCI labels) and root filesystem, saves it as an OCI archive under
# $STRATA_CACHE/images/<profile>/, and — on a plane with a real node (scripts/with-plane.sh
# exports STRATA_NODE_CONTAINERD) — imports it into the node's containerd and starts it there as
# a container, in a pod with the chart's security context, until its readiness probe passes.
#
#   scripts/images.sh [--profile image|image-test] [--no-run | --run-only]
#
# `--profile image` (`make images`, the default): the release build (fat LTO, stripped), each
# image at most 20 MiB. `--profile image-test` (`make test`): the same static build, Containerfile
# and checks, from the cheaper `image-test` cargo profile, without the size goal. `--no-run`
# builds and checks without starting anything; `--run-only` starts the archives an earlier
# `--no-run` left (what `make e2e` does once the plane is up).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${STRATA_CACHE:-$HOME/.cache/strata}"
services=(layer-controller drift-observer rollout-operator admission-webhook)
images=("${services[@]}" strata-test-pod)
target=x86_64-unknown-linux-gnu
profile=image
run=1
build=1
log() { echo "images: $*" >&2; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --profile) profile="${2:?--profile needs image or image-test}"; shift 2 ;;
    --no-run) run=0; shift ;;
    --run-only) build=0; shift ;;
    *) log "unknown argument $1 (want --profile image|image-test, --no-run, --run-only)"; exit 2 ;;
  esac
done
[[ $profile == image || $profile == image-test ]] || { log "--profile must be image or image-test, not $profile"; exit 2; }

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
archive_dir="$cache/images/$profile"
context=""
work=""
fail=0
cleanup() { [[ -z $context ]] || rm -rf "$context" "$work"; }

build_images() {
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
  log "building static binaries (cargo profile $profile)"
  pkgs=(); for s in "${images[@]}"; do pkgs+=(-p "$s"); done
  # build_info's commit label (docs/metrics.md); `-dirty` when the tree has uncommitted changes.
  STRATA_COMMIT="$(git -C "$root" describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)"
  export STRATA_COMMIT
  started=$SECONDS
  RUSTFLAGS="-C target-feature=+crt-static" cargo build --locked --profile "$profile" --target "$target" "${pkgs[@]}" --bins >&2
  log "static build: $((SECONDS - started)) s"
  bindir="$CARGO_TARGET_DIR/$target/$profile"

  context="$(mktemp -d)"
  work="$(mktemp -d)"
  trap cleanup EXIT
  mkdir -p "$context/bin"
  cp /etc/ssl/certs/ca-certificates.crt "$context/ca-certificates.crt"
  for s in "${images[@]}"; do
    if readelf -l "$bindir/$s" | grep -q INTERP || readelf -d "$bindir/$s" | grep -q NEEDED; then
      log "$s is not a static binary"; exit 1
    fi
    # Test-only flags exist only in builds with the `test-hooks` feature: never ship one.
    # (strata-test-pod takes no flags: it is the test workload itself.)
    if [[ $s != strata-test-pod ]] && "$bindir/$s" --pod-address-override=x --help >/dev/null 2>&1; then
      log "$s accepts the test-only --pod-address-override: built with test hooks"; exit 1
    fi
    install -m 0555 "$bindir/$s" "$context/bin/$s"
  done

  log "writing SBOMs to $sbom_dir"
  mkdir -p "$sbom_dir" "$archive_dir"
  # strata-sbom comes with `make build` (a dependency of `make images`).
  sbom="${STRATA_BIN_DIR:-$cache/cargo-target/debug}/strata-sbom"
  for s in "${services[@]}"; do
    (cd "$root" && "$sbom" "$s" --target "$target") >"$sbom_dir/$s-$version.cdx.json"
  done

  printf '| image | uncompressed size | binary |\n|---|---|---|\n'
  for s in "${images[@]}"; do
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
    [[ $s == strata-test-pod ]] || "$rootfs/$s" --version >/dev/null 2>&1 \
      || { log "$image: the binary from the image does not start"; fail=1; }

    rm -f "$archive_dir/$s.oci.tar"
    "$engine" save --quiet --format oci-archive -o "$archive_dir/$s.oci.tar" "$image"

    size="$("$engine" image inspect "$image" --format '{{.Size}}')"
    bin_size="$(stat -c %s "$rootfs/$s")"
    awk -v i="$image" -v s="$size" -v b="$bin_size" 'BEGIN { printf "| `%s` | %.1f MiB | %.1f MiB |\n", i, s/1048576, b/1048576 }'
    if [[ $profile == image ]] && (( size > 20 * 1048576 )); then log "$image: $size bytes, over the 20 MiB goal"; fail=1; fi
  done
  [[ $fail == 0 ]] || exit 1
  log "OCI archives in $archive_dir"
}

if [[ $build == 1 ]]; then build_images; fi
[[ $run == 1 ]] || exit 0

# Each image started as a container on the plane's real node: imported into its containerd (never
# pulled), run in a pod with the chart's pod and container security context, and ready by its
# readiness probe. The services run as a ServiceAccount bound to cluster-admin here: this checks
# the image, the chart's RBAC is the install tests' subject.
if [[ -z ${STRATA_NODE_CONTAINERD:-} || -z ${E2E_KUBECONFIG:-} ]]; then
  log "no real node to start the images on (STRATA_NODE_CONTAINERD unset): run through scripts/with-plane.sh (make images), or pass --no-run"
  exit 1
fi
kubectl=("${KUBECTL:-kubectl}" --kubeconfig "$E2E_KUBECONFIG")
for s in "${images[@]}"; do
  "${STRATA_NODE_CTR:-ctr}" --address "$STRATA_NODE_CONTAINERD" --namespace k8s.io images import "$archive_dir/$s.oci.tar" >/dev/null \
    || { log "importing $s into the real node's containerd failed"; exit 1; }
done
log "imported into the real node's containerd"

ns="strata-images-$RANDOM"
trap '"${kubectl[@]}" delete namespace "$ns" --wait=false >/dev/null 2>&1 || true; cleanup' EXIT
# The CRDs the services watch (their caches, and so /readyz, need them).
for crd in addonslayers replica-templates zone-aware-pod-disruption-budget; do
  "${kubectl[@]}" apply --server-side --field-manager=strata-images -f "$root/manifests/crds/$crd.yaml" >/dev/null
done
"${kubectl[@]}" create namespace "$ns" >/dev/null
"${kubectl[@]}" annotate namespace "$ns" >/dev/null \
  scheduler.alpha.kubernetes.io/node-selector=strata.dev/node=real \
  'scheduler.alpha.kubernetes.io/defaultTolerations=[{"key":"strata.dev/real-node","operator":"Exists","effect":"NoSchedule"}]'
"${kubectl[@]}" -n "$ns" create serviceaccount image-check >/dev/null
"${kubectl[@]}" create clusterrolebinding "$ns" --clusterrole=cluster-admin --serviceaccount="$ns:image-check" >/dev/null
trap '"${kubectl[@]}" delete namespace "$ns" --wait=false >/dev/null 2>&1 || true; "${kubectl[@]}" delete clusterrolebinding "$ns" >/dev/null 2>&1 || true; cleanup' EXIT
for s in "${images[@]}"; do
  case $s in
    admission-webhook) args='["--leader-elect=false", "--admin-address=:8080", "--tls-address=:8443", "--service-name=image-check", "--tls-secret-name=image-check-tls", "--inject-ca-bundle=false"]'; probe=/readyz ;;
    strata-test-pod) args='[]'; probe=/ready ;;
    *) args='["--leader-elect=false", "--admin-address=:8080"]'; probe=/readyz ;;
  esac
  "${kubectl[@]}" -n "$ns" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $s}
spec:
  serviceAccountName: image-check
  restartPolicy: Never
  securityContext: {runAsNonRoot: true, runAsUser: 65532, runAsGroup: 65532, fsGroup: 65532, seccompProfile: {type: RuntimeDefault}}
  containers:
  - name: $s
    image: $registry_prefix/$s:$version
    imagePullPolicy: Never
    args: $args
    env:
    - {name: POD_NAMESPACE, valueFrom: {fieldRef: {fieldPath: metadata.namespace}}}
    - {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
    readinessProbe: {httpGet: {path: $probe, port: 8080}, periodSeconds: 1}
    securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, privileged: false, capabilities: {drop: [ALL]}}
EOF
done
deadline=$((SECONDS + 120))
for s in "${images[@]}"; do
  if "${kubectl[@]}" -n "$ns" wait --for=condition=Ready "pod/$s" --timeout="$((deadline > SECONDS ? deadline - SECONDS : 1))s" >/dev/null 2>&1; then
    log "$registry_prefix/$s:$version: started as a container on the real node and became ready"
  else
    state="$("${kubectl[@]}" -n "$ns" get pod "$s" -o jsonpath='{.status.phase} {.status.containerStatuses[0].state} {.status.containerStatuses[0].lastState}')"
    log "$registry_prefix/$s:$version: pod $ns/$s did not become ready: $state"
    "${kubectl[@]}" -n "$ns" logs "$s" --tail=20 >&2 2>/dev/null || true
    fail=1
  fi
done
exit $fail
