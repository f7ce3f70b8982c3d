#!/usr/bin/env bash
# Sixtieth session, for an H200 (a no-kind call may land on an H100), one call of END_S seconds
# (default 420). call30.sh's starts (six replicas, 64/68/72/80 sessions, then reversed: how
# many sessions one GPU holds at p99 < 50 ms) on a quiet host only: the host's CPU is sampled
# for 15 s first (/proc/stat), and with more than 0.2 % stolen the call stops there ($OUT/host.txt)
# instead of spending its time on loads that measure the neighbours (this session's first call:
# an H100 losing 0.2-4.9 % ran p99 61-111 ms, ../h100-2026-12-07/). Predictions: call30.sh's
# header (64 at 49-50 ms as call29 on an H200, 68 at 50-52, 72 at 51-54, 80 at 53-58).
# Carry [".raywhl/site.tar.xz", ".raywhl/ray-stripped.tar.xz", ".gpu"]:
#   bash docs/benchmarks/h200-2026-12-05d/call32.sh > $OUT/call.log 2>&1
END_S=${END_S:-420}
START=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/host.txt
a=$(head -1 /proc/stat); sleep 15; b=$(head -1 /proc/stat)
python3 - "$a" "$b" >> $OUT/host.txt <<'PY'
import sys
a, b = ([int(x) for x in s.split()[1:9]] for s in sys.argv[1:3])
d = [y - x for x, y in zip(a, b)]
print(f"busy {100 * (sum(d) - d[3] - d[4]) / sum(d):.2f} % stolen {100 * d[7] / sum(d):.3f} % over 15 s")
PY
cat $OUT/host.txt
if python3 -c "import sys; sys.exit(0 if float(open('$OUT/host.txt').read().split('stolen ')[1].split()[0]) <= 0.2 else 1)"; then
  END_S=$(( END_S - ($(date +%s) - START) )) bash docs/benchmarks/h200-2026-12-05d/call30.sh
else
  echo "stolen CPU over 0.2 %: no loads" >> $OUT/host.txt
fi
