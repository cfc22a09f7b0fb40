"""Samples (and process CPU seconds) to the CIFAR smoke target for optimized-recipe variants, per seed.

Counts do not depend on the machine's load, so this sweep can run on a busy host; CPU seconds are only
relative costs there. Output: benchmarks/results/cifar-batch-choice-epyc-zen3-2c.txt.

    OMP_WAIT_POLICY=PASSIVE python benchmarks/cifar_batch_sweep.py \
        '{"b250": {"batch_size": 250}, "b125": {"batch_size": 125}, "naive": {"recipe": "naive"}}' 0,1,2
"""

import json
import sys
import time

import torch

from effkit.workloads import cifar

torch.set_num_threads(2)
configs, seeds = json.loads(sys.argv[1]), [int(s) for s in sys.argv[2].split(",")]
for seed in seeds:
    for name, hooks in configs.items():
        hooks = dict(hooks)
        tr = cifar.build(hooks.pop("recipe", "optimized"), "smoke", seed=seed, **hooks)
        step, train_s, eval_s, hit, accs = 0, 0.0, 0.0, None, []
        while step < tr.total_steps and hit is None:
            n = min(tr.eval_every, tr.total_steps - step)
            c = time.process_time()
            tr.train_steps(n)
            train_s += time.process_time() - c
            step += n
            c = time.process_time()
            accs.append(round(tr.evaluate(), 3))
            eval_s += time.process_time() - c
            if accs[-1] >= tr.target:
                hit = step * tr.cfg.batch_size
        print(
            f"seed {seed} {name:10s} samples to target {hit or '-'}; cpu s train {train_s:.2f} "
            f"eval {eval_s:.2f}; accuracy after each evaluation {accs}",
            flush=True,
        )
