# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---


# %% [markdown]
# # Lesson 8 — Parameter-efficient fine-tuning: LoRA: exercise
#
# LoRA (Hu et al. 2021) freezes a pretrained weight `W` (out x in) and learns a low-rank update:
#
# ```
# y = x W^T + b + (alpha / r) * x A^T B^T        A: r x in (random), B: out x r (zeros)
# ```
#
# 1. Write `LoRALinear(base, r, alpha)`, an `nn.Module` that wraps a pretrained `nn.Linear`:
#    keep it as `self.base` and **freeze** it; add `self.lora_A` (an `nn.Parameter` of shape
#    `(r, in_features)`, initialised like peft: Kaiming-uniform with `a=sqrt(5)`) and `self.lora_B`
#    (`(out_features, r)`, **zeros**); `forward(x)` returns the formula above; `merged()` returns a
#    plain `nn.Linear` whose weight is `W + (alpha / r) * B @ A` (same bias): zero-overhead inference.
# 2. Write `inject_lora(model, targets, r, alpha)`: freeze every parameter of `model`, then replace
#    every `nn.Linear` whose qualified name is a target or ends with `"." + target` (peft's rule:
#    `"value"` matches `encoder.layer.0.attention.self.value`, `"dense"` matches every `...dense`)
#    by a `LoRALinear` around it; return the model.
# 3. Write `lora_recipe(budget)`: return, as plain data, the LoRA settings the grader will fine-tune
#    a pretrained encoder with (it uses peft itself) **under the constraints it draws for each grading**:
#    `{"target_modules": [...], "r": int, "lora_alpha": number, "lr": float}` (optionally
#    `"modules_to_save": [...]`, modules trained whole). `budget` is a dict:
#    `budget["modules"]`, the modules that may carry adapters this time, each with its
#    `{"in": ..., "out": ...}` features (two of `query`, `key`, `value`, drawn per grading, and
#    `intermediate.dense`); `budget["layers"]`, how many times each name occurs (one per encoder
#    layer); `budget["head_parameters"]`, the classifier the grader always trains whole; and
#    `budget["max_state_bytes"]`, the gradient + AdamW state bytes allowed after the first step
#    (fp32), and `budget["min_state_bytes"]`, half of it, the least your recipe must spend: the
#    memory is what this job was given for capacity, and the drawn room spans ranks 4 to 31.
#    Choose targets from the offer and a rank from the bytes: fixed names fail some gradings, a
#    fixed rank (whichever) most of them. The task: all-MiniLM-L6-v2 (6 x 384) on short sentences with negation
#    ("the plot was not clever ."), 80 AdamW steps of 16, sequences of 12 tokens.
#
# Write them with plain PyTorch; you may use peft in "Your turn" below to compare.
#
# **How it is graded.** Outside your notebook. Your layer and injection run in a separate process on
# layers, models, ranks and targets the grader draws; it compares the tensors with *peft's* own
# LoRA on the same weights and the same A and B (3 points: initialisation, output, gradients of A
# and B only, trainable count, merge; 2 points: injection). Your recipe comes back as data: the
# grader draws the budget, fine-tunes with peft itself, measures the gradient + AdamW state bytes
# (over `budget["max_state_bytes"]` or under `budget["min_state_bytes"]`: no points) and the held-out accuracy against its own full
# fine-tuning on the same task (no more than 5 points below) (3 points).

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import torch
from torch import nn

# %% nbgrader={"grade": false, "grade_id": "lora_linear", "locked": false, "schema_version": 3, "solution": true, "task": false}
import math


class LoRALinear(nn.Module):
    """A frozen nn.Linear plus a trainable low-rank update (alpha / r) * B @ A."""

    def __init__(self, base: nn.Linear, r: int, alpha: float):
        super().__init__()
        ### BEGIN SOLUTION
        self.base, self.r, self.scaling = base, r, alpha / r
        base.requires_grad_(False)
        self.lora_A = nn.Parameter(torch.empty(r, base.in_features))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, r))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        ### END SOLUTION

    def forward(self, x):
        ### BEGIN SOLUTION
        return self.base(x) + (x @ self.lora_A.T @ self.lora_B.T) * self.scaling
        ### END SOLUTION

    def merged(self) -> nn.Linear:
        ### BEGIN SOLUTION
        out = nn.Linear(self.base.in_features, self.base.out_features, bias=self.base.bias is not None)
        with torch.no_grad():
            out.weight.copy_(self.base.weight + self.scaling * self.lora_B @ self.lora_A)
            if self.base.bias is not None:
                out.bias.copy_(self.base.bias)
        return out
        ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "inject_lora", "locked": false, "schema_version": 3, "solution": true, "task": false}
def inject_lora(model, targets, r, alpha):
    """Freeze model, then wrap every nn.Linear whose name is a target or ends with "." + target."""
    ### BEGIN SOLUTION
    model.requires_grad_(False)
    chosen = [name for name, module in model.named_modules()
              if isinstance(module, nn.Linear) and any(name == t or name.endswith("." + t) for t in targets)]
    for name in chosen:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, LoRALinear(getattr(parent, child), r, alpha))
    return model
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "lora_recipe", "locked": false, "schema_version": 3, "solution": true, "task": false}
def lora_recipe(budget):
    """The LoRA settings for this grading's budget (plain data): offered targets, a rank that fits."""
    ### BEGIN SOLUTION
    # The attention projections offered: negation changes what a word attends to (the lesson's q, v).
    targets = [m for m in ("query", "key", "value") if m in budget["modules"]]
    # Each trained parameter costs 12 bytes here: an fp32 gradient and AdamW's two moments.
    trainable = budget["max_state_bytes"] // 12 - budget["head_parameters"]
    per_rank = budget["layers"] * sum(budget["modules"][m]["in"] + budget["modules"][m]["out"] for m in targets)
    r = max(1, trainable // per_rank)  # the largest rank that fits: at least 3/4 of the bytes
    # alpha = 2r keeps the update's scale (alpha / r) as the rank changes; an LR ~20x full
    # fine-tuning's, because the adapters start at zero and are few (measured in the lesson).
    return {"target_modules": targets, "r": r, "lora_alpha": 2 * r, "lr": 1e-3}
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_layer", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_layer", "lesson8.ipynb")


# %% nbgrader={"grade": true, "grade_id": "test_inject", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_inject", "lesson8.ipynb")


# %% nbgrader={"grade": true, "grade_id": "test_recipe", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_recipe", "lesson8.ipynb")

# %% [markdown]
# ## Quiz
#
# Answer with the letter of the best choice, as `QUIZ_ANSWERS = {"q1": "a", "q2": ..., "q3": ..., "q4": ...}`.
# The grader checks your answers outside this notebook.
#
# 1. Full fine-tuning with AdamW in fp32 needs, per parameter, before any activation, about:
#    (a) 8 bytes; (b) 16 bytes; (c) 20 bytes.
# 2. Compared with the frozen model's forward, a LoRA model's forward pass:
#    (a) costs the base model's matmuls plus the adapters' small ones, so a little more;
#    (b) costs about r / d as much, since only the rank-r adapters train;
#    (c) costs less, since the frozen layers run their forward without autograd.
# 3. `lora_B` starts at zero so that:
#    (a) A gets no gradient at first, and keeps its random start as a fixed projection;
#    (b) the merged weight W + (alpha / r) B A needs no rescaling of W after training;
#    (c) the adapted model's output starts exactly equal to the pretrained model's.
# 4. After `merge_and_unload()`, inference with the adapted model costs:
#    (a) exactly the base model's: B A is folded into W;
#    (b) the base model's plus two small matmuls per adapted layer;
#    (c) less than the base model's, since W + B A has rank r.

# %% nbgrader={"grade": false, "grade_id": "quiz", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
QUIZ_ANSWERS = {"q1": "b", "q2": "a", "q3": "c", "q4": "a"}
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_quiz", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
from grader.kit.in_notebook import check_my_work

check_my_work("test_quiz", "lesson8.ipynb")

# %% [markdown]
# ## Your turn: your layer against peft's (not graded)
#
# Wrap one layer of a small BERT both ways with the same A and B and compare outputs and trainable
# counts; then merge both and compare again.

# %%
from peft import LoraConfig, get_peft_model
from transformers import BertConfig, BertModel

cfg = BertConfig(vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128)
ids = torch.randint(0, 100, (2, 12))
torch.manual_seed(0)  # the same base weights for both
mine = inject_lora(BertModel(cfg).eval(), ["query", "value"], r=4, alpha=8)
torch.manual_seed(0)
theirs = get_peft_model(BertModel(cfg).eval(), LoraConfig(r=4, lora_alpha=8, target_modules=["query", "value"]))
for name, module in mine.named_modules():
    if isinstance(module, LoRALinear):
        peft_layer = theirs.base_model.model.get_submodule(name)
        with torch.no_grad():
            module.lora_B.normal_()
            peft_layer.lora_A["default"].weight.copy_(module.lora_A)
            peft_layer.lora_B["default"].weight.copy_(module.lora_B)
count = sum(p.numel() for p in mine.parameters() if p.requires_grad)
print(f"trainable: mine {count:,}, peft {theirs.get_nb_trainable_parameters()[0]:,}")
with torch.no_grad():
    diff = (mine(ids).last_hidden_state - theirs(input_ids=ids).last_hidden_state).abs().max()
print(f"largest output difference: {float(diff):.2e}")
