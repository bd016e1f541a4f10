#!/usr/bin/env bash
# Issue 10's measurements on a many-core machine (the GPU machine's 16 cores,
# through the device tool), one phase per device call (each well under its
# 10 minutes). Run in the repository root there, on build-gpu/ packed by
# scripts/gpu-pack.sh, which carries Debian's OpenMP build of OpenBLAS (xz):
#   bench/cpu16.sh pools   OUT   efficiency at R 1 x all cores, d 1024: the OpenMP build
#                                against the machine's own OpenBLAS (colrow's idle-pool
#                                settings, then both pools spinning as OpenBLAS and
#                                libgomp default), 2 interleaved rounds; SYSTEM_BLAS_DIR=
#                                stands in for the machine's own (to try it elsewhere)
#   bench/cpu16.sh scaling OUT [R...]  colrow bench mlp beside the PyTorch TP MLP peer
#                                (gloo), R ranks x cores/R threads, d 1024 and 4096, tokens
#                                2048; both sides pinned to the same cores (default R: 1 2 4 8 16)
#   bench/cpu16.sh comm    OUT   colrow bench comm, 1-16 MiB, all three collectives, 4/8/16 ranks
#   bench/cpu16.sh profile OUT   colrow bench tp-profile on every core: JSON and SVG
#   bench/cpu16.sh train   OUT   a whole training step with backward's tp collectives
#                                overlapped against waited for where they start
#                                (--no-overlap-tp-comm), without and with sequence
#                                parallelism: gpt2-124m, batch 8 x 256, tp 4 x cores/4
#                                threads, 2 alternating rounds (bench/compare_flags.sh;
#                                TRAIN_NP, MODEL, DATA override)
# colrow runs with the packed OpenMP build unless BLAS=system. COLROW= picks
# another binary (default build-gpu/colrow).
set -uo pipefail
phase=${1:?usage: bench/cpu16.sh pools|scaling|comm|profile|train OUT [R...]}
out=${2:?an output folder}
shift 2
mkdir -p "$out"
colrow=${COLROW:-build-gpu/colrow}
cores=$(nproc)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
packed=build-gpu/openblas-openmp
if [ -f "$packed/libopenblas.so.0.xz" ] && [ ! -f "$packed/libopenblas.so.0" ]; then
  xz -dk "$packed/libopenblas.so.0.xz"
fi
openmp_env=()
if [ "${BLAS:-packed}" = packed ]; then
  [ -f "$packed/libopenblas.so.0" ] || { echo "cpu16.sh: no $packed/libopenblas.so.0 (scripts/gpu-pack.sh packs it)" >&2; exit 1; }
  openmp_env=(LD_LIBRARY_PATH="$PWD/$packed")
fi
lscpu > "$out/lscpu.txt"

# mlp_json R THREADS D [env...]: one bench mlp JSON line, R ranks pinned to THREADS cores each.
mlp_json() {
  local r=$1 t=$2 d=$3; shift 3
  env "$@" timeout 300 mpirun -np "$r" --map-by "slot:PE=$t" --bind-to core \
    "$colrow" bench mlp --d-model "$d" --tokens 2048 --threads "$t" --min-seconds 0 \
    --min-iterations 5 --json 2>>"$out/stderr.txt" | tail -1
}

case $phase in
  pools)
    # The machine's own OpenBLAS: the default library, or SYSTEM_BLAS_DIR's.
    system_env=(-u LD_LIBRARY_PATH)
    [ -n "${SYSTEM_BLAS_DIR:-}" ] && system_env=(LD_LIBRARY_PATH="$SYSTEM_BLAS_DIR")
    for round in 1 2; do
      echo "openmp $(mlp_json 1 "$cores" 1024 "${openmp_env[@]}")" | tee -a "$out/pools.txt"
      echo "pthreads-idle-asleep $(mlp_json 1 "$cores" 1024 "${system_env[@]}")" | tee -a "$out/pools.txt"
      # Set but empty: colrow leaves them alone, libgomp and OpenBLAS keep their defaults.
      echo "pthreads-spinning $(mlp_json 1 "$cores" 1024 "${system_env[@]}" OMP_WAIT_POLICY= \
        OPENBLAS_THREAD_TIMEOUT=)" | tee -a "$out/pools.txt"
    done
    ;;
  scaling)
    [ "$#" -gt 0 ] || set -- 1 2 4 8 16
    peers=build-gpu/peers
    for r in "$@"; do
      t=$((cores / r))
      for d in 1024 4096; do
        echo "colrow R=$r $(mlp_json "$r" "$t" "$d" "${openmp_env[@]}")" | tee -a "$out/scaling-colrow.txt"
      done
      port=$((29500 + RANDOM % 1000)); pids=()
      for ((q = 0; q < r; q++)); do
        env RANK=$q WORLD_SIZE=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port NTHREADS=$t \
          OMP_NUM_THREADS=$t SEQS=2048 DIMS=1024,4096 taskset -c $((q * t))-$((q * t + t - 1)) \
          timeout 300 python3 "$peers/torch_tp_mlp.py" >> "$out/torch_R$r.txt" 2>&1 &
        pids+=($!)
      done
      for p in "${pids[@]}"; do wait "$p"; done
      grep '^result' "$out/torch_R$r.txt" | sed "s/^/torch R=$r /" | tee -a "$out/scaling-torch.txt"
    done
    ;;
  comm)
    for np in 4 8 16; do
      [ "$np" -le "$cores" ] || continue
      env "${openmp_env[@]}" timeout 150 mpirun -np "$np" --map-by "slot:PE=$((cores / np))" \
        --bind-to core "$colrow" bench comm --min-bytes 1048576 \
        --max-bytes 16777216 | tee "$out/comm_np$np.txt"
    done
    ;;
  profile)
    env "${openmp_env[@]}" timeout 500 mpirun -np "$cores" --bind-to core \
      "$colrow" bench tp-profile --out-json "$out/tp_profile.json" --out-svg "$out/tp_profile.svg" \
      | tee "$out/tp_profile.txt"
    ;;
  train)
    np=${TRAIN_NP:-4}
    for sp in "" "--sequence-parallel"; do
      env "${openmp_env[@]}" BUILD="$(dirname "$colrow")" NP="$np" MODEL="${MODEL:-gpt2-124m}" \
        BATCH=8 SEQ=256 STEPS=6 ROUNDS=2 A_NAME=overlapped A="" B_NAME=blocking \
        B="--no-overlap-tp-comm" EXTRA="--tp $np --data ${DATA:-build-gpu/jargon.txt.gz} $sp" \
        timeout 280 bench/compare_flags.sh 2>&1 | sed "s/^/tp $np ${sp:-(no SP)}: /" | tee -a "$out/train_overlap.txt"
    done
    ;;
  *)
    echo "cpu16.sh: unknown phase '$phase' (pools, scaling, comm, profile, train)" >&2
    exit 2
    ;;
esac
