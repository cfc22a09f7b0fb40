"""The parent's checks of a learner's saved weights, before it evaluates them."""

from __future__ import annotations

import os
import stat

import torch

from grader.sandbox.commit import load_state


def weights_problems(data, repeats: range, flags: list[str] | None = None) -> list[str]:
    """Parent-side checks of the learner's saved weights before they are evaluated: a plain file
    (no link: a learner could point it at the baseline's), different from the baseline's weights of
    the same run, and moved away from the shared initial weights (training happened)."""

    problems, flags = [], flags if flags is not None else []
    for r in repeats:
        path = data.weights_path("learner", r)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue  # reported by the evaluation
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            problems.append(
                f"run {r + 1}: your weights file is a link, not a file the worker wrote: refused"
            )
            continue
        try:
            mine = load_state(path)["model"]  # safetensors: parsed, nothing unpickled
            base = load_state(data.weights_path("baseline", r))["model"]
            init = torch.load(data.init_paths[r], map_location="cpu", weights_only=True)  # ours
        except Exception:  # noqa: BLE001 - unreadable weights are reported by the evaluation
            continue
        floats = [k for k, v in mine.items() if torch.is_tensor(v) and v.is_floating_point()]
        if floats and all(k in base and torch.equal(mine[k], base[k]) for k in floats):
            # A flag, not a refusal: a pipeline that feeds exactly the baseline's batches (the naive
            # one, or it with more workers) legitimately trains bit-identical weights.
            flags.append(
                f"run {r + 1}: your weights are bit-identical to the baseline's (same batches, same "
                "seed?) - reported, not penalised"
            )
        elif any(k in init for k in floats) and all(
            torch.equal(mine[k], init[k]) for k in floats if k in init
        ):
            problems.append(
                f"run {r + 1}: your weights never moved from the initial weights: no training happened"
            )
    return problems
