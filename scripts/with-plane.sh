#!/usr/bin/env bash
# Runs a command with the local control plane up: starts `strata-plane up --real-node` in the background,
# waits until it is ready, exports E2E_KUBECONFIG/KUBECONFIG/KUBECTL/HELM, runs the command,
# then stops the plane (leaving no processes) and exits with the command's status.
# With E2E_KUBECONFIG already set, the command runs against that cluster instead.
set -euo pipefail
plane_bin="${STRATA_BIN_DIR:?STRATA_BIN_DIR must point at the built binaries}/strata-plane"

if [[ -n "${E2E_KUBECONFIG:-}" ]]; then
  echo "with-plane: using existing cluster from E2E_KUBECONFIG=$E2E_KUBECONFIG" >&2
  exec "$@"
fi

dir="${STRATA_PLANE_DIR:-${CARGO_TARGET_DIR:-target}/strata-plane}"
mkdir -p "$dir"
log="$dir.log"
rm -f "$dir/ready"
# The real node (kubelet, containerd, CNI bridge, kube-proxy) for the in-cluster tier and the
# image tests; STRATA_PLANE_REAL_NODE=0 starts the plane with kwok nodes only.
node_flag=(--real-node)
[[ ${STRATA_PLANE_REAL_NODE:-1} == 0 ]] && node_flag=()
"$plane_bin" up --dir "$dir" "${node_flag[@]}" >"$log" 2>&1 &
plane_pid=$!
stop_plane() {
  if kill -0 "$plane_pid" 2>/dev/null; then
    kill -TERM "$plane_pid" 2>/dev/null || true
    wait "$plane_pid" 2>/dev/null || true
  fi
}
trap stop_plane EXIT INT TERM

# Cold machines build the components first (tens of minutes); warm ones start in seconds.
for _ in $(seq 1 3600); do
  [[ -f "$dir/ready" ]] && break
  if ! kill -0 "$plane_pid" 2>/dev/null; then
    echo "with-plane: the control plane failed to start; its output:" >&2
    cat "$log" >&2
    exit 1
  fi
  sleep 1
done
[[ -f "$dir/ready" ]] || { echo "with-plane: plane not ready after an hour" >&2; cat "$log" >&2; exit 1; }
echo "with-plane: control plane ready in $(cat "$dir/ready")s" >&2
set -a
# shellcheck disable=SC1091
source "$dir/env"
set +a
status=0
"$@" || status=$?
stop_plane
exit "$status"
