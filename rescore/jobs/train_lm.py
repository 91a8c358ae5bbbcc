"""The job of rescore-train-lm: train a word LM (rescore.train.loop.train_lm) into an output dir,
one training per dir at a time (rescore.io.outdir.dir_lock).

The run's options are a :class:`rescore.train.options.TrainOptions` (checked when built: an
OptionError, exit 2, before any work); the model's are the fields of
:class:`rescore.models.ModelConfig` by name, built when the job runs. rescore.models and the
training loop import torch, so they are imported then: this module stays torch-free, and
rescore-train-lm's ``--help`` and option checks instant.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

from rescore.errors import check
from rescore.io.outdir import dir_lock
from rescore.train.options import TrainOptions

AUTO_CLASSES = "auto"  # classes: round(sqrt(V)) of the vocabulary trained (rescore.train.loop.auto_classes)


@dataclass(frozen=True)
class TrainLmJob:
    """rescore-train-lm: train the model ``model`` describes as ``options`` say; the best model on
    the validation text is options.out_dir/model.pt. Checked when built."""

    options: TrainOptions
    # ModelConfig's fields by name (arch, head, hidden, ...); classes: a number, or AUTO_CLASSES
    # (resolved for output "class" once the vocabulary is known)
    model: Mapping[str, Any]

    def __post_init__(self):
        check(isinstance(self.options, TrainOptions), "the run's TrainOptions", "options", type(self.options).__name__)
        classes = self.model.get("classes", 0)
        check(classes == AUTO_CLASSES or (isinstance(classes, int) and not isinstance(classes, bool)
                                          and classes >= 0), f"a number of classes or {AUTO_CLASSES}",
              "--classes", classes)

    def run(self) -> dict:
        """Train; returns the run's summary (rescore.train.loop.train_lm's)."""
        from rescore.models import ModelConfig  # (lazy: torch, when the job runs)
        from rescore.train.loop import auto_classes, train_lm  # (lazy: torch, when the job runs)

        auto = self.model.get("classes") == AUTO_CLASSES
        config = ModelConfig(**{**self.model, "classes": 0 if auto else self.model.get("classes", 0)})
        if config.output == "class" and auto:
            config = dataclasses.replace(config, classes=auto_classes(self.options))
        with dir_lock(self.options.out_dir):  # one training per OUT_DIR: a second one fails at once
            return train_lm(config, self.options)
