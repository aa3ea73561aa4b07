"""What backend "gradmesh" adds over Gloo when things go wrong: a killed rank
is named in the surviving ranks' errors, within the group's timeout, and a
rank that issues a different collective is named instead of hanging."""
import functools
import os
import time

import torch
import torch.distributed as dist

import harness

TIMEOUT_S = 20


def killed_rank(rank, size, gloo):
    import gradmesh.torch as gt
    t = torch.ones(1000)
    dist.all_reduce(t)
    assert t[0].item() == size
    tail = dist.new_group([size - 2, size - 1])
    if rank == size - 1:
        os._exit(3)  # killed: no error, no goodbye
    in_subgroup = None
    if rank == size - 2:
        try:
            dist.all_reduce(torch.ones(10), group=tail)
        except RuntimeError as e:
            in_subgroup = str(e)
    start = time.monotonic()
    try:
        dist.all_reduce(torch.ones(1000))
    except RuntimeError as e:
        elapsed = time.monotonic() - start
        assert gt.is_broken(), "the group is marked broken after the failure"
        try:
            dist.all_reduce(torch.ones(10))
            raise AssertionError("an operation on a broken group succeeded")
        except RuntimeError as later:
            assert "broken" in str(later), str(later)
        return str(e), elapsed, in_subgroup
    raise AssertionError("all_reduce without rank %d succeeded" % (size - 1))


def test_a_killed_rank_is_named_by_the_survivors():
    results = harness.run(killed_rank, 3, timeout_s=TIMEOUT_S, lost=(2,))
    subgroup_message = results[1][2]
    assert "as global ranks: 0 = 1, 1 = 2" in subgroup_message, subgroup_message
    print(f"rank 1, in the subgroup of global ranks 1 and 2: {subgroup_message.splitlines()[0]}")
    for rank, (message, elapsed, _) in enumerate(results[:2]):
        assert "rank 2" in message, f"rank {rank}'s error does not name rank 2: {message}"
        assert elapsed < TIMEOUT_S + 5, f"rank {rank} learnt of it after {elapsed:.1f} s (timeout {TIMEOUT_S} s)"
        print(f"rank {rank}, after {elapsed:.2f} s: {message.splitlines()[0]}")


def mismatched(rank, size, gloo):
    try:
        dist.all_reduce(torch.ones(10 + (rank == 1)))
    except RuntimeError as e:
        return str(e)
    raise AssertionError("mismatched all_reduce sizes went unnoticed")


def test_mismatched_collectives_are_named_with_checking_on():
    import gradmesh.torch as gt
    results = harness.run(mismatched, 2, timeout_s=TIMEOUT_S,
                          pg_options=functools.partial(gt.Options, check=True))
    for rank, message in enumerate(results):
        assert "rank 1" in message or "rank 0" in message, f"rank {rank}: {message}"
        print(f"rank {rank}: {message.splitlines()[0]}")


def bad_calls(rank, size, gloo):
    problems = {}
    for name, call in {
        "two tensors": lambda: dist.all_reduce_coalesced([torch.ones(2), torch.ones(2)]),
        "avg of int64": lambda: dist.all_reduce(torch.ones(2, dtype=torch.int64), op=dist.ReduceOp.AVG),
        "band of float": lambda: dist.all_reduce(torch.ones(2), op=dist.ReduceOp.BAND),
        "uneven all_to_all": lambda: dist.all_to_all_single(torch.empty(3), torch.ones(3)),
        "short output": lambda: dist.all_gather_into_tensor(torch.empty(3), torch.ones(2)),
    }.items():
        try:
            call()
            problems[name] = "accepted"
        except (RuntimeError, ValueError) as e:
            problems[name] = str(e).splitlines()[0]
    return problems


def test_bad_calls_fail_on_the_caller_naming_what_is_wrong():
    for problems in harness.run(bad_calls, 2, timeout_s=TIMEOUT_S):
        for name, message in problems.items():
            assert message != "accepted", f"{name} was accepted"
            print(f"{name}: {message}")
        assert "int64" in problems["avg of int64"] and "band" in problems["band of float"], problems


if __name__ == "__main__":
    harness.main(globals())
