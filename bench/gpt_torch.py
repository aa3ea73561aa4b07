"""The gradmesh GPT written in PyTorch (nanoGPT's layout and names), plus the
counter-based RNG gradmesh draws training windows from, so a PyTorch run can
see exactly the batches a gradmesh run saw. Used by bench/gpt_oracle.py and
bench/gpt_speed.py; not a benchmark itself."""
import json, math, os, struct

import torch
import torch.nn as nn
import torch.nn.functional as F

WINDOW_PURPOSE = 5  # RngPurpose::kWindow in src/gradmesh/core/rng.h


class Attention(nn.Module):
    def __init__(s, c):
        super().__init__()
        s.n_head, s.n_embd = c["n_head"], c["n_embd"]
        s.c_attn = nn.Linear(s.n_embd, 3 * s.n_embd)
        s.c_proj = nn.Linear(s.n_embd, s.n_embd)

    def forward(s, x, cache=None):
        B, T, C = x.shape
        q, k, v = s.c_attn(x).split(C, dim=2)
        heads = lambda t: t.view(B, T, s.n_head, C // s.n_head).transpose(1, 2)
        q, k, v = heads(q), heads(k), heads(v)
        if cache is not None:  # one new position per call: append to the cache, attend to all of it
            cache.append((k, v))
            k = torch.cat([kv[0] for kv in cache], dim=2)
            v = torch.cat([kv[1] for kv in cache], dim=2)
        # nanoGPT's explicit attention (PyTorch 1.13 has no fused scaled_dot_product_attention).
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        if cache is None:
            att = att.masked_fill(torch.ones(T, T, dtype=torch.bool).tril().logical_not(), float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        return s.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(s, c):
        super().__init__()
        s.ln_1, s.attn, s.ln_2 = nn.LayerNorm(c["n_embd"]), Attention(c), nn.LayerNorm(c["n_embd"])
        s.mlp = nn.Module()
        s.mlp.c_fc = nn.Linear(c["n_embd"], 4 * c["n_embd"])
        s.mlp.c_proj = nn.Linear(4 * c["n_embd"], c["n_embd"])

    def forward(s, x, cache=None):
        x = x + s.attn(s.ln_1(x), cache)
        return x + s.mlp.c_proj(F.gelu(s.mlp.c_fc(s.ln_2(x))))


class GPT(nn.Module):
    """c: vocab_size, block_size, n_layer, n_head, n_embd, tie_weights."""

    def __init__(s, c):
        super().__init__()
        s.c = c
        s.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(c["vocab_size"], c["n_embd"]), wpe=nn.Embedding(c["block_size"], c["n_embd"]),
            h=nn.ModuleList([Block(c) for _ in range(c["n_layer"])]), ln_f=nn.LayerNorm(c["n_embd"])))
        s.lm_head = nn.Linear(c["n_embd"], c["vocab_size"], bias=False)
        if c.get("tie_weights", True):
            s.lm_head.weight = s.transformer.wte.weight
        for name, p in s.named_parameters():  # nanoGPT's init
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * c["n_layer"]))
            elif name.endswith(".weight") and p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)
            elif name.endswith(".bias"):
                nn.init.zeros_(p)

    def forward(s, idx, start=0, caches=None):
        B, T = idx.shape
        pos = torch.arange(start, start + T)
        x = s.transformer.wte(idx) + s.transformer.wpe(pos)
        for i, block in enumerate(s.transformer.h):
            x = block(x, None if caches is None else caches[i])
        return s.lm_head(s.transformer.ln_f(x))

    def optimizer(s, lr, weight_decay, betas, eps):
        decay = [p for p in s.parameters() if p.dim() >= 2]
        rest = [p for p in s.parameters() if p.dim() < 2]
        return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                                  {"params": rest, "weight_decay": 0.0}], lr=lr, betas=betas, eps=eps,
                                 foreach=False)


def gradmesh_state(model):
    """The model's tensors by gradmesh name (a tied head is saved once, as transformer.wte.weight)."""
    sd = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    if model.c.get("tie_weights", True):
        sd.pop("lm_head.weight")
    return sd


def save_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, t in tensors.items():
        data = t.to(torch.float32).numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        body = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        assert info["dtype"] == "F32", info
        out[name] = torch.frombuffer(bytearray(body[a:b]), dtype=torch.float32).view(info["shape"])
    return out


def read_tokens(directory, split):
    with open(os.path.join(directory, f"{split}.bin"), "rb") as f:
        raw = f.read()
    return torch.frombuffer(bytearray(raw), dtype=torch.int16).to(torch.int64) & 0xFFFF


# Philox4x32-10, as src/gradmesh/core/rng.cc.
M32 = 0xFFFFFFFF


def philox(counter, key):
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0) & M32, p1 & M32, ((p0 >> 32) ^ c3 ^ k1) & M32, p0 & M32
        k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
    return c0, c1, c2, c3


def below(seed, purpose, step, index, n):
    """CounterRng(seed, purpose, step).below(index, n)."""
    block = philox((index & M32, index >> 32, step & M32, ((purpose << 24) ^ (step >> 32)) & M32),
                   (seed & M32, seed >> 32))
    return (((block[0] << 32) | block[1]) * n) >> 64


def window_starts(seed, epoch, first, count, tokens, block_size):
    """Starts of training windows first..first+count-1 (data.shuffle = false)."""
    return [below(seed, WINDOW_PURPOSE, epoch, i, tokens - block_size) for i in range(first, first + count)]
