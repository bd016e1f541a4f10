#!/bin/sh
# colrow bench tp-profile end to end at 1, 2 and 4 ranks on tiny sizes: the
# JSON on stdout equals the --out-json file and has a row for every R (1, 2, 4
# up to the ranks) and d (64, 128, 256) with positive times, each predicted
# ratio recomputed from the printed lambdas, and an aim summary that agrees
# with the rows; the SVG is well-formed XML with one measured and one
# predicted polyline per R >= 2 (R = 1 has no communication to plot). Text
# mode prints the table; bad flags and an unwritable output fail with one
# clear line on every rank.
#   bench_tp_profile_test.sh COLROW MPIEXEC
set -eu
colrow=$1; mpiexec=$2
. "$(dirname "$0")/mpi_nodes.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT INT TERM
run() { np=$1; shift; timeout 60 "$mpiexec" -np "$np" --oversubscribe --bind-to none --quiet "$colrow" "$@"; }
tiny="--min-d 64 --max-d 256 --tokens 64 --iterations 2"

for np in 1 2 4; do
  shared=no; on_one_node "$mpiexec" "$np" && shared=yes
  # shellcheck disable=SC2086  # $tiny is a list of flags
  out=$(run "$np" bench tp-profile $tiny --json --out-json "$work/p$np.json" --out-svg "$work/p$np.svg")
  python3 - "$out" "$np" "$work/p$np.json" "$work/p$np.svg" "$shared" <<'PY'
import json, math, sys
import xml.etree.ElementTree as ET
text, np, json_path, svg_path, shared = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5] == "yes"
r = json.loads(text)
with open(json_path) as f:
    assert json.load(f) == r, "stdout and --out-json differ"
assert r["benchmark"] == "tp-profile" and r["world_size"] == np and r["tokens"] == 64, r
tps = [t for t in (1, 2, 4, 8) if t <= np]
ds = [64, 128, 256]
rows = r["rows"]
assert sorted((x["tp"], x["d_model"]) for x in rows) == [(t, d) for t in tps for d in ds], rows
assert r["skipped"] == [], r["skipped"]
macs = r["lambda_compute"]["macs_per_second"]
floats = r["lambda_comm"]["floats_per_second"]
assert macs > 0, r["lambda_compute"]
assert (floats is None) if np == 1 else floats > 0, r["lambda_comm"]
counted = within = 0
for x in rows:
    t, d = x["tp"], x["d_model"]
    assert x["t_compute_ms"] > 0 and x["t_total_ms"] > 0 and x["t_comm_ms"] >= 0, x
    assert t == 1 or x["t_comm_ms"] > 0, x
    assert x["ffn_hidden_local"] == 4 * d // t, x
    assert x["comm"] == ("none" if t == 1 else "shm" if shared else "mpi"), x
    measured = x["t_comm_ms"] / x["t_compute_ms"]
    assert math.isclose(x["measured_ratio"], measured, rel_tol=1e-9), x
    predicted = 0.0 if t == 1 else (t - 1) / d * macs / (4 * floats)
    assert math.isclose(x["predicted_ratio"], predicted, rel_tol=1e-9, abs_tol=0), (x, predicted)
    c = t >= 2 and x["t_comm_ms"] >= 0.05 * x["t_compute_ms"]
    w = c and abs(predicted / measured - 1) <= 0.25
    assert x["counted"] == c and x["within"] == w, x
    counted += c
    within += w
aim = r["aim"]
assert (aim["counted"], aim["within"], aim["holds"]) == (counted, within, counted == within), aim
svg = ET.parse(svg_path).getroot()
assert svg.tag == "{http://www.w3.org/2000/svg}svg", svg.tag
lines = {}
for p in svg.iter("{http://www.w3.org/2000/svg}polyline"):
    lines.setdefault(p.get("class"), []).append((int(p.get("data-tp")), len(p.get("points").split())))
want = [(t, len(ds)) for t in tps if t >= 2]
assert sorted(lines.get("measured", [])) == want, lines
assert sorted(lines.get("predicted", [])) == want, lines
print("ok bench tp-profile at", np, "ranks:", counted, "points counted,", within, "within 25%")
PY
done

# shellcheck disable=SC2086
out=$(run 2 bench tp-profile $tiny --out-json "$work/t.json" --out-svg "")
echo "$out" | grep -q "^# lambda_comm = .* bus bandwidth" || { echo "FAIL: no lambda_comm line: $out"; exit 1; }
[ "$(echo "$out" | grep -c '^ *[12] \+\(64\|128\|256\) ')" = 6 ] || { echo "FAIL: table rows: $out"; exit 1; }
echo "$out" | grep -q "^# aim (prediction within 25% of measured" || { echo "FAIL: no aim line: $out"; exit 1; }
[ -s "$work/t.json" ] || { echo "FAIL: no --out-json file"; exit 1; }

err=$(run 2 bench tp-profile --min-d 0 2>&1 >/dev/null) && { echo "FAIL: min-d 0 accepted"; exit 1; }
[ "$(echo "$err" | grep -c 'min-d (0) and max-d (8192) must satisfy 1 <= min-d <= max-d')" = 2 ] || { echo "FAIL: $err"; exit 1; }
err=$(run 2 bench tp-profile $tiny --out-svg "$work/missing/p.svg" 2>&1 >/dev/null) && { echo "FAIL: bad --out-svg accepted"; exit 1; }
[ "$(echo "$err" | grep -c "out-svg ($work/missing/p.svg) must be a file rank 0 can write")" = 2 ] || { echo "FAIL: $err"; exit 1; }
echo "bench_tp_profile_test: all passed"
