"""Training through backend "gradmesh": DDP's weights equal the same run on
Gloo within rounding, gradmesh's bf16 hook tracks float32, parameters
sharded as FSDP shards them train as DDP does, and ZeRO's optimizer
(ZeroRedundancyOptimizer) equals its run on Gloo."""
import torch
import torch.distributed as dist
import torch.nn as nn

import harness

STEPS = 30


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))


def batch(rank, step):
    g = torch.Generator().manual_seed(rank * 100_003 + step)
    x = torch.randn(32, 64, generator=g)
    return x, (x[:, :10].sum(1) * 3).long().clamp(0, 9)  # a learnable target


def train(net, rank, steps=STEPS):
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for step in range(steps):
        x, y = batch(rank, step)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def ddp(rank, size, gloo, hook):
    import gradmesh.torch as gt
    net = nn.parallel.DistributedDataParallel(model(), bucket_cap_mb=0.05)  # several buckets
    if hook:
        net.register_comm_hook(None, gt.bf16_gradient_hook)
    before = sum(t["sent"] for t in gt.traffic().values())
    losses = train(net, rank)
    sent = sum(t["sent"] for t in gt.traffic().values()) - before
    return [p.detach().clone() for p in net.parameters()], losses, sent


def compare(size):
    gloo = harness.run(ddp, size, False, backend="gloo")
    mesh = harness.run(ddp, size, False)
    for rank in range(size):
        for i, (a, b) in enumerate(zip(mesh[rank][0], gloo[rank][0])):
            assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), \
                f"rank {rank} parameter {i}: max difference {(a - b).abs().max().item()}"
    assert mesh[0][1][-1] < mesh[0][1][0] * 0.8, f"the loss did not fall: {mesh[0][1][0]} -> {mesh[0][1][-1]}"
    for i, (a, b) in enumerate(zip(mesh[0][0], mesh[-1][0])):
        assert torch.equal(a, b), f"parameter {i} differs between ranks 0 and {size - 1}"
    return mesh


def test_ddp_weights_equal_gloo_on_2_ranks():
    compare(2)


def test_ddp_weights_equal_gloo_on_3_ranks():
    compare(3)


def powersgd(rank, size, gloo):
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd
    net = nn.parallel.DistributedDataParallel(model())
    # Its hook waits, inside a future's callback, for another all-reduce.
    state = powersgd.PowerSGDState(process_group=None, matrix_approximation_rank=2, start_powerSGD_iter=3)
    net.register_comm_hook(state, powersgd.powerSGD_hook)
    train(net, rank)
    return [p.detach().clone() for p in net.parameters()]


def equals_gloo(fn):
    """Runs fn on 2 ranks on each backend; rank 0's parameters agree within rounding."""
    mesh = harness.run(fn, 2)
    gloo = harness.run(fn, 2, backend="gloo")
    for i, (a, b) in enumerate(zip(mesh[0], gloo[0])):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), f"parameter {i}: {(a - b).abs().max().item()}"


def test_torchs_powersgd_hook_equals_gloo():
    equals_gloo(powersgd)


def test_ddp_with_the_bf16_hook_tracks_float32():
    full = harness.run(ddp, 2, False)
    half = harness.run(ddp, 2, True)
    for i, (a, b) in enumerate(zip(half[0][0], full[0][0])):
        rel = ((a - b).norm() / b.norm()).item()
        assert rel < 0.02, f"parameter {i}: bf16 gradients moved it {rel:.4f} (relative) from the float32 run"
    for i, (a, b) in enumerate(zip(half[0][0], half[1][0])):
        assert torch.equal(a, b), f"parameter {i} differs between the ranks under the bf16 hook"
    ratio = half[0][2] / full[0][2]
    assert 0.45 < ratio < 0.55, f"the bf16 hook sent {ratio:.3f} of float32's bytes"
    print(f"final loss: float32 {full[0][1][-1]:.5f}, bf16 hook {half[0][1][-1]:.5f}; bytes sent {ratio:.3f}x")


def sharded(rank, size, gloo):
    """What FSDP does with its flat parameter each step (torch 1.13's FSDP
    itself needs CUDA): every rank keeps one shard of the parameters and of
    the optimizer state, all-gathers the full parameters before computing,
    and reduce-scatters the gradients (average) onto the shards."""
    net = model()
    params = list(net.parameters())
    flat = torch.cat([p.detach().reshape(-1) for p in params])
    per_rank = -(-flat.numel() // size)
    padded = torch.zeros(per_rank * size)
    padded[:flat.numel()] = flat
    shard = padded[rank * per_rank:(rank + 1) * per_rank].clone()
    velocity = torch.zeros_like(shard)
    full = torch.empty(per_rank * size)
    losses = []
    for step in range(STEPS):
        dist.all_gather_into_tensor(full, shard)
        offset = 0
        for p in params:
            p.data.copy_(full[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
        x, y = batch(rank, step)
        net.zero_grad()
        loss = nn.functional.cross_entropy(net(x), y)
        loss.backward()
        grads = torch.zeros(per_rank * size)
        grads[:flat.numel()] = torch.cat([p.grad.reshape(-1) for p in params])
        grad_shard = torch.empty(per_rank)
        dist.reduce_scatter_tensor(grad_shard, grads, op=dist.ReduceOp.AVG)
        velocity.mul_(0.9).add_(grad_shard)  # torch.optim.SGD's momentum, on the shard
        shard.sub_(velocity, alpha=0.05)
        losses.append(loss.item())
    dist.all_gather_into_tensor(full, shard)
    return full[:flat.numel()].clone(), losses


def test_sharded_parameters_train_as_ddp_does():
    shards = harness.run(sharded, 2)
    replicated = harness.run(ddp, 2, False)
    flat_full = torch.cat([p.reshape(-1) for p in replicated[0][0]])
    for rank in range(2):
        assert torch.allclose(shards[rank][0], flat_full, rtol=1e-4, atol=1e-5), \
            f"rank {rank}: sharded against DDP: max difference {(shards[rank][0] - flat_full).abs().max().item()}"


def zero(rank, size, gloo):
    from torch.distributed.optim import ZeroRedundancyOptimizer
    net = nn.parallel.DistributedDataParallel(model())
    opt = ZeroRedundancyOptimizer(net.parameters(), optimizer_class=torch.optim.SGD, lr=0.05, momentum=0.9)
    for step in range(STEPS):
        x, y = batch(rank, step)
        opt.zero_grad()
        nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in net.parameters()]


def test_zero_redundancy_optimizer_equals_gloo():
    equals_gloo(zero)


if __name__ == "__main__":
    harness.main(globals())
