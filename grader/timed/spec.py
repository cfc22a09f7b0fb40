"""A timed lesson's measurement settings: plain data, so an assignment (imported by workers too) can name
them without importing the timed protocol."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class GradingSpec:
    """The grader's own measurement settings (the same for baseline and learner)."""

    name: str
    profile: str  # workload profile passed to build()
    n_train: int  # training images per repeat (a fresh set per repeat)
    n_eval: int  # held-out images, generated in the parent only
    n_warmup: int  # images in the warm-up set
    epochs: int
    repeats: int
    hooks: dict = field(default_factory=dict)  # recipe overrides, e.g. {"lr": 0.02}
    chunks_per_epoch: int = 2  # timed chunks per epoch: more back-to-back pairs, a steadier median
    timeout_factor: float = 3.0  # learner run limit: this x the baseline's time ...
    min_timeout_s: float = 20.0  # ... plus this much
    startup_timeout_s: float = 240.0
    load_timeout_s: float = 30.0
    calibration: str = ""  # gate calibration to use (default: this spec's name)
    # On a CPU, pin both workers (and their DataLoader children) to this many cores with as many
    # OpenMP threads; None: all cores. See supervisor.start_worker for why one core is steadier.
    cpu_cores: int | None = None
    # The learner trains the baseline's own data stream (lesson 3 changes precision, not data): a
    # replay from its committed state sees its batches and dropout masks, so a mismatch is scored.
    replay_scored: bool = False
    # A scored replay's least cosine with the learner's chunk update: the loose 0.5 where honest
    # runs were never measured against a cheaper step (grader/README.md, threat model).
    replay_cosine: float = 0.5
    # Each trained tensor's least cosine in a scored replay; None: replay_cosine. Lower where the kernels are
    # not exact: under Adam a coordinate whose gradient is near zero moves by its sign, so native bf16 turned one
    # honest attention tensor to 0.959 while the whole update stayed at 0.997 (lesson 3). Each tensor's size
    # band, which catches a backward stopped short, does not move with it.
    replay_tensor_cosine: float | None = None
    # Chunk 0's least cosine with the baseline's own chunk 0 (both from the grader's init): it tells
    # training from this grading's init from weights made anywhere else, which sit at the
    # random-direction null (|cos| ~ 1/sqrt(parameters)). How close an honest recipe comes depends
    # on how far its changes move it from naive's first steps: calibrated per lesson
    # (grader/timed/replay.py; lesson 14's in its calibration README).
    first_cosine: float = 0.1
    # Hold the losses a scored replay's steps return to the learner's (lesson 3's StepAudit keeps
    # them): where measured only; an fp16 learner's loss scale is not committed, so its replay
    # would skip other steps.
    replay_losses: bool = False
    # Time-to-target gradings (lesson 14): the held-out accuracy a run must reach. The parent then
    # evaluates every chunk's committed weights itself, and its evaluation counts on both clocks.
    target: float | None = None
    # What the learner's side changes in the recipe, plain data the parent read from the notebook's
    # source (never from a worker): the learner's runs, warm-up and replays build the recipe so.
    learner_hooks: dict = field(default_factory=dict)
    # What the grader changes on the baseline's side only (lesson 14 times a pipeline against naive's
    # DataLoader with and without its worker processes: ``naive_workers``); no learner code is involved.
    baseline_hooks: dict = field(default_factory=dict)
    data: str = (
        "easy"  # lesson 2's synthetic images: "hard" where a run would reach 100% on the easy set
    )

    @property
    def calibration_name(self) -> str:
        return self.calibration or self.name
