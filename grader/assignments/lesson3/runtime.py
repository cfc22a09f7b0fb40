"""Runtime of train-step assignments on the BERT workload (lesson 3): what workers and the parent call.

A and B build the same recipe and are handed different precisions and steps. What ties the timed
speed-up to the precision, not to a cheaper step, is the scored replay (grader.timed.replay: the
baseline's worker repeats drawn chunks from B's committed weights on B's kept batches).
Worker weights are safetensors (parsed, never unpickled), loaded with strict key/shape checks.
"""

from __future__ import annotations

import secrets
import shutil
import sys
from pathlib import Path

import torch

from effkit.accumulate import GradAccumulator
from effkit.amp import DeviceCaps
from effkit.workloads import bert
from effkit.workloads.bert.trainer import default_train_step
from grader.assignments.lesson3.text_data import grader_sentences, write_text_set
from grader.kit.timed_runtime import GraderData as TimedData
from grader.kit.timed_runtime import InvalidWeights as InvalidWeights  # the parent catches it here

# Imported at module level on purpose: the worker snapshots these modules' functions before any
# learner code runs, so replacing one of them from a solution cell is detected and reported.

LEARNER_MODULE = "learner_solution"  # where grader.sandbox.worker executes the solution cells


def _learner_namespace(step) -> dict:
    module = sys.modules.get(LEARNER_MODULE)
    return vars(module) if module is not None else getattr(step, "__globals__", {})


def _learner_parts(step) -> tuple:
    ns = _learner_namespace(step)
    missing = [n for n in ("choose_policy", "make_scaler") if not callable(ns.get(n))]
    if missing:
        raise LookupError(f"your solution cells define no {' or '.join(missing)}; keep those names")
    return ns["choose_policy"], ns["make_scaler"]


class StepAudit:
    """Counts the train-step calls, samples, optimizer updates and non-finite losses of a run.

    Wraps *both* sides' steps (the same tiny overhead on each), so "faster" can only mean the same
    number of real training steps in less time.
    """

    def __init__(self):
        self.calls = self.samples = self.updates = 0
        self.nonfinite: list[int] = []
        self.losses: list[float] = []  # this chunk's, committed with it (grader.timed.replay)
        self.steps_per_epoch = 0
        self.problems: list[str] = []
        self._hooked: set[int] = set()

    def wrap(self, step):
        audit = self

        def audited_step(model, batch, optimizer, policy, scaler, max_grad_norm):
            if id(optimizer) not in audit._hooked:  # counts updates that really happened
                audit._hooked.add(id(optimizer))
                optimizer.register_step_post_hook(lambda *_: audit._updated())
            audit.calls += 1
            audit.samples += int(batch["labels"].shape[0])
            loss = step(model, batch, optimizer, policy, scaler, max_grad_norm)
            number = isinstance(loss, int | float) and not isinstance(loss, bool)
            audit.losses.append(float(loss) if number else float("nan"))
            if not isinstance(loss, int | float) or loss != loss or abs(loss) == float("inf"):
                audit.nonfinite.append(audit.calls)
            return loss

        return audited_step

    def take_kept(self) -> dict:
        """The current chunk's step losses (the parent holds them to its replay's), and a fresh
        start for the next chunk."""
        losses, self.losses = self.losses, []
        return {"losses": torch.tensor(losses, dtype=torch.float64)}

    def _updated(self) -> None:
        self.updates += 1

    def finish(self, pipeline, expected_epochs: int) -> None:
        want = expected_epochs * self.steps_per_epoch
        if self.calls != want:
            self.problems.append(
                f"the train step ran {self.calls} times; the grader's schedule needs {want}"
            )
        # fp16 skips a few early steps while the scaler finds its scale; a step that never updates
        # (or skips most updates) is not training.
        if self.updates < 0.75 * self.calls:
            self.problems.append(
                f"the optimizer updated the weights in only {self.updates} of {self.calls} steps "
                "(skipped steps are for inf/NaN gradients only)"
            )
        if self.nonfinite:
            self.problems.append(
                f"the train step returned a non-finite or non-float loss at step(s) "
                f"{self.nonfinite[:5]}"
            )

    def nan_hint(self) -> str:
        return "Check the step: autocast around the forward only, and clip after scaler.unscale_(optimizer)."

    def report(self) -> dict:
        return {
            "steps": self.calls,
            "samples": self.samples,
            "updates": self.updates,
            "problems": list(self.problems),
        }


EpochAudit = StepAudit  # the name grader.sandbox.worker instantiates


def build_trainer(
    learner_obj, audit: StepAudit, data_dir: str, device: str, seed: int, profile: str, hooks: dict
):
    def build(precision: str, step):
        return bert.build(
            "naive",
            profile,
            data_dir=data_dir,
            device=device,
            seed=seed,
            precision=precision,
            train_step=audit.wrap(step),
            **hooks,
        )

    if learner_obj is None:  # the baseline: fp32, effkit's reference step
        trainer = build("off", default_train_step)
    else:
        choose_policy, make_scaler = _learner_parts(learner_obj)
        policy = choose_policy(DeviceCaps.detect(device))
        trainer = build(policy.mode, learner_obj)
        trainer.scaler = make_scaler(trainer.policy)  # the learner's scaler choice, not effkit's
    # the worker drains trainer.pipeline; the recipe's loader is not audited
    trainer.pipeline = None
    audit.steps_per_epoch = trainer.steps_per_epoch
    return trainer


def _refused(*args, **kwargs):
    raise RuntimeError(
        "effkit's default_train_step is the reference answer: it does not run in the grader's timed "
        "worker (write your own amp_train_step)"
    )


def _refused_accumulator(*args, **kwargs):
    raise RuntimeError(
        "effkit's GradAccumulator.backward and .step are the reference step (scaled backward, "
        "unscale_, clip, step, update, zero_grad): they do not run in the grader's timed worker "
        "(write your own amp_train_step)"
    )


def refuse_reference_answers() -> None:
    """In the learner's timed worker only (before its cells run): effkit's reference step, and
    GradAccumulator's backward and step (the same step by another route), raise through every name,
    list or closure that holds them; the learner's trainer never calls either."""
    default_train_step.__code__ = _refused.__code__
    GradAccumulator.backward.__code__ = _refused_accumulator.__code__
    GradAccumulator.step.__code__ = _refused_accumulator.__code__


def model_of(trainer) -> torch.nn.Module:
    return trainer.model


def _names(code) -> set[str]:
    """Every global/attribute name a code object (and the functions nested in it) refers to."""
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= _names(const)
    return names


def reuses_reference(fn) -> str:
    """A reason to refuse ``fn`` when it *is* (or calls) effkit's ``default_train_step`` or uses
    ``GradAccumulator`` (its backward and step are the same step), else ''."""
    from effkit.workloads.bert.trainer import default_train_step

    inner = getattr(fn, "func", fn)  # functools.partial
    if inner is default_train_step:
        return (
            "your amp_train_step is effkit's default_train_step, the reference answer: write "
            "your own step to earn these points"
        )
    call = vars(type(inner)).get("__call__")  # a callable object: look at its __call__
    code = getattr(inner, "__code__", None) or getattr(call, "__code__", None)
    names = _names(code) if code is not None else set()
    aliases = getattr(inner, "__globals__", {})  # `from ... import default_train_step as mine`
    if "default_train_step" in names or any(aliases.get(n) is default_train_step for n in names):
        return "your amp_train_step calls effkit's default_train_step, the reference answer: write your own"
    if "GradAccumulator" in names or any(aliases.get(n) is GradAccumulator for n in names):
        return (
            "your amp_train_step uses effkit's GradAccumulator, whose backward and step are the "
            "reference step: write your own"
        )
    return ""


class GraderData(TimedData):
    """Lesson 3's data: the grader's own sentences (text_data), a held-out set per look."""

    def write_warmup(self, folder: Path) -> Path:
        return write_text_set(folder, grader_sentences(self.spec.n_warmup, secrets.randbits(31)))

    def new_look(self) -> None:
        self.held_out = grader_sentences(self.spec.n_eval, secrets.randbits(31))

    def new_run(self, r: int, seed: int):
        spec = self.spec
        train = grader_sentences(spec.n_train, secrets.randbits(31))
        path = write_text_set(self.inputs / f"train{r}", train)
        # The clean trainer reads the same training texts (hence the same tokenizer and model
        # shapes) with the held-out set as its dev split. Its folder is deleted right away: learner
        # code runs only after this constructor returns, and never sees the held-out sentences (a
        # second look builds its trainers while both workers are frozen, in the parent's folder).
        private = write_text_set(self.workdir / f"eval{r}", train, self.held_out)
        hooks = dict(spec.hooks, epochs=spec.epochs, max_train_samples=spec.n_train)
        try:
            trainer = bert.build(
                "naive",
                spec.profile,
                data_dir=private,
                device=self.device,
                seed=seed,
                precision="off",
                eval_split="dev",
                **hooks,
            )
        finally:
            shutil.rmtree(private, ignore_errors=True)
        self._share_tokenizer(trainer, spec.profile)
        return path, trainer

    def held_out_accuracy(self, trainer, r: int) -> float:
        return trainer.evaluate("dev")

    def _share_tokenizer(self, trainer, profile: str) -> None:
        """Give the workers this trainer's tokenizer (in ``inputs/effkit-cache``, which each worker
        copies into its own cache): WordPiece training is not deterministic across processes (the
        ``tokenizers`` trainer breaks ties in hash-map order: three runs on the same 384 sentences
        gave three vocabularies), so weights trained with a worker's own tokenizer would be scored
        with token ids they never saw."""
        from effkit.workloads.bert.tokenizer import tokenizer_cache_dir

        key = tokenizer_cache_dir(trainer.train_texts, bert.PROFILES[profile].vocab_size, ".").name
        trainer.tokenizer.save_pretrained(
            str(self.inputs / "effkit-cache" / "bert" / "tokenizers" / key)
        )


def prepare_learner_data() -> None:
    bert.prepare_data("smoke")


def learner_run(ns: dict | None) -> float:
    """What the learner runs themselves (``grader budget``): the naive BERT smoke recipe in fp32,
    or with the solution's policy, scaler and step when ``ns`` (its namespace) is given."""
    from effkit.workloads.common import train_to_target

    if not ns:
        trainer = bert.build("naive", "smoke", precision="off")
    else:
        policy = ns["choose_policy"](DeviceCaps.detect("cpu"))
        trainer = bert.build(
            "naive", "smoke", precision=policy.mode, train_step=ns["amp_train_step"]
        )
        trainer.scaler = ns["make_scaler"](trainer.policy)
    return train_to_target(trainer, eval_every=trainer.eval_every, progress=False).accuracy
