#!/usr/bin/env bash
# The fuzz ctest entries (tests/fuzz/README.md).
#
#   run_fuzz.sh fuzz BIN CORPUS ARTIFACTS RUNS SECONDS
#       replays the seed corpus (every seed must be accepted), then fuzzes for RUNS mutated inputs or
#       SECONDS, whichever comes first, with a fixed seed; findings are saved under ARTIFACTS.
#       Fails on a finding in our code (a) or a non-Error exception (c); findings inside libhdf5 (b)
#       are reported and counted but do not fail (HDF5 1.10 itself crashes on some damaged metadata).
#   run_fuzz.sh regressions BIN DIR
#       replays every file of DIR, each in its own run, against DIR/MANIFEST ("FILE EXPECT what it
#       triggers"; EXPECT is pass, hdf5 or pending; a file not listed must pass):
#         pass     no finding at all
#         hdf5     a known crash/hang inside libhdf5: no finding, or only a (b) finding
#         pending  a known bug in our code not fixed yet: any outcome is reported, none fails
#                  (change it to pass with the fix)
# ATTNLENS_FUZZ_ENGINE: driver (default) or libfuzzer, as the target was built.
set -uo pipefail
mode=${1:-}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
engine=${ATTNLENS_FUZZ_ENGINE:-driver}
flags=(-timeout=10 -rss_limit_mb=2048)

case "$mode" in
  fuzz)
    [ $# -eq 6 ] || { echo "usage: $0 fuzz BIN CORPUS ARTIFACTS RUNS SECONDS" >&2; exit 2; }
    bin=$2 corpus=$3 artifacts=$4 runs=$5 seconds=$6
    rm -rf "$artifacts"
    mkdir -p "$artifacts"
    shopt -s nullglob
    seeds=("$corpus"/*.h5)
    [ ${#seeds[@]} -gt 0 ] || { echo "run_fuzz: no seeds in $corpus (run the fuzz.corpus test first)" >&2; exit 1; }
    # 1. Every seed must open and read: a refused seed would only exercise the refusal.
    log=$artifacts/seeds.log
    ATTNLENS_FUZZ_VERBOSE=1 "$bin" "${flags[@]}" "${seeds[@]}" >"$log" 2>&1
    rc=$?
    if [ $rc -ne 0 ] || grep -q "attnlens::Error during" "$log"; then
      cat "$log"
      echo "run_fuzz: replaying the seed corpus failed (rc $rc) or a seed was refused" >&2
      exit 1
    fi
    echo "run_fuzz: ${#seeds[@]} seeds replayed, all accepted"
    # 2. A fixed budget of mutated inputs with a fixed seed.
    if [ "$engine" = libfuzzer ]; then
      # Fork mode goes on after a crash or hang (libhdf5 has known ones); the artifacts are then
      # classified and only (a) and (c) fail. Fork mode stops on time, not on -runs.
      work=$(mktemp -d)
      trap 'rm -rf "$work"' EXIT
      "$bin" "${flags[@]}" -seed=1 -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
        -max_total_time="$seconds" -artifact_prefix="$artifacts/" "$work" "$corpus" 2>&1 | grep -v "NEW_FUNC"
      found=("$artifacts"/crash-* "$artifacts"/timeout-* "$artifacts"/oom-*)
      echo "run_fuzz: libFuzzer done, ${#found[@]} artifact(s) in $artifacts"
      [ ${#found[@]} -gt 0 ] || exit 0
      "${PYTHON3:-/usr/bin/python3}" "$here/triage.py" "$bin" "${found[@]}" | tee "$artifacts/triage.txt"
      if grep -q "^([ac])" "$artifacts/triage.txt"; then exit 1; fi
      exit 0
    fi
    # The driver rewrites the checksums of the latest format's structures after a mutation: it must
    # find them (their stored checksums match its lookup3) in every latest-format seed.
    latest=("$corpus"/*latest*.h5)
    if [ ${#latest[@]} -gt 0 ]; then
      line=$("$bin" "${flags[@]}" -seed=1 -runs=1 -artifact_prefix="$artifacts/" "${latest[@]}" 2>&1 |
        grep -m1 "checksummed structures")
      found=$(sed -n 's/.*checksummed structures in \([0-9]*\) of them.*/\1/p' <<<"$line")
      if [ "${found:-0}" -ne ${#latest[@]} ]; then
        echo "$line"
        echo "run_fuzz: checksummed structures found in ${found:-0} of ${#latest[@]} latest-format seeds" >&2
        exit 1
      fi
      echo "run_fuzz: checksummed structures found in all ${#latest[@]} latest-format seeds: $line"
    fi
    "$bin" "${flags[@]}" -seed=1 -runs="$runs" -max_total_time="$seconds" -artifact_prefix="$artifacts/" "$corpus"
    rc=$?
    echo "run_fuzz: driver exit status $rc; artifacts in $artifacts"
    exit $rc
    ;;
  regressions)
    [ $# -eq 3 ] || { echo "usage: $0 regressions BIN DIR" >&2; exit 2; }
    bin=$2 dir=$3
    manifest=$dir/MANIFEST
    failed=0 count=0
    shopt -s nullglob
    for f in "$dir"/*; do
      name=$(basename "$f")
      case "$name" in MANIFEST | README* | .*) continue ;; esac
      [ -f "$f" ] || continue
      count=$((count + 1))
      expect=pass
      if [ -f "$manifest" ]; then
        e=$(awk -v n="$name" '$1 == n { print $2; exit }' "$manifest")
        [ -n "$e" ] && expect=$e
      fi
      if [ "$engine" = libfuzzer ]; then
        # one replay, classified by triage.py from the sanitizer's or libFuzzer's stack
        out=$("${PYTHON3:-/usr/bin/python3}" "$here/triage.py" "$bin" "$f" 2>&1)
        outcome=$(echo "$out" | sed -n 's/^(\([a-z]*\)).*/\1/p' | head -1)
        [ -n "$outcome" ] || outcome=a
      else
        out=$(ATTNLENS_FUZZ_VERBOSE=1 timeout 120 "$bin" "${flags[@]}" "$f" 2>&1)
        rc=$?
        if [ $rc -ne 0 ] && [ $rc -ne 1 ] && [ $rc -ne 3 ]; then outcome=a  # the driver itself failed
        elif echo "$out" | grep -q "findings: (a) our code 0, (b) inside libhdf5 0, (c) non-Error exceptions 0"; then
          outcome=pass
        elif echo "$out" | grep -q "findings: (a) our code 0, (b) inside libhdf5 [1-9][0-9]*, (c) non-Error exceptions 0"; then
          outcome=b
        elif echo "$out" | grep -q "(c) non-Error exceptions [1-9]"; then outcome=c
        else outcome=a; fi
      fi
      verdict=ok
      case "$expect:$outcome" in
        pass:pass | hdf5:pass | hdf5:b | pending:*) ;;
        *) verdict=FAIL ;;
      esac
      note=""
      [ "$expect" != pass ] && [ "$outcome" = pass ] &&
        note=" (no finding in this build; when the libFuzzer/ASan build agrees, mark it 'pass' in MANIFEST)"
      echo "regression $name: expected $expect, outcome $outcome -> $verdict$note"
      if [ "$verdict" = FAIL ]; then
        failed=$((failed + 1))
        echo "$out" | tail -40
      fi
    done
    echo "run_fuzz: $count regression file(s), $failed failed"
    [ $failed -eq 0 ]
    ;;
  *)
    echo "usage: $0 fuzz BIN CORPUS ARTIFACTS RUNS SECONDS | regressions BIN DIR" >&2
    exit 2
    ;;
esac
