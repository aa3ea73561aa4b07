"""gradmesh's collectives as a torch.distributed backend.

    import gradmesh.torch
    torch.distributed.init_process_group("gradmesh")

Groups run over gradmesh's process groups: shared memory on one host, the
hierarchical shm + Gloo group or Gloo across hosts, chosen per group
(GRADMESH_BACKEND overrides). docs/pytorch.md says what is supported.
"""
import torch
import torch.distributed as dist

from . import _C

__all__ = ["Options", "bf16_gradient_hook", "is_broken", "traffic", "transport"]


class Options:
    """Per-group options: init_process_group("gradmesh", pg_options=Options(check=True)).

    check: every collective first compares a fingerprint (operation, element
    count, dtype as it travels) across the ranks, so a rank that calls a
    different collective, or the same one with other sizes, fails every rank
    with an error naming it, instead of hanging or mixing data. Messages
    (send, recv, scatter, all-to-all) are not checked. GRADMESH_COMM_CHECK=1
    turns it on for every group.
    """

    def __init__(self, check=False):
        self.check = bool(check)


def _create_group(backend_options, pg_options):
    check = bool(getattr(pg_options, "check", False))
    return _C.create_group(
        backend_options.store,
        backend_options.group_rank,
        backend_options.group_size,
        backend_options.timeout,
        [int(r) for r in backend_options.global_ranks_in_group],
        check,
    )


if "GRADMESH" not in dist.Backend._plugins:
    dist.Backend.register_backend("gradmesh", _create_group, extended_api=True)


def _group(group):
    return group if group is not None else dist.distributed_c10d._get_default_group()


def transport(group=None):
    """The gradmesh transport under a gradmesh group: "shm", "gloo" or "hier"."""
    return _C.transport(_group(group))


def is_broken(group=None):
    """True once an operation of the group failed; every later one then fails at once."""
    return _C.is_broken(_group(group))


def traffic():
    """Bytes this process moved through gradmesh so far, per transport:
    {"shm": {"sent": ..., "received": ..., "inter_host_sent": ..., "inter_host_received": ...}}.
    """
    return _C.traffic()


def bf16_gradient_hook(process_group, bucket):
    """A DDP communication hook: each gradient bucket crosses the wire as
    bfloat16 (half the bytes of float32) through gradmesh's reduction, which
    adds in float32 and rounds once per hop, and is averaged and written back
    as float32.

        model.register_comm_hook(None, gradmesh.torch.bf16_gradient_hook)
    """
    group = _group(process_group)
    buffer = bucket.buffer()
    compressed = buffer.to(torch.bfloat16)
    work = dist.all_reduce(compressed, op=dist.ReduceOp.AVG, group=group, async_op=True)

    def decompress(fut):
        buffer.copy_(fut.value()[0])
        return buffer

    return work.get_future().then(decompress)
