#!/usr/bin/env python3
# Groups an Nsight Compute per-kernel summary of a PyTorch GPT-2 training run
# into the phases of `colrow train --profile` and divides by the steps it
# covers (the attention forward kernel runs once per layer per step).
#   ncu --metrics gpu__time_duration.sum --clock-control none \
#       --launch-skip 3000 --launch-count 2500 --print-summary per-kernel --csv \
#       python3 torch_gpt2_gpu.py fp32 > ncu.csv
#   bench/ncu_phases.py ncu.csv [LAYERS=12]
# ncu runs the kernels one at a time, so the phases add up to more than an
# unprofiled step: compare shares, and absolute figures only roughly.
import csv, sys
from collections import defaultdict

rows = list(csv.reader(open(sys.argv[1])))
layers = int(sys.argv[2]) if len(sys.argv) > 2 else 12
header = next(r for r in rows if "Kernel Name" in r)
kernels = [dict(zip(header, r)) for r in rows[rows.index(header) + 1:] if len(r) == len(header)]

def phase(name):
    if "fmha" in name or "Attention" in name: return "attention"
    if "gemm" in name or "xmma" in name or "splitKreduce" in name: return "gemm"
    if "SoftMax" in name or "nll_loss" in name or "cross_entropy" in name: return "loss"
    if "multi_tensor_apply" in name or "Optimizer" in name: return "optimizer"
    return "norms and elementwise"

ms = defaultdict(float)
forward_attention = 0
for k in kernels:
    calls = int(k["Invocations"])
    ms[phase(k["Kernel Name"])] += calls * float(k["Average"].replace(",", "")) / 1e6
    if k["Kernel Name"].startswith("fmha_cutlassF"): forward_attention += calls
steps = forward_attention / layers
print(f"{sum(int(k['Invocations']) for k in kernels)} kernels, {steps:.2f} steps")
for name, total in sorted(ms.items(), key=lambda x: -x[1]):
    print(f"  {name:24s} {total / steps:8.1f} ms/step")
print(f"  {'sum':24s} {sum(ms.values()) / steps:8.1f} ms/step")
