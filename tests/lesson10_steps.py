"""Lesson 10 (b): wrong ``fast_step`` submissions shared by the exercise tests and the calibration script.

``PER_SAMPLE_LOOP_KEPT`` is the half-fix: the list round trips, the float64 sum and ``.item()`` per
sample are gone, the per-sample loop is kept. Correct, and only ~1.1-1.3x faster than the original:
the speed cell's target must sit above it (grader/assignments/lesson10/calibration/lesson10_calibrate.py --step).
"""

HEAD = "import torch\nimport torch.nn.functional as F\n\n\ndef fast_step(model, inputs, targets, lr, weight_decay):\n"
PER_SAMPLE_LOOP_KEPT = (
    HEAD
    + """    params = list(model.parameters())
    grads = [torch.zeros_like(p) for p in params]
    total = 0.0
    for i in range(len(inputs)):
        loss = F.cross_entropy(model(inputs[i : i + 1]), targets[i : i + 1])
        for g, s in zip(grads, torch.autograd.grad(loss, params)):
            g += s
        total = total + loss.detach()
    with torch.no_grad():
        for p, g in zip(params, grads):
            p -= lr * (g / len(inputs) + weight_decay * p)
    return float(total) / len(inputs)
"""
)
