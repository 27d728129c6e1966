#!/usr/bin/env bash
# Here, after a device call: merge the kernel archive a call returned (ARCHIVE: its kcache.tgz) into
# .kcache/triton.tgz instead of replacing it. A call returns only its new kernels once the whole cache would pass
# 12 MiB (scripts/kcache.sh), so replacing the archive would drop every kernel compiled before; the union is
# carried (the carry's limit is 64 MiB). Entries of the same name are taken from ARCHIVE.
set -euo pipefail
new=${1:?usage: scripts/kcache_merge.sh ARCHIVE}
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p .kcache
[ -f .kcache/triton.tgz ] && tar xzf .kcache/triton.tgz -C "$tmp"
tar xzf "$new" -C "$tmp"
tar czf "$tmp.tgz" -C "$tmp" .
rm -f .kcache/triton.tgz && mv "$tmp.tgz" .kcache/triton.tgz
echo "kernel cache: $(find "$tmp" -name '*.cubin' | wc -l) kernels, $(( $(stat -c %s .kcache/triton.tgz) >> 10 )) KiB"
