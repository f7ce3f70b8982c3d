# Shared by gpu_serve_loadtest.sh, gpu_ray_loadtest.sh, gpu_direct.sh, gpu_refine.sh,
# gpu_profile_stem.sh and gpu_candidates.sh
# (sourced from the repository root): install_wheels, start_budget, elapsed/say/left against T0
# and BUDGET_S, gpu_tests LIMIT ARGS, fetch URL, and pick_clip DIR.

# install_wheels: the carried packages (built for the GPU machine's Python 3.12) into /tmp/site,
# once per machine and folder (a marker file per folder: later calls, and scripts started
# beside each other after a first install, skip it; a call with .raywhl/ after one with .whl/
# does not): .raywhl/ (Ray, stripped, and the server's packages, pip-installed and packed as
# site.tar.xz, and py-spy as pyspy.tar.xz; scripts/make_raywhl.sh) if carried, else .whl/ (the
# server's packages as wheels). A call that does not profile carries .raywhl/site.tar.xz and
# .raywhl/ray-stripped.tar.xz by name, without pyspy.tar.xz (the tracked tree grows by each
# session's benchmarks, and the carry shares its 64 MiB). Puts the repository and /tmp/site on
# PYTHONPATH and /tmp/site/bin (py-spy, where carried) on PATH either way. Elsewhere (a CPU
# smoke test here) it installs nothing.
install_wheels() {
  local dir=.whl
  [ -d .raywhl ] && dir=.raywhl
  if { compgen -G "$dir/*.whl" > /dev/null || [ -f "$dir/site.tar.xz" ]; } \
      && [ ! -f "/tmp/site/.installed-$dir" ] \
      && python3 -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))'; then
    mkdir -p /tmp/site
    if compgen -G "$dir/*.whl" > /dev/null; then
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site "$dir"/*.whl || return 1
    fi
    if [ -f "$dir/site.tar.xz" ]; then
      tar xJf "$dir/site.tar.xz" -C /tmp/site || return 1
    fi
    if [ -f "$dir/pyspy.tar.xz" ]; then  # carried only by calls that profile (py-spy)
      tar xJf "$dir/pyspy.tar.xz" -C /tmp/site || return 1
    fi
    if [ -f "$dir/ray-stripped.tar.xz" ]; then
      tar xJf "$dir/ray-stripped.tar.xz" -C /tmp/site || return 1
      # the zip's unpacking dropped the executable bits: Ray's own binaries need them back
      find /tmp/site/ray/core -type f ! -name '*.py' -exec chmod +x {} +
    fi
    touch "/tmp/site/.installed-$dir"
  fi
  export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}" PATH="/tmp/site/bin:$PATH"
}

# start_budget DEFAULT_S: OUT must be set (made here), BUDGET_S (default DEFAULT_S) less a
# 10 s margin for the last step's timeout to end in, and T0 now.
start_budget() {
  : "${OUT:?set OUT to the output directory}"
  BUDGET_S=$(( ${BUDGET_S:-$1} - 10 ))
  mkdir -p "$OUT"
  T0=$(date +%s)
}

elapsed() { echo $(( $(date +%s) - T0 )); }
say() { echo "== [$(elapsed)s] $*"; }
left() { echo $(( BUDGET_S - $(elapsed) )); }

# gpu_tests LIMIT_S PYTEST_ARGS...: the GPU-marked tests into $OUT/tests.log under a time limit,
# the log's tail printed; returns pytest's status.
gpu_tests() {
  local limit="$1" rc
  shift
  timeout -k 10 "$limit" python3 -m pytest -q -m gpu -p no:cacheprovider "$@" \
    > "$OUT/tests.log" 2>&1
  rc=$?
  tail -n 15 "$OUT/tests.log"
  return "$rc"
}

# fetch URL: the body on stdout; fails on a non-2xx answer (curl -f, or Python if curl is missing)
if command -v curl > /dev/null; then
  fetch() { curl -sf --max-time 10 "$1"; }
else
  fetch() { python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())' "$1" 2>/dev/null; }
fi
# put_json URL JSON: PUT the JSON body, print the reply's body (fails on a 4xx/5xx)
put_json() {
  python3 -c 'import sys, urllib.request
req = urllib.request.Request(sys.argv[1], data=sys.argv[2].encode(), method="PUT",
                             headers={"Content-Type": "application/json"})
sys.stdout.write(urllib.request.urlopen(req, timeout=30).read().decode())' "$1" "$2"
}

# pick_clip DIR: CLIP = $CLIP, else the real rally if present, else a drawn clip in DIR
# (a 1280x720 white ball on a green table, 120 frames at 60 fps).
pick_clip() {
  CLIP="${CLIP:-}"
  for c in .gpu/real_rally_a.mp4 shared/data/real_rally_a.mp4 ../shared/data/real_rally_a.mp4; do
    [ -z "$CLIP" ] && [ -f "$c" ] && CLIP="$c"
  done
  if [ -z "$CLIP" ]; then
    CLIP="$1/clip.mp4"
    timeout 60 python3 - "$CLIP" <<'PY'
import sys, cv2, numpy as np
w, h, n = 1280, 720, 120
out = cv2.VideoWriter(sys.argv[1], cv2.VideoWriter_fourcc(*"mp4v"), 60.0, (w, h))
rng = np.random.default_rng(0)
for i in range(n):
    img = np.full((h, w, 3), (40, 90, 30), np.uint8)
    img = cv2.add(img, rng.integers(0, 12, img.shape, dtype=np.uint8))
    cv2.circle(img, (40 + i * 10, int(h / 2 + 150 * np.sin(i / 9))), 8, (255, 255, 255), -1)
    out.write(img)
out.release()
PY
  fi
  echo "clip: $CLIP"
}
