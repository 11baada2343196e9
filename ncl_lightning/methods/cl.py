"""CL: SimCLR-style contrastive learning (Chen et al., ICML 2020)."""

from __future__ import annotations

from typing import Any, ClassVar

from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor, nn

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.losses import OBJECTIVES
from ncl_lightning.methods.checks import check_projector
from ncl_lightning.methods.ssl import Encoded, SSLMethod
from ncl_lightning.nn.heads import MLP
from ncl_lightning.nn.protocols import Backbone, TorchModule


class CL(SSLMethod):
    """Backbone -> MLP projector -> (L2-normalised in the loss) -> InfoNCE or spectral loss.

    Subclasses change the features with [`features`][] (NCL's non-negative map), the
    loss by name with ``default_loss``, or the loss itself with the
    [`objective`][] hook; the training step is inherited unchanged.

    Args:
        backbone: Encoder exposing ``out_dim``.
        proj_hidden_dim: Projector hidden width (CIFAR: 2048).
        proj_output_dim: Projector output width ``d`` (CIFAR: 256).
        proj_num_layers: Linear layers in the projector.
        proj_batch_norm: BatchNorm after each hidden projector layer. ``False`` (default)
            is the NCL and BayesNCL releases' projector, Linear–ReLU–Linear
            (``solo/methods/simclr.py`` of both); ``True`` is the SimCLR paper's.
        proj_output_batch_norm: BatchNorm after the projector's output layer too, before
            the features' map (``True``: the SCL release's projector, Linear–BN–ReLU–
            Linear–BN; NCL paper App. D.1 follows "the default settings of SCL").
        loss: Registered loss name (``info_nce``, ``spectral``; see
            [`OBJECTIVES`][ncl_lightning.losses.OBJECTIVES]) or a module
            ``(z1 [n, d], z2 [n, d]) -> loss`` that [`objective`][] applies; ``None``:
            the class's ``default_loss``.
        temperature: InfoNCE temperature (CIFAR: 0.2), passed to a loss given by name
            (which checks it); unused by ``spectral``.
        gather_distributed: Take negatives from every rank under DDP.
        **kwargs: Optimisation and online-evaluation settings of [`SSLMethod`][].

    Attributes:
        default_loss: Class value: the loss when ``loss`` is ``None``. A subclass changes
            its default loss here, never with ``kwargs.setdefault("loss", ...)``, which
            ``ncl-cli`` would override (``ncl_lightning.methods.subclass_defaults``).
    """

    default_loss: ClassVar[str] = "info_nce"

    def __init__(
        self,
        backbone: Backbone,
        proj_hidden_dim: int = 2048,
        proj_output_dim: int = 256,
        proj_num_layers: int = 2,
        proj_batch_norm: bool = False,
        proj_output_batch_norm: bool = False,
        loss: str | TorchModule | None = None,
        temperature: float = 0.2,
        gather_distributed: bool = True,
        **kwargs: Any,
    ) -> None:
        if "objective" in kwargs:
            raise ConfigError(
                "objective: this argument is now called loss (objective(views) is the hook "
                "that applies it); rename the key",
                key="objective",
            )
        super().__init__(backbone, **kwargs)
        check_projector(proj_hidden_dim, proj_output_dim, proj_num_layers)
        self.projector = MLP(
            backbone.out_dim, proj_hidden_dim, proj_output_dim, proj_num_layers,
            proj_batch_norm, proj_output_batch_norm,
        )  # fmt: skip
        loss = self.resolve_loss(loss)
        if isinstance(loss, str):
            make = OBJECTIVES.get(loss, config_key="loss")
            loss = make(temperature=temperature, gather_distributed=gather_distributed)
        self.loss_fn = loss

    def resolve_loss(self, loss: str | nn.Module | None) -> str | nn.Module:
        """``loss``, or ``default_loss`` for ``None``; warns when a configured name
        replaces a default that a subclass declared."""
        cls = type(self)
        if loss is None:
            return cls.default_loss
        declared = cls.default_loss != CL.default_loss  # a subclass chose its own default
        if declared and isinstance(loss, str) and loss.lower() != cls.default_loss.lower():
            rank_zero_warn(
                f"{cls.__name__}: loss {loss!r} from the config replaces the class "
                f"default_loss {cls.default_loss!r}; drop model.init_args.loss (or set it "
                "to null) to train the class default"
            )
        return loss

    def features(self, p: Tensor) -> Tensor:
        """Map projector outputs ``[B, d]`` to the features ``z``; identity for CL."""
        return p

    def encode(self, x: Tensor) -> Encoded:
        h = self.backbone(x)
        return Encoded(h=h, z=self.features(self.projector(h)))

    def objective(self, views: list[Encoded]) -> Tensor:
        """The loss module (``loss`` / ``default_loss``) on the two views' ``z``."""
        if len(views) != 2:
            raise ConfigError(f"{type(self).__name__} expects 2 views per image, got {len(views)}")
        return self.loss_fn(views[0].z, views[1].z)
