#!/usr/bin/env bash
# Builds the local control plane's binaries from their published Go modules into
# $HOME/.cache/strata/bin/<component>-<version>/, skipping what is already there.
# Prints the bin directories as KEY=path lines (sourceable) on stdout.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"
# Another Kubernetes version for one run (docs/testing.md, "Kubernetes versions"):
# STRATA_KUBERNETES_VERSION=v1.37.2 builds that version's components (and its v0.37.2 staging
# modules) into a cache directory of their own.
if [[ -n ${STRATA_KUBERNETES_VERSION:-} ]]; then
  KUBERNETES_VERSION="$STRATA_KUBERNETES_VERSION"
  KUBERNETES_STAGING_VERSION="v0.${KUBERNETES_VERSION#v1.}"
fi

cache="${STRATA_CACHE:-$HOME/.cache/strata}"
export GOFLAGS="${GOFLAGS:--buildvcs=false}"
export CGO_ENABLED=0
log() { echo "build-plane: $*" >&2; }

# Go is needed only while something is missing from the cache; a warm cache runs without it.
# The error is one line saying what to do; `strata-plane` shows it as its own error.
need_go() {
  command -v go >/dev/null && return 0
  log "error: the Go toolchain (go) is not on PATH: it is needed once, to build the local control plane into $cache/bin; install Go 1.24 or newer (https://go.dev/dl) and run again"
  exit 3
}

k8s_dir="$cache/bin/kubernetes-$KUBERNETES_VERSION"
etcd_dir="$cache/bin/etcd-$ETCD_VERSION"
kwok_dir="$cache/bin/kwok-$KWOK_VERSION"
helm_dir="$cache/bin/helm-$HELM_VERSION"
promtool_dir="$cache/bin/promtool-$PROMETHEUS_VERSION"
prometheus_dir="$cache/bin/prometheus-$PROMETHEUS_VERSION"
jaeger_dir="$cache/bin/jaeger-$JAEGER_VERSION"

build_kubernetes() {
  # kubelet and kube-proxy run the plane's real node (`strata-plane up --real-node`).
  local bins=() b
  for b in kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy; do
    [[ -x "$k8s_dir/$b" ]] || bins+=("$b")
  done
  [[ ${#bins[@]} == 0 ]] && return 0
  need_go
  log "building kubernetes $KUBERNETES_VERSION (cold: several minutes)"
  local work="$cache/src/kubernetes-$KUBERNETES_VERSION"
  rm -rf "$work" && mkdir -p "$work" "$k8s_dir"
  (
    cd "$work"
    go mod init strata.dev/e2e-plane-kubernetes >/dev/null 2>&1
    # k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them with
    # local paths; mirror each of those replaces with the published staging version.
    local gomod
    gomod="$(go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
    {
      echo "require k8s.io/kubernetes $KUBERNETES_VERSION"
      grep -oE 'k8s\.io/[a-z0-9-]+ => \./staging/src/k8s\.io/[a-z0-9-]+' "$gomod" \
        | awk -v v="$KUBERNETES_STAGING_VERSION" '{print "replace " $1 " => " $1 " " v}'
    } >> go.mod
    local minor="${KUBERNETES_VERSION#v1.}"; minor="${minor%%.*}"
    local pkg=k8s.io/component-base/version
    local ldflags="-s -w -X $pkg.gitVersion=$KUBERNETES_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
    ldflags="$ldflags -X k8s.io/client-go/pkg/version.gitVersion=$KUBERNETES_VERSION -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
    for b in "${bins[@]}"; do
      log "  go build $b"
      go build -mod=mod -ldflags "$ldflags" -o "$k8s_dir/$b.tmp" "k8s.io/kubernetes/cmd/$b"
      mv "$k8s_dir/$b.tmp" "$k8s_dir/$b"
    done
  )
}

build_etcd() {
  [[ -x "$etcd_dir/etcd" ]] && return 0
  need_go
  log "building etcd $ETCD_VERSION"
  local work="$cache/src/etcd-$ETCD_VERSION"
  rm -rf "$work" && mkdir -p "$work" "$etcd_dir"
  (
    cd "$work"
    go mod init strata.dev/e2e-plane-etcd >/dev/null 2>&1
    # etcd's server module replaces its sibling modules with local paths; pin the
    # published siblings at the same version instead.
    local gomod
    gomod="$(go mod download -json "go.etcd.io/etcd/server/v3@$ETCD_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
    {
      echo "require go.etcd.io/etcd/server/v3 $ETCD_VERSION"
      grep -oE 'go\.etcd\.io/etcd/[a-z0-9/-]+ => \.\./[a-z0-9/-]*' "$gomod" \
        | awk -v v="$ETCD_VERSION" '{print "replace " $1 " => " $1 " " v}'
    } >> go.mod
    go build -mod=mod -ldflags "-s -w" -o "$etcd_dir/etcd.tmp" go.etcd.io/etcd/server/v3
    mv "$etcd_dir/etcd.tmp" "$etcd_dir/etcd"
  )
}

build_installable() { # dir binary module@version
  [[ -x "$1/$2" ]] && return 0
  need_go
  log "building $3"
  mkdir -p "$1"
  GOBIN="$1" go install -ldflags "-s -w" "$3"
}

# A program whose module has replace directives: built as a tool of a throwaway module.
build_tool() { # dir binary package module@version
  [[ -x "$1/$2" ]] && return 0
  need_go
  log "building $4 (cold: a few minutes)"
  local work="$cache/src/$2-tool"
  rm -rf "$work" && mkdir -p "$work" "$1"
  (
    cd "$work"
    go mod init strata.local/build-"$2" >/dev/null 2>&1
    GOFLAGS=-mod=mod go get -tool "$4" >/dev/null
    GOFLAGS=-mod=mod go build -ldflags "-s -w" -o "$1/$2.tmp" "$3"
  )
  mv "$1/$2.tmp" "$1/$2"
  rm -rf "$work"
}

crds_dir="$cache/crds/argocd-$ARGO_CD_VERSION-kustomize-$KUSTOMIZE_CONTROLLER_API_VERSION-source-$SOURCE_CONTROLLER_API_VERSION"
cg_dir="$cache/bin/controller-gen-$CONTROLLER_TOOLS_VERSION"

# The upstream GitOps CRDs: Argo CD ships its Application CRD in its Go module; Flux's
# Kustomization CRD is generated from its published API types, as Flux itself does.
build_upstream_crds() {
  [[ -f "$crds_dir/application-crd.yaml" && -f "$crds_dir/kustomization-crd.yaml" && -f "$crds_dir/gitrepository-crd.yaml" ]] && return 0
  need_go
  build_installable "$cg_dir" controller-gen "sigs.k8s.io/controller-tools/cmd/controller-gen@$CONTROLLER_TOOLS_VERSION"
  log "fetching Argo CD $ARGO_CD_VERSION's Application CRD; generating Flux's Kustomization ($KUSTOMIZE_CONTROLLER_API_VERSION) and source ($SOURCE_CONTROLLER_API_VERSION) CRDs"
  local work="$cache/src/upstream-crds"
  rm -rf "$work" "$crds_dir.tmp" && mkdir -p "$work" "$crds_dir.tmp"
  (
    cd "$work"
    local argo api
    argo="$(GOFLAGS=-mod=mod go mod download -json "github.com/argoproj/argo-cd/v3@$ARGO_CD_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
    cp "$argo/manifests/crds/application-crd.yaml" "$crds_dir.tmp/application-crd.yaml"
    api="$(GOFLAGS=-mod=mod go mod download -json "github.com/fluxcd/kustomize-controller/api@$KUSTOMIZE_CONTROLLER_API_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
    cp -r "$api" kustomize-api && chmod -R u+w kustomize-api
    cd kustomize-api
    GOFLAGS=-mod=mod go mod download
    GOFLAGS=-mod=mod "$cg_dir/controller-gen" crd paths=./... output:crd:artifacts:config="$work/out"
    cp "$work/out/kustomize.toolkit.fluxcd.io_kustomizations.yaml" "$crds_dir.tmp/kustomization-crd.yaml"
    cd "$work"
    api="$(GOFLAGS=-mod=mod go mod download -json "github.com/fluxcd/source-controller/api@$SOURCE_CONTROLLER_API_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
    cp -r "$api" source-api && chmod -R u+w source-api
    cd source-api
    GOFLAGS=-mod=mod go mod download
    GOFLAGS=-mod=mod "$cg_dir/controller-gen" crd paths=./... output:crd:artifacts:config="$work/source-out"
    for kind in gitrepositories:gitrepository ocirepositories:ocirepository buckets:bucket; do
      cp "$work/source-out/source.toolkit.fluxcd.io_${kind%%:*}.yaml" "$crds_dir.tmp/${kind##*:}-crd.yaml"
    done
  )
  rm -rf "$crds_dir" && mv "$crds_dir.tmp" "$crds_dir"
}

build_etcd
build_installable "$kwok_dir" kwok "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
build_kubernetes
build_installable "$helm_dir" helm "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
build_upstream_crds
build_installable "$promtool_dir" promtool "github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_VERSION"
# The Prometheus server itself (same module), for the observability e2e: it scrapes the
# services and evaluates every dashboard query and alert. Its web UI is not needed (the HTTP
# API is), so the build without embedded assets is enough.
build_installable "$prometheus_dir" prometheus "github.com/prometheus/prometheus/cmd/prometheus@$PROMETHEUS_VERSION"

build_tool "$jaeger_dir" jaeger github.com/jaegertracing/jaeger/cmd/jaeger "github.com/jaegertracing/jaeger/cmd/jaeger@$JAEGER_VERSION"

# The real node's own pieces: CNI plugins, crictl, and the pause image (its binary compiled from
# the C source the k8s.io/kubernetes module carries, packed FROM scratch by podman and saved as an
# OCI archive the node's containerd imports at start-up).
cni_dir="$cache/bin/cni-plugins-$CNI_PLUGINS_VERSION"
crictl_dir="$cache/bin/crictl-$CRI_TOOLS_VERSION"
pause_dir="$cache/bin/pause-$KUBERNETES_VERSION"
build_cni() {
  local plugins=(main/bridge ipam/host-local main/loopback meta/portmap) p missing=()
  for p in "${plugins[@]}"; do [[ -x "$cni_dir/${p##*/}" ]] || missing+=("github.com/containernetworking/plugins/plugins/$p@$CNI_PLUGINS_VERSION"); done
  [[ ${#missing[@]} == 0 ]] && return 0
  need_go
  log "building the CNI plugins $CNI_PLUGINS_VERSION"
  mkdir -p "$cni_dir"
  GOBIN="$cni_dir" go install -ldflags "-s -w" "${missing[@]}"
}
build_pause() {
  [[ -f "$pause_dir/pause.oci.tar" ]] && return 0
  need_go
  command -v gcc >/dev/null || { log "warning: no gcc: the real node's pause image cannot be built (install Debian's gcc and libc6-dev)"; return 0; }
  command -v podman >/dev/null || { log "warning: no podman: the real node's pause image cannot be built"; return 0; }
  log "building the pause image from k8s.io/kubernetes $KUBERNETES_VERSION's build/pause/linux/pause.c"
  local src work
  src="$(GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
  work="$(mktemp -d)"
  mkdir -p "$pause_dir"
  gcc -Os -static -Wall -Werror -DVERSION="strata-$KUBERNETES_VERSION" -o "$work/pause" "$src/build/pause/linux/pause.c"
  strip "$work/pause"
  # The pause container's user is the one upstream's image runs as (65535), numeric.
  printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' >"$work/Containerfile"
  podman build --quiet -t "$PAUSE_IMAGE" -f "$work/Containerfile" "$work" >/dev/null
  podman save --quiet --format oci-archive -o "$pause_dir/pause.oci.tar.tmp" "$PAUSE_IMAGE"
  mv "$pause_dir/pause.oci.tar.tmp" "$pause_dir/pause.oci.tar"
  rm -rf "$work"
}
# containerd, runc, iptables (kube-proxy) and podman (image builds) are Debian's packages:
# installed when missing and this is a root shell with apt (a fresh CI machine); otherwise
# `strata-plane up --real-node` names what is missing.
PAUSE_IMAGE="localhost/strata/pause:$KUBERNETES_VERSION"
install_host_packages() {
  local want=(containerd:containerd runc:runc iptables:iptables podman:podman) missing=() w
  for w in "${want[@]}"; do command -v "${w%%:*}" >/dev/null || missing+=("${w##*:}"); done
  [[ ${#missing[@]} == 0 ]] && return 0
  if [[ $(id -u) != 0 ]] || ! command -v apt-get >/dev/null; then
    log "warning: ${missing[*]} missing (Debian packages): the real node and the images need them; install them as root"
    return 0
  fi
  mkdir -p "$cache"
  log "installing ${missing[*]} from Debian's packages"
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >"$cache/apt.log" 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get update >>"$cache/apt.log" 2>&1 || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >>"$cache/apt.log" 2>&1 \
      || log "warning: installing ${missing[*]} failed: see $cache/apt.log"
  fi
}
install_host_packages
build_cni
build_installable "$crictl_dir" crictl "sigs.k8s.io/cri-tools/cmd/crictl@$CRI_TOOLS_VERSION"
build_pause

echo "KUBE_BIN=$k8s_dir"
echo "ETCD_BIN=$etcd_dir"
echo "KWOK_BIN=$kwok_dir"
echo "HELM_BIN=$helm_dir"
echo "UPSTREAM_CRDS=$crds_dir"
echo "PROMTOOL_BIN=$promtool_dir"
echo "PROMETHEUS_BIN=$prometheus_dir"
echo "JAEGER_BIN=$jaeger_dir"
echo "CNI_BIN=$cni_dir"
echo "CRICTL_BIN=$crictl_dir"
echo "PAUSE_ARCHIVE=$pause_dir/pause.oci.tar"
echo "PAUSE_IMAGE=$PAUSE_IMAGE"
