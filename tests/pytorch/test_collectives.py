"""Every torch.distributed operation on backend "gradmesh" against Gloo's
results (or, where Gloo lacks the operation or dtype, against Gloo's
results for an equivalent it has), for float32, float64, bfloat16 and int64,
sizes that split unevenly, and non-contiguous tensors, on 2, 3 and 4 ranks."""
import sys

import torch
import torch.distributed as dist

import harness

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.int64]
SIZES = [1, 7, 1001, 70001]  # 70001 x 8 bytes crosses the shared-memory mailbox's chunks


def op_name(op):
    return {dist.ReduceOp.SUM: "sum", dist.ReduceOp.AVG: "avg", dist.ReduceOp.MIN: "min", dist.ReduceOp.MAX: "max",
            dist.ReduceOp.PRODUCT: "product", dist.ReduceOp.BAND: "band", dist.ReduceOp.BOR: "bor",
            dist.ReduceOp.BXOR: "bxor"}.get(op, str(op))


def make(rank, numel, dtype, salt=0):
    """Rank's input: every rank can rebuild every other rank's."""
    g = torch.Generator().manual_seed(rank * 1_000_003 + numel * 31 + salt)
    if dtype == torch.int64:
        return torch.randint(-1000, 1000, (numel,), generator=g, dtype=torch.int64)
    return (torch.randn(numel, generator=g, dtype=torch.float64) * 3).to(dtype)


def assert_close(got, want, dtype, what, size):
    if dtype == torch.int64:
        assert torch.equal(got, want), f"{what}: {got[:8]} != {want[:8]}"
        return
    # float32 and float64 sums differ from Gloo's only in the order of
    # additions. bfloat16 is added in float32 and rounded once on one host;
    # a ring (gloo) rounds each partial sum, so the error scales with the
    # magnitude of the partial sums, not of the result.
    tol = {torch.float32: 1e-5, torch.float64: 1e-12, torch.bfloat16: 1e-2}[dtype] * size
    got64, want64 = got.double(), want.double()
    atol = tol * max(1.0, want64.abs().max().item())
    assert torch.allclose(got64, want64, rtol=tol, atol=atol), \
        f"{what}: max difference {(got64 - want64).abs().max().item()} over tolerance {tol}"


def gloo_allreduce(t, op, size, gloo):
    """Gloo's all-reduce of t (bfloat16 in float32, avg as sum / size)."""
    ref = t.clone().float() if t.dtype == torch.bfloat16 else t.clone()
    dist.all_reduce(ref, op=dist.ReduceOp.SUM if op == dist.ReduceOp.AVG else op, group=gloo)
    if op == dist.ReduceOp.AVG:
        ref = ref / size
    return ref.to(t.dtype)


def check_allreduce(rank, size, gloo, dtype, numel):
    ops = [dist.ReduceOp.SUM, dist.ReduceOp.MIN, dist.ReduceOp.MAX, dist.ReduceOp.PRODUCT]
    if dtype != torch.int64:
        ops.append(dist.ReduceOp.AVG)
    for op in ops:
        x = make(rank, numel, dtype)
        if op == dist.ReduceOp.PRODUCT:  # keep products finite
            x = (x.double().sign() * (1 + x.double().abs() / 1000)).to(dtype) if dtype != torch.int64 else x % 3
        want = gloo_allreduce(x, op, size, gloo)
        got = x.clone()
        dist.all_reduce(got, op=op)
        assert_close(got, want, dtype, f"all_reduce {op_name(op)} {dtype} x {numel}", size)
    if dtype == torch.int64:
        for op in (dist.ReduceOp.BAND, dist.ReduceOp.BOR, dist.ReduceOp.BXOR):
            x = make(rank, numel, dtype)
            want = x.clone()
            dist.all_reduce(want, op=op, group=gloo)
            dist.all_reduce(x, op=op)
            assert torch.equal(x, want), f"all_reduce {op_name(op)} int64 x {numel}"


def check_noncontiguous(rank, size, gloo, dtype, numel):
    base = make(rank, numel * 2, dtype).view(2, numel)
    got = base.clone().t()  # strides (1, numel): not contiguous
    assert not got.is_contiguous() or numel == 1
    want = gloo_allreduce(got.contiguous(), dist.ReduceOp.SUM, size, gloo)
    dist.all_reduce(got)
    assert_close(got.contiguous(), want, dtype, f"non-contiguous all_reduce {dtype} x {numel}", size)
    strided = make(rank, numel * 3, dtype)[::3]
    root = size - 1
    dist.broadcast(strided, src=root)
    assert torch.equal(strided, make(root, numel * 3, dtype)[::3]), "non-contiguous broadcast"
    outs = [torch.empty(numel * 2, dtype=dtype)[::2] for _ in range(size)]
    dist.all_gather(outs, make(rank, numel * 2, dtype)[1::2])
    for r in range(size):
        assert torch.equal(outs[r], make(r, numel * 2, dtype)[1::2]), f"non-contiguous all_gather from rank {r}"


def check_movement(rank, size, gloo, dtype, numel):
    for root in range(size):
        got = make(rank, numel, dtype, salt=root)
        dist.broadcast(got, src=root)
        assert torch.equal(got, make(root, numel, dtype, salt=root)), f"broadcast from {root} {dtype} x {numel}"
    x = make(rank, numel, dtype)
    outs = [torch.empty(numel, dtype=dtype) for _ in range(size)]
    dist.all_gather(outs, x)
    refs = [torch.empty(numel, dtype=dtype) for _ in range(size)]
    dist.all_gather(refs, x.float() if dtype == torch.bfloat16 else x, group=gloo) if dtype != torch.bfloat16 else None
    for r in range(size):
        assert torch.equal(outs[r], make(r, numel, dtype)), f"all_gather from rank {r} {dtype} x {numel}"
        if dtype != torch.bfloat16:
            assert torch.equal(outs[r], refs[r]), f"all_gather against gloo, rank {r}"
    flat = torch.empty(numel * size, dtype=dtype)
    dist.all_gather_into_tensor(flat, x)
    assert torch.equal(flat, torch.cat(outs)), f"all_gather_into_tensor {dtype} x {numel}"
    gathered = [torch.empty(numel, dtype=dtype) for _ in range(size)] if rank == 0 else None
    dist.gather(x, gathered, dst=0)
    if rank == 0:
        assert all(torch.equal(gathered[r], outs[r]) for r in range(size)), "gather"
    part = torch.empty(numel, dtype=dtype)
    dist.scatter(part, [make(r, numel, dtype, salt=7) for r in range(size)] if rank == size - 1 else None,
                 src=size - 1)
    assert torch.equal(part, make(rank, numel, dtype, salt=7)), "scatter"


def check_reduce_scatter(rank, size, gloo, dtype, numel):
    for op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX) + ((dist.ReduceOp.AVG,) if dtype != torch.int64 else ()):
        x = make(rank, numel * size, dtype)
        want = gloo_allreduce(x, op, size, gloo)[rank * numel:(rank + 1) * numel]
        out = torch.empty(numel, dtype=dtype)
        dist.reduce_scatter_tensor(out, x, op=op)
        assert_close(out, want, dtype, f"reduce_scatter_tensor {op_name(op)} {dtype} x {numel}", size)
        out_list = torch.empty(numel, dtype=dtype)
        dist.reduce_scatter(out_list, list(x.chunk(size)), op=op)
        assert torch.equal(out_list, out), f"reduce_scatter (list) {op_name(op)} {dtype} x {numel}"


def check_all_to_all(rank, size, gloo, dtype, numel):
    # Uneven splits: rank r sends (r + p) % 3 + numel rows to rank p.
    rows_to = [(rank + p) % 3 + numel for p in range(size)]
    rows_from = [(p + rank) % 3 + numel for p in range(size)]
    x = make(rank, sum(rows_to) * 2, dtype).view(-1, 2)
    out = torch.empty(sum(rows_from), 2, dtype=dtype)
    dist.all_to_all_single(out, x, rows_from, rows_to)
    if dtype != torch.bfloat16:
        ref = torch.empty_like(out)
        dist.all_to_all_single(ref, x, rows_from, rows_to, group=gloo)
        assert torch.equal(out, ref), f"all_to_all_single against gloo {dtype} x {numel}"
    offset = 0
    for p in range(size):
        theirs = make(p, sum((p + q) % 3 + numel for q in range(size)) * 2, dtype).view(-1, 2)
        start = sum((p + q) % 3 + numel for q in range(rank))
        assert torch.equal(out[offset:offset + rows_from[p]], theirs[start:start + rows_from[p]]), \
            f"all_to_all_single rows from rank {p}"
        offset += rows_from[p]
    ins = [make(rank, numel, dtype, salt=p) for p in range(size)]
    outs = [torch.empty(numel, dtype=dtype) for _ in range(size)]
    dist.all_to_all(outs, ins)
    for p in range(size):
        assert torch.equal(outs[p], make(p, numel, dtype, salt=rank)), f"all_to_all from rank {p}"


def check_point_to_point(rank, size, gloo, dtype, numel):
    right, left = (rank + 1) % size, (rank - 1) % size
    got = torch.empty(numel, dtype=dtype)
    if rank % 2 == 0:
        dist.send(make(rank, numel, dtype), right, tag=5)
        dist.recv(got, left, tag=5)
    else:
        dist.recv(got, left, tag=5)
        dist.send(make(rank, numel, dtype), right, tag=5)
    assert torch.equal(got, make(left, numel, dtype)), f"recv from {left} {dtype} x {numel}"
    # Asynchronous: post the receive first, then send, then wait for both.
    got2 = torch.empty(numel, dtype=dtype)
    req = dist.irecv(got2, left, tag=9)
    dist.isend(make(rank, numel, dtype, salt=9), right, tag=9).wait()
    req.wait()
    assert torch.equal(got2, make(left, numel, dtype, salt=9)), "irecv"


def every_operation(rank, size, gloo):
    for dtype in DTYPES:
        for numel in SIZES:
            check_allreduce(rank, size, gloo, dtype, numel)
            check_movement(rank, size, gloo, dtype, numel)
            check_reduce_scatter(rank, size, gloo, dtype, numel)
            check_all_to_all(rank, size, gloo, dtype, min(numel, 1001))
            check_point_to_point(rank, size, gloo, dtype, numel)
            check_noncontiguous(rank, size, gloo, dtype, min(numel, 1001))
    dist.barrier()
    work = dist.all_reduce(torch.ones(4), async_op=True)
    fut = work.get_future()
    assert torch.equal(fut.wait()[0], torch.full((4,), float(size))), "the future's value"
    return True


def test_every_operation_on_2_ranks():
    harness.run(every_operation, 2)


def test_every_operation_on_3_ranks():
    harness.run(every_operation, 3)


def test_every_operation_on_4_ranks():
    harness.run(every_operation, 4)


def wire_bytes(rank, size, gloo, numel):
    import gradmesh.torch as gt

    def sent():
        return sum(t["sent"] for t in gt.traffic().values())

    counts = {}
    for dtype in (torch.float32, torch.bfloat16):
        x = make(rank, numel, dtype)
        before = sent()
        for _ in range(10):
            dist.all_reduce(x)
        counts[str(dtype)] = sent() - before
    return counts


def test_bf16_tensors_cross_the_wire_in_16_bits():
    for transport in ("shm", "gloo"):
        import os
        os.environ["GRADMESH_BACKEND"] = transport
        counts = harness.run(wire_bytes, 2, 1 << 20)[0]
        ratio = counts["torch.bfloat16"] / counts["torch.float32"]
        print(f"{transport}: float32 {counts['torch.float32']} bytes, bfloat16 {counts['torch.bfloat16']}: {ratio:.3f}")
        assert 0.45 < ratio < 0.55, f"{transport}: bfloat16 sent {ratio:.3f} of float32's bytes"


def what_scripts_pass(rank, size, gloo):
    """Inputs from ordinary scripts that a backend must take as Gloo takes them."""
    # Pickled objects travel as uint8 tensors of any length (odd ones too).
    objects = ["abcd", {"rank": 0}] if rank == 0 else [None, None]
    dist.broadcast_object_list(objects, src=0)
    assert objects == ["abcd", {"rank": 0}], objects
    gathered = [None] * size
    dist.all_gather_object(gathered, "x" * (rank + 1))
    assert gathered == ["x" * (r + 1) for r in range(size)], gathered
    got = [None]
    dist.scatter_object_list(got, [f"to {r}" for r in range(size)] if rank == 0 else None, src=0)
    assert got == [f"to {rank}"], got
    # Empty tensors, on the native and the gathered path.
    for dtype in (torch.float32, torch.int64):
        empty = torch.empty(0, dtype=dtype)
        dist.all_reduce(empty)
        dist.all_reduce(empty, op=dist.ReduceOp.PRODUCT)
    # Tensors made in inference mode, contiguous or not.
    with torch.inference_mode():
        a = torch.ones(5, dtype=torch.int64)
        dist.all_reduce(a)
        b = torch.ones(4, 4).t()
        dist.all_reduce(b)
        assert a[0].item() == size and b[0, 0].item() == size
    # Tensors with autograd history: written as raw memory, as Gloo writes them.
    results = []
    for group in (None, gloo):
        x = torch.ones(4, dtype=torch.float64, requires_grad=True)
        y = x * 2
        dist.all_reduce(y, group=group)
        y.sum().backward()
        leaf = torch.ones(4, 4, dtype=torch.float64, requires_grad=True)
        dist.broadcast(leaf.t(), src=0, group=group)
        results.append((y.detach().clone(), x.grad.clone()))
    assert torch.equal(results[0][0], results[1][0]) and torch.equal(results[0][1], results[1][1]), results
    # reduce_scatter_tensor into a slice of its own input.
    x = make(rank, 8 * size, torch.float32)
    want = gloo_allreduce(x, dist.ReduceOp.SUM, size, gloo)[rank * 8:(rank + 1) * 8]
    dist.reduce_scatter_tensor(x[rank * 8:(rank + 1) * 8], x)
    assert_close(x[rank * 8:(rank + 1) * 8], want, torch.float32, "reduce_scatter_tensor in place", size)
    return True


def test_what_scripts_pass_works_as_on_gloo():
    harness.run(what_scripts_pass, 2)


def subgroups(rank, size, gloo):
    import gradmesh.torch as gt
    evens = dist.new_group([0, 2])
    evens_gloo = dist.new_group([0, 2], backend="gloo")
    tail = dist.new_group([1, 2, 3])
    tail_gloo = dist.new_group([1, 2, 3], backend="gloo")
    for dtype in DTYPES:
        x = make(rank, 1001, dtype)
        if rank in (0, 2):
            got, want = x.clone(), gloo_allreduce(x, dist.ReduceOp.SUM, 2, evens_gloo)
            dist.all_reduce(got, group=evens)
            assert_close(got, want, dtype, f"all_reduce in [0, 2] {dtype}", 2)
            assert gt.transport(evens) == "shm"
        if rank in (1, 2, 3):
            got, want = x.clone(), gloo_allreduce(x, dist.ReduceOp.MAX, 3, tail_gloo)
            dist.all_reduce(got, op=dist.ReduceOp.MAX, group=tail)
            assert_close(got, want, dtype, f"all_reduce in [1, 2, 3] {dtype}", 3)
            b = make(rank, 77, dtype)
            dist.broadcast(b, src=3, group=tail)  # src is a global rank
            assert torch.equal(b, make(3, 77, dtype)), "broadcast in a subgroup from global rank 3"
    return True


def test_subgroups_match_gloo():
    harness.run(subgroups, 4)


if __name__ == "__main__":
    harness.main(globals())
