"""Backbones by name from timm ([`TimmBackbone`][]) and torchvision
([`TorchvisionBackbone`][]), without the classifier, with the CIFAR stem where it applies.

timm and torchvision are imported when a backbone is built, so ``import ncl_lightning``
stays light. A checkpoint never downloads pretrained weights again: its record rebuilds
the architecture without them and loads the trained weights from the file
([`trained_backbone_spec`][ncl_lightning.checkpoints.record.trained_backbone_spec]).
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from ncl_lightning.foundation.errors import ConfigError, DownloadError, did_you_mean
from ncl_lightning.foundation.validation import check_int, check_range
from ncl_lightning.nn.backbones import backbone_spec, stem_conv
from ncl_lightning.nn.protocols import Backbone

# timm modules whose models take the CIFAR stem (the module of the model's entry point).
_TIMM_VIT = ("timm.models.vision_transformer", "timm.models.deit")
_TIMM_RESNET = ("timm.models.resnet",)
_CIFAR_VIT = {"img_size": 32, "patch_size": 4}
# torchvision: the attributes that hold a classification model's head.
_HEADS = ("fc", "classifier", "heads", "head")


class TimmBackbone(nn.Module, Backbone):
    """A timm model by name, without its classifier (``num_classes=0``).

    The timm model is the child ``model`` (state-dict keys ``model.<timm key>``).

    Args:
        name: A timm model name (``timm.list_models()``), e.g. ``vit_small_patch16_224``,
            ``resnet50``, ``convnext_tiny``.
        pretrained: Start from timm's pretrained weights: downloaded from the Hugging Face
            hub on first use unless cached (needs the network). A checkpoint rebuilds the
            architecture with ``pretrained: false`` and loads its own weights.
        cifar_stem: For 32x32 images. timm ResNets: 3x3 stride-1 ``conv1`` padded by 2 as
            [`ResNet`][ncl_lightning.nn.ResNet]'s (the deep-stem variants: a stride-1
            first conv, its own padding) and no max-pool; ViTs: ``img_size`` 32 and
            ``patch_size`` 4 unless given. Any other model: ``ConfigError``.
        in_chans: Number of input channels (>= 1).
        img_size: Input size for models that fix it (ViTs: the position embedding);
            ``None``: the model's default (or 32 with ``cifar_stem``).
        patch_size: Patch size of a ViT; ``None``: the model's (or 4 with ``cifar_stem``).
        drop_path_rate: Stochastic depth rate (models that have it), in ``[0, 1)``.
        model_kwargs: Further ``timm.create_model`` keyword arguments.

    Attributes:
        out_dim: Feature width (timm's ``head_hidden_size`` or ``num_features``).
        spec: ``{"class_path", "init_args"}`` rebuilding this architecture (with
            ``pretrained: false``: what it rebuilds is loaded with trained weights).

    Shapes:
        ``x``: ``[B, in_chans, H, W]`` -> ``[B, out_dim]``.
    """

    def __init__(
        self,
        name: str,
        pretrained: bool = False,
        cifar_stem: bool = False,
        in_chans: int = 3,
        img_size: int | None = None,
        patch_size: int | None = None,
        drop_path_rate: float = 0.0,
        model_kwargs: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        import timm

        check_int("in_chans", in_chans)
        check_range("drop_path_rate", drop_path_rate, 0.0, 1.0, closed="[)")
        if not timm.is_model(name):
            hint = did_you_mean(name, timm.list_models())
            raise ConfigError(f"name: unknown timm model {name!r}{hint}", key="name")
        module = timm.models.model_entrypoint(name).__module__
        if cifar_stem and module not in (*_TIMM_VIT, *_TIMM_RESNET):
            raise ConfigError(
                f"cifar_stem: timm model {name!r} ({module}) has no CIFAR stem here; it "
                "applies to timm ResNets and ViTs (set img_size or model_kwargs instead)",
                key="cifar_stem",
            )
        kwargs: dict[str, Any] = dict(model_kwargs or {})
        if drop_path_rate:
            kwargs["drop_path_rate"] = drop_path_rate
        for key, value in (("img_size", img_size), ("patch_size", patch_size)):
            if value is not None:
                check_int(key, value)
            elif cifar_stem and module in _TIMM_VIT:
                value = _CIFAR_VIT[key]
            if value is not None:
                kwargs[key] = value
        # pretrained=False: the spec rebuilds the architecture to load trained weights into
        # (checkpoints, exports), never downloading.
        self.spec = backbone_spec(
            TimmBackbone, name=name, pretrained=False, cifar_stem=cifar_stem,
            in_chans=in_chans, img_size=img_size, patch_size=patch_size,
            drop_path_rate=drop_path_rate, model_kwargs=dict(model_kwargs or {}),
        )  # fmt: skip
        try:
            net = timm.create_model(
                name, pretrained=pretrained, num_classes=0, in_chans=in_chans, **kwargs
            )
        except TypeError as err:  # a keyword the model does not take
            raise ConfigError(f"model_kwargs: timm model {name!r} refused: {err}") from None
        except OSError as err:  # no network, or the hub refused
            from huggingface_hub import constants

            source = getattr(timm.models.get_pretrained_cfg(name), "hf_hub_id", None) or name
            raise DownloadError(
                f"pretrained: could not get timm's pretrained weights of {name!r} "
                f"({source}): {_first_line(err)}; without network, copy them into the "
                f"Hugging Face cache here ({constants.HF_HUB_CACHE}) from a machine that "
                "has them, or set pretrained: false"
            ) from None
        if cifar_stem and module in _TIMM_RESNET:
            self._cifar_resnet(net, in_chans)
        self.model = net
        self.out_dim = int(getattr(net, "head_hidden_size", None) or net.num_features)

    @staticmethod
    def _cifar_resnet(net: nn.Module, in_chans: int) -> None:
        conv1 = net.conv1
        if isinstance(conv1, nn.Conv2d):
            # padded as ResNet's CIFAR stem (2, the releases': 32x32 -> 34x34 maps)
            net.conv1 = stem_conv(in_chans, cifar=True, out_channels=conv1.out_channels)
        else:  # deep stem (resnet50d, ...): three 3x3 convs, the first strided
            first = next(m for m in conv1.modules() if isinstance(m, nn.Conv2d))
            first.stride = (1, 1)
        net.maxpool = nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        """Encode images ``[B, C, H, W]`` to features ``[B, out_dim]``."""
        return self.model(x)


class TorchvisionBackbone(nn.Module, Backbone):
    """A torchvision classification model by name, its last linear layer an ``Identity``.

    The head is the model's ``fc``, ``classifier``, ``heads`` or ``head``: a linear layer
    is replaced, in a sequential head its last linear layer (so ConvNeXt keeps its
    LayerNorm, MobileNet its hidden layer). The torchvision model is the child ``model``.

    Args:
        name: A classification model of ``torchvision.models.list_models(torchvision.models)``,
            e.g. ``resnet18``, ``resnet50``, ``convnext_tiny``, ``vit_b_16``.
        weights: torchvision weights name (``DEFAULT``, ``IMAGENET1K_V1``); downloaded
            from download.pytorch.org on first use unless cached. ``None``: random init.
            A checkpoint rebuilds the architecture with ``weights: null``.
        cifar_stem: ResNet family (ResNet, ResNeXt, Wide ResNet) only: 3x3 stride-1
            ``conv1`` padded by 2 as [`ResNet`][ncl_lightning.nn.ResNet]'s, and no
            max-pool, for 32x32 images. Others: ``ConfigError``.
        in_channels: Number of input channels (>= 1); other than 3: ResNet family only
            (a new ``conv1``).

    Attributes:
        out_dim: Feature width: the replaced linear layer's ``in_features``.
        spec: ``{"class_path", "init_args"}`` rebuilding this architecture (with
            ``weights: null``: what it rebuilds is loaded with trained weights).

    Shapes:
        ``x``: ``[B, in_channels, H, W]`` -> ``[B, out_dim]``.
    """

    def __init__(
        self,
        name: str,
        weights: str | None = None,
        cifar_stem: bool = False,
        in_channels: int = 3,
    ) -> None:
        super().__init__()
        import torchvision

        check_int("in_channels", in_channels)
        names = torchvision.models.list_models(module=torchvision.models)
        if name not in names:
            hint = did_you_mean(name, names)
            raise ConfigError(
                f"name: unknown torchvision classification model {name!r}{hint}", key="name"
            )
        # weights=None: rebuilt to load trained weights into, no download.
        self.spec = backbone_spec(
            TorchvisionBackbone, name=name, weights=None, cifar_stem=cifar_stem,
            in_channels=in_channels,
        )  # fmt: skip
        extra = {"aux_logits": False} if name in ("googlenet", "inception_v3") else {}
        if extra and weights is None:
            extra["init_weights"] = True
        enum = torchvision.models.get_model_weights(name)
        base = None if weights is None else weights.removeprefix(f"{enum.__name__}.")
        if base is not None:
            known = ["DEFAULT", *(w.name for w in enum)]
            if base not in known:
                raise ConfigError(
                    f"weights: {name!r} has no torchvision weights {weights!r}; known: "
                    f"{', '.join(known)}{did_you_mean(weights, known)}",
                    key="weights",
                )
        try:
            net = torchvision.models.get_model(name, weights=weights, **extra)
        except OSError as err:  # no network, or the server refused
            import torch.hub

            url = enum[base].url
            raise DownloadError(
                f"weights: could not download torchvision's {weights} weights of {name!r} "
                f"({url}): {_first_line(err)}; without network, put that file in "
                f"{torch.hub.get_dir()}/checkpoints/ or set weights: null"
            ) from None
        resnet = isinstance(net, torchvision.models.ResNet)
        for key, wanted in (("cifar_stem", cifar_stem), ("in_channels", in_channels != 3)):
            if wanted and not resnet:
                raise ConfigError(
                    f"{key}: applies to torchvision ResNets (resnet*, resnext*, wide_resnet*), "
                    f"not {name!r}",
                    key=key,
                )
        if cifar_stem:
            net.conv1 = stem_conv(in_channels, cifar=True, out_channels=net.conv1.out_channels)
            net.maxpool = nn.Identity()
        elif in_channels != 3:
            net.conv1 = stem_conv(in_channels, cifar=False)
        self.out_dim = _drop_head(net, name)
        self.model = net

    def forward(self, x: Tensor) -> Tensor:
        """Encode images ``[B, C, H, W]`` to features ``[B, out_dim]``."""
        return self.model(x)


def _first_line(err: BaseException) -> str:
    """An error's first line (a download error's cause, without its retries' noise)."""
    return (str(err).strip().splitlines() or [type(err).__name__])[0][:300]


def _drop_head(net: nn.Module, name: str) -> int:
    """Replace the classifier's last ``nn.Linear`` by ``Identity``; its ``in_features``."""
    for attr in _HEADS:
        head = getattr(net, attr, None)
        if isinstance(head, nn.Linear):
            setattr(net, attr, nn.Identity())
            return head.in_features
        if isinstance(head, nn.Sequential):
            linear = [k for k, m in head.named_children() if isinstance(m, nn.Linear)]
            if linear:
                width = getattr(head, linear[-1]).in_features
                setattr(head, linear[-1], nn.Identity())
                return width
    raise ConfigError(f"name: torchvision model {name!r} has no linear classifier to drop")


__all__ = ["TimmBackbone", "TorchvisionBackbone"]
