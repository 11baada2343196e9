"""Console entry point ``ncl-cli``: the top-level help at once, every subcommand through
[`ncl_lightning.runtime.cli`][].

Importing Lightning takes seconds, so ``ncl-cli``, ``-h``, ``--help`` and ``--version`` are
answered here with the standard library only (a test checks ``sys.modules``). [`HELP`][]
names the LightningCLI's subcommands and options (a test checks it names every one).
"""

from __future__ import annotations

import sys
from importlib import metadata

HELP = """\
usage: ncl-cli {fit,validate,test,predict} [--config FILE] [options]

ncl-cli: train and evaluate interpretable self-supervised models (ncl-lightning):
contrastive learning (CL), non-negative contrastive learning (NCL), BayesNCL, and
non-negative cross-entropy classifiers (NCE), with offline linear/kNN/fine-tuning
evaluation and the interpretability metrics (sparsity, SEPIN, semantic consistency).
A LightningCLI: every option of the Trainer, the model and the DataModule can be set in
YAML configs (--config) or on the command line.

subcommands:
  fit        train a model (pre-training, or an evaluation protocol such as a linear probe)
  validate   run one validation epoch of a trained model
  test       run one test epoch of a trained model (metrics, callbacks' reports)
  predict    run prediction over the predict dataloader

most useful options (after the subcommand; ncl-cli <subcommand> --help lists them all):
  -c, --config FILE       a YAML config (repeatable; later files and flags win)
  --model NAME            model class: a short name (NCL, CL, BayesNCL, NCEClassifier,
                          LinearProbe, ...) or a class path of your own package
  --model.help NAME       the arguments of one model class (--data.help, likewise)
  --data NAME             DataModule class, e.g. DigitsDataModule, CIFAR10DataModule
  --model.backbone NAME   encoder, e.g. SmallCNN, ResNet (any nn.Module with out_dim)
  --run_id ID             the run's id and folder name; resume takes this run's last.ckpt
  --auto_resume true      resume this run's last.ckpt when there is one, else start afresh
  --ckpt_path PATH|last   checkpoint to resume (fit) or to evaluate (validate/test/predict)
  --new_run true          fit: start a new run (own folder) from --ckpt_path's state
  --allow_untrained true  validate/test/predict the initial weights without a checkpoint
  --print_config          print the complete resolved config and exit

examples:
  ncl-cli fit --config configs/demo/digits_ncl.yaml
  ncl-cli fit --model NCL --model.backbone SmallCNN --data DigitsDataModule \\
      --trainer.max_epochs 5 --trainer.accelerator cpu
  ncl-cli fit --config configs/cifar10_ncl.yaml --auto_resume true
  ncl-cli test --config configs/cifar10_ncl.yaml --ckpt_path last
  ncl-cli fit --config configs/eval/cifar10_linear.yaml --model.checkpoint <pretrained.ckpt>
  ncl-cli fit --model.help NCL

documentation: docs/quickstart.md, docs/configs.md, docs/python.md (training from Python),
docs/reliability.md (resume, run ids, errors) and docs/evaluation.md in the repository
(`make docs` builds the site).
Errors of input are one line (exit status 2); NCL_TRACEBACK=1 shows the traceback.
"""


def main(args: list[str] | None = None) -> None:
    """Run ``ncl-cli``: the top-level help and version here, the rest by the LightningCLI.

    Args:
        args: Replaces ``sys.argv[1:]``.

    Raises:
        SystemExit: Status 2 with the help for a bare ``ncl-cli`` (a subcommand is
            required); the statuses of [`ncl_lightning.runtime.cli.main`][] otherwise.
    """
    argv = sys.argv[1:] if args is None else list(args)
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write(HELP)
        if not argv:
            raise SystemExit(2)
        return
    if argv[0] == "--version":
        sys.stdout.write(f"ncl-cli (ncl-lightning) {metadata.version('ncl-lightning')}\n")
        return
    from ncl_lightning.runtime.cli import main as run_cli  # Lightning: seconds to import

    run_cli(args)  # None: LightningCLI reads sys.argv itself


if __name__ == "__main__":
    main()
