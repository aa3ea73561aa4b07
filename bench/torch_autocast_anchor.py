"""Anchor: PyTorch (Debian python3-torch) training the reference MLP or CNN on
Fashion-MNIST in float32 or under torch.autocast("cpu", dtype=torch.bfloat16),
the same model, data, order and optimizer as ../shared/anchors/torch_fmnist.py
(single process). usage: torch_autocast_anchor.py mlp|cnn EPOCHS BATCH fp32|bf16
Prints one line: ... samples/s=N test_acc=A"""
import gzip, os, sys, time, numpy as np, torch, torch.nn as nn

D = "/usr/share/datasets/fashion-mnist"


def idx(name):
    with gzip.open(os.path.join(D, name)) as f:
        data = f.read()
    nd = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(nd)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * nd).reshape(dims)


def model(kind):
    if kind == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                             nn.Linear(512, 10))
    return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(1600, 128), nn.ReLU(), nn.Linear(128, 10))


def main():
    kind, epochs, batch, precision = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    torch.manual_seed(0)
    X = torch.tensor(idx("train-images-idx3-ubyte.gz"), dtype=torch.float32).div_(255).unsqueeze(1)
    Y = torch.tensor(idx("train-labels-idx1-ubyte.gz"), dtype=torch.long)
    Xt = torch.tensor(idx("t10k-images-idx3-ubyte.gz"), dtype=torch.float32).div_(255).unsqueeze(1)
    Yt = torch.tensor(idx("t10k-labels-idx1-ubyte.gz"), dtype=torch.long)
    m = model(kind)
    opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")
    n = len(X)
    t0 = time.time()
    seen = 0
    for ep in range(epochs):
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(ep))
        for s in range(n // batch):
            i = perm[s * batch:(s + 1) * batch]
            with autocast:
                loss = nn.functional.cross_entropy(m(X[i]), Y[i])
            opt.zero_grad()
            loss.backward()
            opt.step()
            seen += batch
    dt = time.time() - t0
    with torch.no_grad(), autocast:
        acc = (m(Xt).argmax(1) == Yt).float().mean().item()
    print(f"torch {torch.__version__} {kind} {precision} threads={torch.get_num_threads()} epochs={epochs} "
          f"batch={batch} samples/s={seen / dt:.0f} test_acc={acc:.4f} time={dt:.1f}s")


main()
