#!/usr/bin/env bash
# `make dist`: the `strata` CLI packed as a kubectl plugin for krew — an archive holding
# `kubectl-strata` and the licence, and krew/strata.yaml rendered beside it with the archive's
# URL (under $DIST_URL) and SHA-256. The binary is a static release build unless
# $STRATA_CLI_BINARY names one already built (the test uses the debug build).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${STRATA_CACHE:-$HOME/.cache/strata}"
out="${DIST_DIR:-$root/dist}"
url="${DIST_URL:-https://example.invalid/strata/releases/download/v@VERSION@}"
version="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' "$root/Cargo.toml")"
target=x86_64-unknown-linux-gnu

binary="${STRATA_CLI_BINARY:-}"
if [[ -z $binary ]]; then
  export CARGO_TARGET_DIR="$cache/cargo-target-static"
  RUSTFLAGS="-C target-feature=+crt-static" cargo build --locked --profile image --target "$target" -p strata-cli --bin strata >&2
  binary="$CARGO_TARGET_DIR/$target/image/strata"
fi

stage="$(mktemp -d)"; trap 'rm -rf "$stage"' EXIT
install -m 0755 "$binary" "$stage/kubectl-strata"
cp "$root/LICENSE" "$stage/LICENSE"
mkdir -p "$out"
archive="$out/kubectl-strata_v${version}_linux_amd64.tar.gz"
# Reproducible: fixed owner, order and times.
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$stage" -cf - kubectl-strata LICENSE | gzip -n >"$archive"
sum="$(sha256sum "$archive" | cut -d' ' -f1)"
url="${url//@VERSION@/$version}"
sed -e "s|@URL@|$url|g" -e "s|@VERSION@|$version|g" -e "s|@SHA256@|$sum|g" "$root/krew/strata.yaml" >"$out/strata.yaml"
echo "dist: $archive ($sum) and $out/strata.yaml" >&2
