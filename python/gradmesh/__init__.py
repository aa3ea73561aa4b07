"""gradmesh from Python. `gradmesh.torch` is its torch.distributed backend."""
