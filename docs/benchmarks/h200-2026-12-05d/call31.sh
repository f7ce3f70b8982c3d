#!/usr/bin/env bash
# Fifty-ninth session (prepared for the next), any card, one call of END_S seconds (default
# 480). First the GPU half of tests/kernels/test_jpeg_kinds.py (nine kinds of JPEG, two sizes,
# through nvJPEG and nvjpeg-own against the host path; never run on a GPU: $OUT/tests.log),
# then call30.sh's starts (64, 68, 72, 80 sessions; the second from 80 down) with the time left.
# Predicted for the tests: nvJPEG decodes 4:2:0, 4:2:2, 4:4:4, progressive, restart markers,
# optimised Huffman, greyscale and the EXIF-turned JPEG as stored, within 1-2 levels of OpenCV
# on these smooth pictures (the test allows 4); CMYK refused by nvJPEG (it does not allow CMYK
# unless asked: nvjpegDecodeParamsSetAllowCMYK) and so decoded on the host in its place (the
# fallback built in the fifty-ninth session): OpenCV's pixels exactly; nvjpeg-own the same,
# progressive through its default backend. A CMYK frame decoded to other colours without an
# error (mean difference > 4) would fail it: then four-component JPEGs must go to the host
# before nvJPEG sees them. For call30's part: its header's predictions.
# Carry [".raywhl/site.tar.xz", ".raywhl/ray-stripped.tar.xz", ".gpu"]:
#   bash docs/benchmarks/h200-2026-12-05d/call31.sh > $OUT/call.log 2>&1
END_S=${END_S:-480}
START=$(date +%s)
source scripts/_loadtest.sh
gpu_tests 150 tests/kernels/test_jpeg_kinds.py -rs
python3 -c "import PIL; print('PIL', PIL.__version__)" >> $OUT/tests.log 2>&1
END_S=$(( END_S - ($(date +%s) - START) )) bash docs/benchmarks/h200-2026-12-05d/call30.sh
