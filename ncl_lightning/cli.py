"""``ncl-cli``: LightningCLI over every method and DataModule of the package.

Usage::

    ncl-cli fit --config configs/cifar10_ncl.yaml
    ncl-cli test --config configs/cifar10_ncl.yaml --ckpt_path runs/.../last.ckpt

Model and data are chosen by ``class_path`` (subclass mode): pre-training methods
(``ncl_lightning.methods``), evaluation protocols (``ncl_lightning.evaluation``) and a
researcher's own LightningModule in their own package work the same way. Every model
takes ``num_classes`` and ``batch_size``. The DataModule's ``num_classes`` and
``batch_size`` are linked into the model when both are instantiated, so a config states
them once.
"""

from __future__ import annotations

from lightning.pytorch import LightningDataModule, LightningModule
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

# Model arguments naming files: what this run says wins over the paths recorded in a
# ``--ckpt_path`` checkpoint's hyper-parameters (files move between machines).
PATH_ARGUMENTS = ("checkpoint", "pretrained")


class NCLCLI(LightningCLI):
    """LightningCLI with the data -> model links of this package."""

    def _parse_ckpt_path(self) -> None:
        """Lightning re-applies the ``--ckpt_path`` checkpoint's hyper-parameters over the
        config; keep the run's own file paths (``--model.checkpoint`` of the OOD test)."""
        sub = self.config.get("subcommand")
        init_args = self.config.get(f"{sub}.model.init_args") if sub else None
        given = {k: init_args.get(k) for k in PATH_ARGUMENTS if init_args and init_args.get(k)}
        super()._parse_ckpt_path()
        for key, value in given.items():
            self.config[f"{sub}.model.init_args.{key}"] = value

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.link_arguments(
            "data.num_classes", "model.init_args.num_classes", apply_on="instantiate"
        )
        parser.link_arguments(
            "data.batch_size", "model.init_args.batch_size", apply_on="instantiate"
        )


def cli_main(args: list[str] | None = None) -> NCLCLI:
    """Run the CLI and return it (trainer, model and datamodule stay inspectable).

    Args:
        args: Replaces ``sys.argv[1:]``, e.g. ``["fit", "--config", "configs/cifar10_ncl.yaml"]``.
    """
    return NCLCLI(
        model_class=LightningModule,
        datamodule_class=LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        save_config_kwargs={"overwrite": True},
        args=args,
        auto_configure_optimizers=False,
    )


def main(args: list[str] | None = None) -> None:
    """Console entry point ``ncl-cli``."""
    cli_main(args)


if __name__ == "__main__":
    main()
