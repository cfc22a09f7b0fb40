"""Lesson 11 (b) submissions: ``train_sharded`` written the ways a learner might, shared by the tests
(tests/test_lesson11_exercise.py) and the calibration (grader/assignments/lesson11/calibration/lesson11_budget_calibrate.py).

Every variant trains correctly except ``alone``; they differ in what each rank holds per parameter
(fp32, Adam, 2 ranks): DDP 4 + 4 + 4 (bucket copy) + 8 = 20 B, the bucket view or ZeRO-1 16 B, both
12 B, FSDP2 8 B plus the unit it has gathered (parameters and gradients: a block of the grader's nested
model ~1 B, a stage over 4 B, the whole model 8 B). The attacks try to make the kernel's count smaller.
"""

_LOOP = """    for x, y in batches:
        F.cross_entropy(net(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return model
"""
_HEAD = "def train_sharded(rank, world_size, model, batches, config):\n"
_DDP_VIEW = """    net = DDP(model, gradient_as_bucket_view=True)
    opt = torch.optim.Adam(net.parameters(), lr=config["lr"])
"""

_MESH = """    from torch.distributed.device_mesh import init_device_mesh

    cpu = init_device_mesh("cpu", (world_size,))
"""
_PER_BLOCK = """    for module in model.modules():  # one unit per block (a module holding Linear layers itself)
        if module is not model and any(isinstance(c, torch.nn.Linear) for c in module.children()):
            fully_shard(module, mesh=cpu)
    net = fully_shard(model, mesh=cpu)
    opt = torch.optim.Adam(model.parameters(), lr=config["lr"])
"""

VARIANTS = {
    # the reference's recipe: FSDP2, a unit per block (the largest ~1/8 of the drawn model gathered at once)
    "fsdp_blocks": _HEAD + _MESH + _PER_BLOCK + _LOOP,
    # the lesson's FSDP2 branch (notebooks/11_ddp_zero.py, rank_peak) pasted unchanged: on the lesson's flat
    # Sequential every Linear became a unit; on the grader's nested model only the input and output layers
    # do, and the root unit gathers both stages, the whole model
    "lesson_fsdp_pasted": _HEAD
    + _MESH
    + """    from torch import nn  # the lesson's notebook imported it

    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=cpu)
    net = fully_shard(model, mesh=cpu)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
"""
    + _LOOP,
    # a unit per top-level child: each stage gathered whole, the larger over half the model
    "fsdp_stages": _HEAD
    + _MESH
    + """    for child in model:
        if any(True for _ in child.parameters()):
            fully_shard(child, mesh=cpu)
    net = fully_shard(model, mesh=cpu)
    opt = torch.optim.Adam(model.parameters(), lr=config["lr"])
"""
    + _LOOP,
    # ZeRO-1 whole-tensor (the lesson's 12-byte recipe): whole parameters and gradients on every rank
    "zero_view": _HEAD
    + """    net = DDP(model, gradient_as_bucket_view=True)
    opt = ZeroRedundancyOptimizer(net.parameters(), optimizer_class=torch.optim.Adam, lr=config["lr"])
"""
    + _LOOP,
    "zero": _HEAD
    + """    net = DDP(model)
    opt = ZeroRedundancyOptimizer(net.parameters(), optimizer_class=torch.optim.Adam, lr=config["lr"])
"""
    + _LOOP,
    "ddp_view": _HEAD + _DDP_VIEW + _LOOP,
    "ddp": _HEAD
    + """    net = DDP(model)
    opt = torch.optim.Adam(net.parameters(), lr=config["lr"])
"""
    + _LOOP,
    "alone": _HEAD
    + """    net = model  # no gradient averaging: each rank trains on its own half
    opt = torch.optim.Adam(net.parameters(), lr=config["lr"])
"""
    + _LOOP,
}

# Attacks on the measurement.
ATTACKS = {
    # on top of a recipe over the budget (DDP + bucket view, ~18 B): reset every peak the rank can find, and its own VmHWM, after training
    "reset_counters": _HEAD
    + _DDP_VIEW
    + _LOOP.replace(
        "    return model\n",
        """    import glob
    for path in glob.glob("/sys/fs/cgroup/**/memory*peak*", recursive=True) + glob.glob(
            "/sys/fs/cgroup/**/memory.max_usage_in_bytes", recursive=True):
        try:
            with open(path, "w") as f:
                f.write("0")
        except OSError:
            pass
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    return model
""",
    ),
    # memory taken while the cells load (before the call), reused during training
    # on top of a recipe within it (FSDP2 per block, ~10 B): the cells' load counts too
    "ballast_at_load": "BALLAST = torch.ones(40_000_000)  # 160 MB touched at load, before any call\n\n"
    + VARIANTS["fsdp_blocks"],
}
