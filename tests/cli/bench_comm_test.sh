#!/bin/sh
# colrow bench comm end to end at 1, 2 and 3 ranks: one JSON object with a
# row per collective, size and transport (shared memory and Open MPI side by
# side when there are ranks to share with, Open MPI alone at one rank), every result checked (wrong = 0),
# nccl-tests' algbw and busbw consistent with the size and time, sizes that
# do not divide by the rank count rounded to whole floats per rank; bad flags
# fail with one clear line on every rank; --comm shm runs shared memory alone;
# --dtype bf16 times and checks the bf16 wire's two sums, 2-byte elements.
#   bench_comm_test.sh COLROW MPIEXEC
set -eu
colrow=$1; mpiexec=$2
. "$(dirname "$0")/mpi_nodes.sh"
run() { np=$1; shift; timeout 120 "$mpiexec" -np "$np" --oversubscribe --bind-to none --quiet "$colrow" "$@"; }
for np in 1 2 3; do
  shared=no; on_one_node "$mpiexec" "$np" && shared=yes
  out=$(run "$np" bench comm --min-bytes 4 --max-bytes 300000 --step-factor 9 --iterations 3 --warmup 1 --json)
  python3 - "$out" "$np" "$shared" <<'PY'
import json, sys
r, np, shared = json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "yes"
assert r["benchmark"] == "comm" and r["ranks"] == np and r["wrong"] == 0, r
assert r["dtype"] == "fp32", r
# One rank has nothing to share, and ranks on several nodes cannot.
comms = ["shm", "mpi"] if np > 1 and shared else ["mpi"]
sizes = [4 * 9**i for i in range(6) if 4 * 9**i <= 300000]
rows = r["results"]
assert len(rows) == 3 * len(sizes) * len(comms), len(rows)
for op in ["all_reduce", "all_gather", "reduce_scatter"]:
    for comm in comms:
        mine = [row for row in rows if row["op"] == op and row["comm"] == comm]
        assert len(mine) == len(sizes), (op, comm, len(mine))
        # The sizes asked for, in order; gather and scatter round to whole floats per rank.
        for s, row in zip(sizes, mine):
            floats = max(1, s // 4)
            count = floats if op == "all_reduce" else np * max(1, floats // np)
            assert row["count"] == count and row["bytes"] == 4 * count, (s, row)
for row in rows:
    assert row["wrong"] == 0 and row["time_us"] > 0, row
    factor = 2 * (np - 1) / np if row["op"] == "all_reduce" else (np - 1) / np
    algbw = row["bytes"] / (row["time_us"] * 1e-6) / 1e9
    assert abs(algbw - row["algbw_gbs"]) <= 1e-6 * algbw, row
    assert abs(row["busbw_gbs"] - algbw * factor) <= 1e-6 * algbw + 1e-12, row
print("ok bench comm at", np, "ranks")
PY
done
for np in 1 3; do
  out=$(run "$np" bench comm --dtype bf16 --min-bytes 4 --max-bytes 300000 --step-factor 9 --iterations 3 --warmup 1 --json)
  python3 - "$out" "$np" <<'PY'
import json, sys
r, np = json.loads(sys.argv[1]), int(sys.argv[2])
assert r["dtype"] == "bf16" and r["wrong"] == 0, r
assert sorted({row["op"] for row in r["results"]}) == ["all_reduce", "reduce_scatter"], r
sizes = [4 * 9**i for i in range(6) if 4 * 9**i <= 300000]
for row in r["results"]:
    assert row["wrong"] == 0 and row["bytes"] == 2 * row["count"], row
for op in ["all_reduce", "reduce_scatter"]:
    counts = sorted({row["count"] for row in r["results"] if row["op"] == op})
    want = sorted({s // 2 if op == "all_reduce" else np * max(1, (s // 2) // np) for s in sizes})
    assert counts == want, (op, counts, want)
print("ok bench comm --dtype bf16 at", np, "ranks")
PY
done
err=$(run 2 bench comm --dtype fp16 2>&1 >/dev/null) && { echo "FAIL: --dtype fp16 accepted"; exit 1; }
[ "$(echo "$err" | grep -c -- '--dtype fp16 is not a dtype colrow knows')" = 2 ] || { echo "FAIL: $err"; exit 1; }
err=$(run 2 bench comm --dtype bf16 --ops all_gather 2>&1 >/dev/null) && { echo "FAIL: bf16 all_gather accepted"; exit 1; }
[ "$(echo "$err" | grep -c 'the bf16 wire carries sums only')" = 2 ] || { echo "FAIL: $err"; exit 1; }
if on_one_node "$mpiexec" 3; then
  out=$(run 3 bench comm --comm shm --max-bytes 4096 --ops all_reduce --iterations 2)
  echo "$out" | grep -q "shm (shared memory)" || { echo "FAIL: no shm column: $out"; exit 1; }
  if echo "$out" | grep -q "mpi (Open MPI)"; then echo "FAIL: --comm shm also ran mpi"; exit 1; fi
  echo "$out" | grep -q "# wrong elements in all: 0" || { echo "FAIL: $out"; exit 1; }
else
  err=$(run 3 bench comm --comm shm --max-bytes 4096 --ops all_reduce 2>&1 >/dev/null) && { echo "FAIL: shm across nodes accepted"; exit 1; }
  [ "$(echo "$err" | grep -c 'needs every rank of the group on one node')" = 3 ] || { echo "FAIL: $err"; exit 1; }
fi
err=$(run 2 bench comm --ops all_reduce,broadcast 2>&1 >/dev/null) && { echo "FAIL: broadcast accepted"; exit 1; }
[ "$(echo "$err" | grep -c 'ops (all_reduce,broadcast) must be a comma-separated list')" = 2 ] || { echo "FAIL: $err"; exit 1; }
err=$(run 2 bench comm --min-bytes 64 --max-bytes 8 2>&1 >/dev/null) && { echo "FAIL: max < min accepted"; exit 1; }
[ "$(echo "$err" | grep -c 'must satisfy 4 <= min-bytes <= max-bytes')" = 2 ] || { echo "FAIL: $err"; exit 1; }
echo "bench_comm_test: all passed"
