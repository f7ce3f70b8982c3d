# Twenty-fifth session, call B: call A's load test with time slices (no MPS), the same loads,
# on the same warm machine (its compile cache), for the A/B.
MPS= bash docs/benchmarks/h200-2026-12-03/callA/call.sh
