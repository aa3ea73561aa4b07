"""Runs a function on N real processes joined by torch.distributed.

Each worker initialises the default group with the backend under test over a
FileStore in a fresh directory, also makes a Gloo group of the same ranks for
reference results, calls the function and reports what it raised. The
parent fails naming the rank and the error; a worker that does not finish
within the deadline fails the run.
"""
import datetime
import faulthandler
import io
import queue as queues
import signal
import multiprocessing
import os
import sys
import tempfile
import time
import traceback

import torch
import torch.distributed as dist


def _worker(rank, size, store_dir, backend, fn, args, queue, timeout_s, pg_options):
    faulthandler.register(signal.SIGUSR1)  # the parent asks a stuck worker where it is
    try:
        import gradmesh.torch  # noqa: F401  registers the backend
        torch.manual_seed(1234 + rank)
        torch.set_num_threads(1)
        dist.init_process_group(backend, init_method="file://" + os.path.join(store_dir, "store"),
                                rank=rank, world_size=size, timeout=datetime.timedelta(seconds=timeout_s),
                                pg_options=pg_options() if pg_options else None)
        gloo = dist.new_group(backend="gloo")
        result = fn(rank, size, gloo, *args)
        if backend != "gradmesh" or not gradmesh.torch.is_broken():
            dist.barrier()
        dist.destroy_process_group()
        # Serialised here: a tensor put on the queue as it is would be shared
        # through a descriptor that dies with this process.
        buffer = io.BytesIO()
        torch.save(result, buffer)
        queue.put((rank, "ok", buffer.getvalue()))
    except BaseException:  # noqa: B902  reported to the parent
        queue.put((rank, "error", traceback.format_exc()))


def run(fn, size, *args, backend="gradmesh", timeout_s=60, deadline_s=120, lost=(), pg_options=None):
    """Runs fn(rank, size, gloo_group, *args) on `size` processes; returns their results by rank.

    `lost`: ranks expected to exit without reporting (a killed worker); their result is None.
    """
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    with tempfile.TemporaryDirectory() as store_dir:
        procs = [ctx.Process(target=_worker,
                             args=(r, size, store_dir, backend, fn, args, queue, timeout_s, pg_options))
                 for r in range(size)]
        for p in procs:
            p.start()
        results, errors, reported = {}, [], set()
        try:
            for _ in range(size - len(lost)):
                try:
                    rank, status, payload = queue.get(timeout=deadline_s)
                except queues.Empty:
                    silent = [r for r in range(size) if r not in reported and r not in lost]
                    for r in silent:
                        if procs[r].is_alive():
                            os.kill(procs[r].pid, signal.SIGUSR1)  # its stacks go to stderr
                    time.sleep(1)
                    raise AssertionError(f"ranks {silent} did not finish within {deadline_s} s; their stacks are above")
                reported.add(rank)
                if status == "ok":
                    results[rank] = torch.load(io.BytesIO(payload))
                else:
                    errors.append(f"rank {rank}:\n{payload}")
        finally:
            for p in procs:
                p.join(timeout=10)
                if p.is_alive():
                    p.kill()
        if errors:
            raise AssertionError("\n".join(errors))
    return [results.get(r) for r in range(size)]


def main(module_globals):
    """tests/pytorch/<file>.py CASE runs test_CASE; no argument runs them all."""
    names = sys.argv[1:] or [n[5:] for n in module_globals if n.startswith("test_")]
    for name in names:
        module_globals["test_" + name]()
        print(f"ok: {name}", flush=True)
