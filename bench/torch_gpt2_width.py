# torch_gpt2_width.py -- the PyTorch side of bench/sweep_d_model.sh: the GPU
# peer's GPT-2 training step (../shared/peers/torch_gpt2_gpu.py: the same
# blocks, SDPA attention, tied embeddings, fused AdamW on a GPU) at any width,
# depth and device. Prints one JSON line per mode: tokens/s, MFU (llm.c's
# 6N + 6LCT FLOPs per token, against the H100's peak on cuda) and peak memory.
#   C=1024 L=12 B=16 T=1024 DEVICE=cuda python3 torch_gpt2_width.py bf16 bf16-compile
import json, os, sys, time
import torch, torch.nn as nn, torch.nn.functional as F

C, L = int(os.environ.get("C", 768)), int(os.environ.get("L", 12))
H, V = C // 64, 50304
B, T = int(os.environ.get("B", 16)), int(os.environ.get("T", 1024))
DEV = os.environ.get("DEVICE", "cuda")
STEPS = int(os.environ.get("STEPS", 20))
PEAK = {"fp32": 67e12, "tf32": 494.7e12, "bf16": 989.4e12, "bf16-compile": 989.4e12}


class Block(nn.Module):
    def __init__(s):
        super().__init__()
        s.ln_1, s.c_attn, s.c_proj = nn.LayerNorm(C), nn.Linear(C, 3 * C), nn.Linear(C, C)
        s.ln_2, s.fc, s.proj = nn.LayerNorm(C), nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(s, x):
        b, t, c = x.shape
        q, k, v = s.c_attn(s.ln_1(x)).split(c, 2)
        q, k, v = (z.view(b, t, H, c // H).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c)
        x = x + s.c_proj(y)
        return x + s.proj(F.gelu(s.fc(s.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(s):
        super().__init__()
        s.wte, s.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        s.h, s.ln_f = nn.ModuleList(Block() for _ in range(L)), nn.LayerNorm(C)

    def forward(s, idx, tgt):
        x = s.wte(idx) + s.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in s.h:
            x = b(x)
        return F.cross_entropy((s.ln_f(x) @ s.wte.weight.T).float().view(-1, V), tgt.reshape(-1))


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


def run(mode):
    torch.manual_seed(0)
    if DEV == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = mode == "tf32"
    m = GPT().to(DEV)
    n_params = sum(p.numel() for p in m.parameters())
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4, **({"fused": True} if DEV == "cuda" else {}))
    f = torch.compile(m) if mode == "bf16-compile" else m
    data = torch.randint(0, V, (8, B, T + 1), device=DEV)

    def step(i):
        d = data[i % 8]
        with torch.autocast(DEV, torch.bfloat16, enabled=mode.startswith("bf16")):
            loss = f(d[:, :-1], d[:, 1:])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for i in range(5):
        step(i)
    sync()
    t0 = time.perf_counter()
    for i in range(STEPS):
        step(i)
    sync()
    dt = (time.perf_counter() - t0) / STEPS
    tok = B * T / dt
    fpt = 6 * n_params + 6 * L * C * T
    row = dict(engine="pytorch", mode=mode, d_model=C, n_layer=L, params=n_params, B=B, T=T,
               ms_per_step=dt * 1e3, tokens_per_s=tok, tflops=tok * fpt / 1e12)
    if DEV == "cuda":
        row.update(mfu=tok * fpt / PEAK[mode], peak_mem_gib=torch.cuda.max_memory_allocated() / 2**30)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    print(json.dumps(row), flush=True)


for mode in sys.argv[1:] or ["fp32"]:
    run(mode)
