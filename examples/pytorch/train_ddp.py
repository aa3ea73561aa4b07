#!/usr/bin/env python3
"""A PyTorch DDP script on backend "gradmesh" that survives restarts.

    gradmesh launch --nproc-per-node 2 --max-restarts 2 -- \
        python3 examples/pytorch/train_ddp.py --epochs 3 --checkpoint runs/torch-ddp

The reference MLP on Fashion-MNIST (Debian's dataset-fashion-mnist), SGD with
momentum, global batch 128. After every epoch rank 0 saves the model and
optimizer state with torch.save (to a temporary file, then renamed, so a
crash never leaves half a checkpoint), and every rank loads the newest one at
start: when `gradmesh launch --max-restarts` starts the workers again after a
failure, the job continues from the last finished epoch, with the same
weights it would have had without the failure.

--fail-once-at-epoch N makes rank 1 of the first generation exit at the start
of epoch N, to watch a restart happen.
"""
import argparse
import gzip
import os
import sys

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn

import gradmesh.torch  # registers the "gradmesh" backend

DATA = "/usr/share/datasets/fashion-mnist"


def idx(name):
    with gzip.open(os.path.join(DATA, name)) as f:
        data = f.read()
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(data[3])]
    return torch.from_numpy(np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * data[3]).reshape(dims).copy())


def load(split, limit):
    images = idx(f"{split}-images-idx3-ubyte.gz")[:limit].float().div_(255).flatten(1)
    labels = idx(f"{split}-labels-idx1-ubyte.gz")[:limit].long()
    return images, labels


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--checkpoint", required=True, help="directory of the epoch checkpoints")
    ap.add_argument("--train-samples", type=int, default=60000)
    ap.add_argument("--bf16-gradients", action="store_true", help="gradmesh.torch.bf16_gradient_hook")
    ap.add_argument("--fail-once-at-epoch", type=int, default=-1)
    args = ap.parse_args()

    dist.init_process_group("gradmesh")  # RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT from the launcher
    rank, world = dist.get_rank(), dist.get_world_size()
    generation = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    path = os.path.join(args.checkpoint, "last.pt")
    start = 0
    if os.path.exists(path):
        state = torch.load(path)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = state["epoch"] + 1
        if rank == 0:
            print(f"generation {generation}: resuming after epoch {state['epoch']}", flush=True)
    ddp = nn.parallel.DistributedDataParallel(model)
    if args.bf16_gradients:
        ddp.register_comm_hook(None, gradmesh.torch.bf16_gradient_hook)

    x, y = load("train", args.train_samples)
    xt, yt = load("t10k", 10000)
    batch = 128 // world
    for epoch in range(start, args.epochs):
        if epoch == args.fail_once_at_epoch and generation == 0 and rank == 1:
            print(f"rank 1 exits at the start of epoch {epoch}, as asked", flush=True)
            sys.exit(17)
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(epoch))
        for step in range(len(x) // 128):
            i = order[step * 128 + rank * batch: step * 128 + (rank + 1) * batch]
            opt.zero_grad()
            nn.functional.cross_entropy(ddp(x[i]), y[i]).backward()
            opt.step()
        with torch.no_grad():
            accuracy = (model(xt).argmax(1) == yt).float().mean().item()
        if rank == 0:
            os.makedirs(args.checkpoint, exist_ok=True)
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": epoch}, path + ".tmp")
            os.replace(path + ".tmp", path)
            print(f"epoch {epoch} test_accuracy={accuracy:.4f} transport={gradmesh.torch.transport()}", flush=True)
        dist.barrier()  # nobody starts the next epoch before the checkpoint is in place
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
