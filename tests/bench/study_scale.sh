#!/usr/bin/env bash
# Issue 30 goal 5: a study of many images of the DeiT-T shape (12 layers x 3 heads, N = 197, d = 64,
# float16), all eight presets, all statistics. Measures analyze with the record table
# (--records hdf5), with the summary only (--records none) and with JSON records (on fewer images),
# and merge of shards, each with wall time, peak memory and output size, and extrapolates to
# ImageNet's 50,000 validation images.
# usage: tests/bench/study_scale.sh [images=1000] [build-dir=build/dev] [work-dir=mktemp]
#        (the JSON comparison runs on images/20; the merge on 4 shards of images/4 and of images/40)
set -euo pipefail
images="${1:-1000}"
build="${2:-build/dev}"
cli="$(realpath "$build/app/attnlens-cli")"
work="${3:-$(mktemp -d)}"
mkdir -p "$work"
cd "$work"
measure() {  # measure NAME COMMAND...: prints NAME wall_s=.. peak_rss_mb=..
  local name="$1"; shift
  /usr/bin/time -f "%e %M" -o time.txt "$@" >/dev/null 2>err.txt || { cat err.txt; exit 1; }
  read -r wall kb < time.txt
  echo "$name wall_s=$wall peak_rss_mb=$((kb / 1024))"
}
size() { stat -c %s "$1"; }

[ -f deit.h5 ] || measure synth "$cli" synth -o deit.h5 --layers 12 --heads 3 --grid 14x14 --prefix 1 --dim 64 \
  --images "$images" --dtype float16 --class-names
echo "dump: $(size deit.h5) bytes, $images images"
last=$((images - 1))
measure "analyze --records hdf5 ($images images)" "$cli" analyze deit.h5 --quiet --records hdf5 -o study.json
records=$(python3 -c "import json; print(json.load(open('study.json'))['record_detail']['records'])")
echo "records: $records; report $(size study.json) bytes; table $(size study.records.h5) bytes" \
     "($(( $(size study.records.h5) / records )) bytes per record)"
small=$((images / 20))
measure "analyze --records none ($small images)" "$cli" analyze deit.h5 --quiet --records none --images 0-$((small - 1)) -o none.json
measure "analyze --records hdf5 ($small images)" "$cli" analyze deit.h5 --quiet --records hdf5 --images 0-$((small - 1)) -o small.json
measure "analyze --records json ($small images)" "$cli" analyze deit.h5 --quiet --images 0-$((small - 1)) -o json.json
jrecords=$(python3 -c "import json; print(len(json.load(open('json.json'))['results']))")
echo "json report: $(size json.json) bytes for $jrecords records ($(( $(size json.json) / jrecords )) bytes per record)"
# Merge: 4 shards of images/4, then 4 shards of images/40 (peak memory should not grow with rows).
for shard in $((images / 4)) $((images / 40)); do
  rm -f shard-*.json shard-*.records.h5
  for i in 0 1 2 3; do
    "$cli" analyze deit.h5 --quiet --records hdf5 --stats rank --paradigms softmax \
      --images $((i * shard))-$((i * shard + shard - 1)) -o shard-$i.json >/dev/null
  done
  measure "merge of 4 shards of $shard images (rank only, softmax)" "$cli" merge shard-0.json shard-1.json shard-2.json shard-3.json -o merged-$shard.json
done
python3 - "$images" "$work" <<'PY'
import json, os, sys
images = int(sys.argv[1]); work = sys.argv[2]
study = json.load(open(os.path.join(work, "study.json")))
table = os.path.getsize(os.path.join(work, "study.records.h5")); report = os.path.getsize(os.path.join(work, "study.json"))
seconds = study["timing"]["seconds"]
per = seconds / images
print(f"analysis: {seconds:.1f} s for {images} images = {per:.3f} s per image on {study['timing']['threads']} threads")
print(f"50,000 images: {per * 50000 / 3600:.1f} h on this machine; table {table / images * 50000 / 1e9:.1f} GB, "
      f"report {report / 1e6:.1f} MB (its size grows with labels and images, not records)")
for jobs in (8, 32, 128):
    print(f"  Slurm array of {jobs} jobs like this machine: {per * 50000 / jobs / 60:.1f} min each")
PY
