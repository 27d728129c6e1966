# Sourced by the device scripts: compiled kernels carried from one device call to the next, so a call spends its
# minutes running, not compiling (a GPU test file or a bench process compiles tens of Triton / Gluon kernels at
# ~1 s each). The archive .kcache/triton.tgz (git-ignored; name `.kcache` in the call's carry) unpacks into a
# fixed folder, which Triton's cache then uses (its index files hold absolute paths); `kcache_pack DIR` writes
# the binaries, launchers and their metadata to DIR/kcache.tgz (the sources and IRs are left out: a hit needs only
# these), or only the kernels new since the machine's first script (a call may run several) if the whole would pass
# 12 MiB. DIR is the top of $OUT (the device returns a few files, the top ones first); merge it into
# .kcache/triton.tgz after the call (scripts/kcache_merge.sh).
# Kernels are looked up by a hash of their source and constants: a stale entry is never used, only carried.
KCACHE_DIR=/tmp/hinfer-kcache
export TRITON_CACHE_DIR="$KCACHE_DIR"
mkdir -p "$KCACHE_DIR"
KCACHE_MARK="$KCACHE_DIR/.call-start"
if [ -f .kcache/triton.tgz ]; then
  tar xzf .kcache/triton.tgz -C "$KCACHE_DIR" && echo "kernel cache: $(ls "$KCACHE_DIR" | wc -l) entries carried in"
fi
[ -f "$KCACHE_MARK" ] || touch "$KCACHE_MARK"  # the first script of a call (or of a warm machine) sets it
kcache_pack() {  # kcache_pack DIR
  local list=/tmp/hinfer-kcache.list out="${1:?kcache_pack DIR}/kcache.tgz"
  _kcache_list() { (cd "$KCACHE_DIR" && find . -type f "$@" \( -name '*.cubin' -o -name '*.so' -o -name '*.json' \) | sort); }
  _kcache_list > "$list"
  tar czf "$out" -C "$KCACHE_DIR" -T "$list"
  if [ "$(stat -c %s "$out")" -gt $((12 << 20)) ]; then
    _kcache_list -newer "$KCACHE_MARK" > "$list"
    tar czf "$out" -C "$KCACHE_DIR" -T "$list"
  fi
  echo "kernel cache: $(grep -c -e '\.cubin$' "$list") kernels packed, $(( $(stat -c %s "$out") >> 10 )) KiB"
}
