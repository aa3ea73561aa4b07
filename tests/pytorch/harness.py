"""Runs a function on N real processes joined by torch.distributed.

Each worker initialises the default group with the backend under test over a
FileStore in a fresh directory, also makes a Gloo group of the same ranks for
reference results, calls the function and reports what it raised. The
parent fails naming the rank and the error; a worker that does not finish
within the deadline fails the run.
"""
import datetime
import multiprocessing
import os
import sys
import tempfile
import traceback

import torch
import torch.distributed as dist


def _worker(rank, size, store_dir, backend, fn, args, queue, timeout_s):
    try:
        import gradmesh.torch  # noqa: F401  registers the backend
        torch.manual_seed(1234 + rank)
        torch.set_num_threads(1)
        dist.init_process_group(backend, init_method="file://" + os.path.join(store_dir, "store"),
                                rank=rank, world_size=size, timeout=datetime.timedelta(seconds=timeout_s))
        gloo = dist.new_group(backend="gloo")
        result = fn(rank, size, gloo, *args)
        dist.barrier()
        dist.destroy_process_group()
        queue.put((rank, "ok", result))
    except BaseException:  # noqa: B902  reported to the parent
        queue.put((rank, "error", traceback.format_exc()))


def run(fn, size, *args, backend="gradmesh", timeout_s=60, deadline_s=180):
    """Runs fn(rank, size, gloo_group, *args) on `size` processes; returns their results by rank."""
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    with tempfile.TemporaryDirectory() as store_dir:
        procs = [ctx.Process(target=_worker, args=(r, size, store_dir, backend, fn, args, queue, timeout_s))
                 for r in range(size)]
        for p in procs:
            p.start()
        results, errors = {}, []
        try:
            for _ in range(size):
                rank, status, payload = queue.get(timeout=deadline_s)
                if status == "ok":
                    results[rank] = payload
                else:
                    errors.append(f"rank {rank}:\n{payload}")
        finally:
            for p in procs:
                p.join(timeout=10)
                if p.is_alive():
                    p.kill()
        if errors:
            raise AssertionError("\n".join(errors))
    return [results[r] for r in range(size)]


def main(module_globals):
    """tests/pytorch/<file>.py CASE runs test_CASE; no argument runs them all."""
    names = sys.argv[1:] or [n[5:] for n in module_globals if n.startswith("test_")]
    for name in names:
        module_globals["test_" + name]()
        print(f"ok: {name}", flush=True)
