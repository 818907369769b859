#!/usr/bin/env bash
# The README's one-command demo: prebuild a tiny Flux transformer's Inductor cache into a local store,
# hydrate it into a fresh directory, then time the first compiled call cold and hydrated.
#
#   examples/demo.sh            # work dir: a new temp dir (kept, path printed); or set CK_DEMO_DIR
#
# Takes a few minutes on a 2-core CPU (two cold compiles of ~1 min: the prebuild and the cold serve), and as
# many again for step 5, a whole tiny FLUX.2-klein pipeline (CK_DEMO_PIPELINE=0 skips it).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
WORK=${CK_DEMO_DIR:-$(mktemp -d -t cachekeeper-demo.XXXXXX)}
export CACHEKEEPER_HOME="$WORK/home"   # the embedded defaults live here: store/ (file://) and catalog.db (SQLite)
CONFIG="$HERE/tiny.yaml"
MODEL="$HERE/models/tiny-flux"
SERVE=(python "$HERE/serve.py" "$MODEL" --component transformer --height 64 --width 64)
mkdir -p "$WORK"
echo "work dir: $WORK"

echo "== 1. tiny model (random weights, no download)"
[ -f "$MODEL/transformer/config.json" ] || python "$HERE/make_tiny_model.py" --only tiny-flux

echo "== 2. prebuild: compile every entry of $CONFIG, publish to $CACHEKEEPER_HOME/store, index in catalog.db"
cachekeeper prebuild "$CONFIG"
cachekeeper coverage "$CONFIG"

echo "== 3. hydrate into a fresh dir (and the precompiled header into this TMPDIR)"
export TMPDIR="$WORK/serve-tmp"   # where the serving process (and hydrate) put Inductor's header
mkdir -p "$TMPDIR"
cachekeeper hydrate --config "$CONFIG" --dest "$WORK/hydrated"
eval "$(cachekeeper hydrate --config "$CONFIG" --dest "$WORK/hydrated" --print-env)"   # a no-op the second time

echo "== 4. first call, cold (empty cache dir, no header) vs hydrated"
mkdir -p "$WORK/cold-tmp"
cold=$(TMPDIR="$WORK/cold-tmp" "${SERVE[@]}" --cache-dir "$WORK/cold" 2>/dev/null | tail -n 1)
warm=$("${SERVE[@]}" 2>/dev/null | tail -n 1)
echo "cold:     $cold"
echo "hydrated: $warm"
python - "$cold" "$warm" <<'PY'
import json, sys
cold, warm = (json.loads(a) for a in sys.argv[1:3])
print(f"first call: cold {cold['first_call_s']:.1f} s, hydrated {warm['first_call_s']:.1f} s "
      f"({cold['first_call_s'] / warm['first_call_s']:.1f}x faster; "
      f"hydrated compiled {warm['fxgraph_cache_miss']} graphs, loaded {warm['fxgraph_cache_hit']})")
PY

[ "${CK_DEMO_PIPELINE:-1}" = 0 ] && exit 0   # CK_DEMO_PIPELINE=0 skips the pipeline part (two more compiles)
echo "== 5. a whole pipeline (tiny FLUX.2-klein): prebuild pipe(...), hydrate, serve it with another prompt"
PIPELINES="$HERE/pipelines.yaml"
KLEIN="$HERE/models/tiny-flux2-klein"
[ -f "$KLEIN/model_index.json" ] || python "$HERE/make_tiny_model.py" --only tiny-flux2-klein --only tiny-flux1
cachekeeper prebuild "$PIPELINES" --model tiny-flux2-klein
# The toolchain's own dir under the dest (what --print-env would export), from the --json report.
PIPE_DIR=$(cachekeeper hydrate --config "$PIPELINES" --model tiny-flux2-klein --dest "$WORK/hydrated-pipeline" --json |
           python -c 'import json, sys; print(json.load(sys.stdin)["dest"])')
SERVE_PIPE=(python "$HERE/serve_pipeline.py" "$KLEIN" --max-sequence-length 16 --guidance-scale 1.0
            --prompt "a lighthouse at dusk" --steps 3 --seed 11)
mkdir -p "$WORK/cold-pipe-tmp"
cold=$(TMPDIR="$WORK/cold-pipe-tmp" "${SERVE_PIPE[@]}" --cache-dir "$WORK/cold-pipeline" 2>/dev/null | tail -n 1)
warm=$("${SERVE_PIPE[@]}" --cache-dir "$PIPE_DIR" 2>/dev/null | tail -n 1)
python - "$cold" "$warm" <<'PY'
import json, sys
cold, warm = (json.loads(a) for a in sys.argv[1:3])
print(f"first pipe(...) call: cold {cold['first_call_s']:.1f} s, hydrated {warm['first_call_s']:.1f} s "
      f"({cold['first_call_s'] / warm['first_call_s']:.1f}x faster; "
      f"hydrated compiled {warm['fxgraph_cache_miss']} graphs, loaded {warm['fxgraph_cache_hit']})")
PY
