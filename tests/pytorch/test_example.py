"""docs/pytorch.md's worked example, as a user runs it: examples/pytorch/train_ddp.py
under `gradmesh launch --max-restarts 1`, once straight through and once with a
worker exiting mid-run; the restarted job resumes from torch's own
checkpoint and ends with the same weights, bit for bit."""
import os
import subprocess
import sys
import tempfile

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "pytorch", "train_ddp.py")


def launch(checkpoint, *extra):
    cmd = [os.environ["GRADMESH_BINARY"], "launch", "--nproc-per-node", "2", "--max-restarts", "1",
           "--dashboard", "off", "--", sys.executable, EXAMPLE, "--epochs", "3", "--train-samples", "3200",
           "--checkpoint", checkpoint, *extra]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=240)
    assert out.returncode == 0, f"exit {out.returncode}:\n{out.stdout[-4000:]}"
    return out.stdout


def test_the_example_resumes_under_gradmesh_launch_to_the_same_weights():
    with tempfile.TemporaryDirectory() as d:
        straight = launch(os.path.join(d, "straight"))
        restarted = launch(os.path.join(d, "restarted"), "--fail-once-at-epoch", "1")
        assert "epoch 2 test_accuracy=" in straight, straight[-2000:]
        assert "rank 1 exits at the start of epoch 1" in restarted, restarted[-2000:]
        assert "generation 1: resuming after epoch 0" in restarted, restarted[-2000:]
        assert "transport=shm" in straight
        a = torch.load(os.path.join(d, "straight", "last.pt"))
        b = torch.load(os.path.join(d, "restarted", "last.pt"))
        assert a["epoch"] == b["epoch"] == 2
        for name in a["model"]:
            assert torch.equal(a["model"][name], b["model"][name]), f"{name} differs after the restart"
        print([line for line in restarted.splitlines() if "epoch" in line])


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import harness
    harness.main(globals())
