# Sourced by call6.sh, call7.sh and call8.sh (set TOTAL first): an empty /tmp/next, the calls'
# preamble (../h200-2026-12-03h/next/_call.sh: RUN, finish, W), the latency calls' caches,
# SIX, the settings of six `serve --ray` replicas of two lanes at 33 % of the SMs (call5.sh's
# shape) at the session counts S6 (default "64 80"), and QUARTER8, eight replicas at 25 % at the
# session counts S8 (default "64 80"), their lanes (LANES) added by the call; TWELVE, twelve
# replicas of one lane at 64 sessions, their cap (MPS_PCT) added by the call (call13-15.sh).
rm -rf /tmp/next
source docs/benchmarks/h200-2026-12-03h/next/_call.sh
export TRITON_CACHE_DIR=/tmp/rtcache TTBALL_CACHE_DIR=/tmp/rttball
SIX=(RESIZE=triton MPS_PCT=33 REPLICAS=6 "SESSIONS_6=${S6:-64 80}" GPUS_PER_REPLICA=0.16
     CPUS_PER_REPLICA=2 CACHE=/tmp/rcache LANES=2)
QUARTER8=(RESIZE=triton MPS_PCT=25 REPLICAS=8 "SESSIONS_8=${S8:-64 80}" GPUS_PER_REPLICA=0.12
          CPUS_PER_REPLICA=1.5 CACHE=/tmp/rcache)
TWELVE=(RESIZE=triton REPLICAS=12 SESSIONS_12=64 GPUS_PER_REPLICA=0.08 CPUS_PER_REPLICA=1
        CACHE=/tmp/rcache LANES=1)
