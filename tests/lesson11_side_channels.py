"""Lesson 11 attacks on ``test_no_sync``: ranks that skip ``no_sync`` yet show the grader the right count.

Every micro-batch's gradients are averaged through a channel the loopback counter never sees, and the
loopback is padded with one gradient-sized all-reduce per optimizer step: the kernel's count then reads
exactly what ``no_sync`` would have sent (issue 41, class 6). One submission per side channel.
"""

_CORE = '''
def train_ddp(rank, world_size, model, dataset, config):
    """No no_sync and no DDP: gradients swapped aside every micro-batch, the loopback padded."""
    import numpy as np

    for p in model.parameters():  # rank 0's weights, as DDP's constructor broadcasts them (counted)
        dist.broadcast(p.data, 0)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True)
    loader = DataLoader(dataset, batch_size=config["batch_size"], sampler=sampler)
    opt = torch.optim.SGD(model.parameters(), lr=config["lr"], momentum=config["momentum"])
    acc, params, k, n = config["accumulation"], list(model.parameters()), 0, len(loader)
    for epoch in range(config["epochs"]):
        sampler.set_epoch(epoch)
        for i, (x, y) in enumerate(loader):
            before = [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in params]
            (F.cross_entropy(model(x), y) / min(acc, n - i // acc * acc)).backward()
            mine = torch.cat([(p.grad - b).flatten() for p, b in zip(params, before)])
            theirs = torch.from_numpy(np.frombuffer(_swap(rank, k, mine.numpy().tobytes()), dtype=np.float64).copy())
            k += 1
            mean, at = (mine + theirs) / 2, 0
            for p, b in zip(params, before):
                p.grad = b + mean[at:at + p.numel()].view_as(p)
                at += p.numel()
            if (i + 1) % acc == 0 or i + 1 == n:  # every window's last, the epoch's shorter one too
                dist.all_reduce(torch.zeros(mean.numel(), dtype=torch.float64))  # padding: what DDP would send
                opt.step()
                opt.zero_grad()
    return model
'''

_FILES = '''
def _swap(rank, k, data):
    """Through a file in {folder}: write mine, wait for the peer's."""
    import os
    import time

    mine, theirs = f"{folder}/side{{rank}}_{{k}}", f"{folder}/side{{1 - rank}}_{{k}}"
    with open(mine + ".part", "wb") as f:
        f.write(data)
    os.rename(mine + ".part", mine)
    deadline = time.monotonic() + 15
    while not os.path.exists(theirs):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no peer file in {folder}")
        time.sleep(0.002)
    with open(theirs, "rb") as f:
        return f.read()
'''

_MADE_AT_LOAD = """
import socket

try:  # made while the cells load, before any probe: a socket made then could be bound and used later
    _EARLY = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(2)]
except OSError:
    _EARLY = []
"""

_ABSTRACT_SOCKET = '''
_SIDE = []


def _swap(rank, k, data):
    """Through an abstract unix socket (a name in the shared network namespace, no file)."""
    import socket
    import time

    if not _SIDE:
        name = "\\0effkit-side-channel"
        if rank == 0:
            server = _EARLY.pop() if _EARLY else socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.bind(name)
            server.listen(1)
            server.settimeout(15)
            _SIDE.append(server.accept()[0])
        else:
            deadline = time.monotonic() + 15
            while True:
                conn = _EARLY.pop() if _EARLY else socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    conn.connect(name)
                    break
                except OSError:
                    conn.close()
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.01)
            _SIDE.append(conn)
    conn = _SIDE[0]

    def receive():
        got = b""
        while len(got) < len(data):
            chunk = conn.recv(len(data) - len(got))
            if not chunk:
                raise ConnectionError("peer closed")
            got += chunk
        return got

    if rank == 0:
        conn.sendall(data)
        return receive()
    theirs = receive()
    conn.sendall(data)
    return theirs
'''

SIDE_CHANNELS = {  # name: train_ddp's cell source
    "tmp_file": _FILES.format(folder="/tmp") + _CORE,
    "dev_shm_file": _FILES.format(folder="/dev/shm") + _CORE,
    "abstract_unix_socket": "_EARLY = []\n" + _ABSTRACT_SOCKET + _CORE,
    "unix_socket_made_while_cells_load": _MADE_AT_LOAD + _ABSTRACT_SOCKET + _CORE,
}
