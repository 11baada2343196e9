"""Bad model settings fail before any training with one line naming the key and the value:
``__init__`` arguments, registry names (with a suggestion), and ``methods.preflight.preflight`` (the
optimiser's learning rates, a model that does not fit the data)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
import torch
from torch import nn

from ncl_lightning.evaluation.knn import KNNClassifier
from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.methods import (
    BYOL,
    CL,
    NCL,
    BayesNCL,
    NCEClassifier,
    NCLTopK,
    SimSiam,
    SupConCL,
)
from ncl_lightning.methods.preflight import preflight
from ncl_lightning.nn import SmallCNN, SparseCodingEncoder
from ncl_lightning.nn.nonneg import NONNEG
from ncl_lightning.optim import LARS

HEADS = {"proj_hidden_dim": 32, "proj_output_dim": 12}


def _cnn(out_dim: int = 16) -> SmallCNN:
    return SmallCNN(in_channels=1, width=8, out_dim=out_dim)


def _ssl(cls: type = NCL, backbone: nn.Module | None = None, **kw: Any) -> nn.Module:
    kw = {"num_classes": 10, "batch_size": 8, **HEADS, **kw}
    return cls(backbone or _cnn(), **kw)


def _nce(**kw: Any) -> NCEClassifier:
    kw = {"num_classes": 10, "batch_size": 8, **kw}
    return NCEClassifier(_cnn(), **kw)


def _siamese(cls: type = SimSiam, **kw: Any) -> nn.Module:
    return cls(_cnn(), proj_hidden_dim=16, proj_output_dim=16, pred_hidden_dim=8, **kw)


_ssl_cases = {
    "temperature-zero": (partial(_ssl, CL, temperature=0.0), "temperature must be > 0, got 0.0"),
    "temperature-supcon": (
        partial(_ssl, SupConCL, temperature=-0.5),
        "temperature must be > 0, got -0.5",
    ),
    "knn_temperature": (
        partial(_ssl, knn_temperature=0.0),
        "knn_temperature must be > 0, got 0.0",
    ),
    "knn_k": (partial(_ssl, knn_k=0), "knn_k must be >= 1, got 0"),
    "gate_temperature": (
        partial(_ssl, BayesNCL, gate_temperature=-1.0),
        "gate_temperature must be > 0, got -1.0",
    ),
    "batch_size": (partial(_ssl, batch_size=0), "batch_size must be >= 1, got 0"),
    "batch_size-classifier": (partial(_nce, batch_size=-4), "batch_size must be >= 1, got -4"),
    "proj_hidden_dim": (partial(_ssl, proj_hidden_dim=0), "proj_hidden_dim must be >= 1, got 0"),
    "proj_output_dim": (
        partial(_ssl, CL, proj_output_dim=0),
        "proj_output_dim must be >= 1, got 0",
    ),
    "proj_num_layers": (partial(_ssl, proj_num_layers=0), "proj_num_layers must be >= 1, got 0"),
    "proj_num_layers-simsiam": (
        partial(_siamese, proj_num_layers=-1),
        "proj_num_layers must be >= 0, got -1",
    ),
    "pred_hidden_dim": (
        partial(SimSiam, _cnn(), proj_hidden_dim=16, proj_output_dim=16, pred_hidden_dim=0),
        "pred_hidden_dim must be >= 1, got 0",
    ),
    "gate_hidden_dim": (
        partial(_ssl, BayesNCL, gate_hidden_dim=0),
        "gate_hidden_dim must be >= 1, got 0",
    ),
    "gate_layers": (
        partial(_ssl, BayesNCL, gate_layers=4),
        "gate_layers must be one of 1, 2, 3, got 4",
    ),
    "topk": (partial(_ssl, NCLTopK, topk=13), "topk must be in [1, 12], got 13"),
    "topk-zero": (partial(_ssl, NCLTopK, topk=0), "topk must be in [1, 12], got 0"),
    "probe_lr": (partial(_ssl, probe_lr=0.0), "probe_lr must be > 0, got 0.0"),
    "temperature-inf": (
        partial(_ssl, CL, temperature=float("inf")),
        "temperature must be a finite number, got inf",
    ),
    "temperature-nan": (
        partial(_ssl, CL, temperature=float("nan")),
        "temperature must be > 0, got nan",
    ),
    "kl_weight-inf": (
        partial(_ssl, BayesNCL, kl_weight=float("inf")),
        "kl_weight must be a finite number, got inf",
    ),
    "prior-nan": (partial(_ssl, BayesNCL, prior=float("nan")), "prior must be in (0, 1), got nan"),
    "warmup_epochs-inf": (
        partial(_ssl, warmup_epochs=float("inf")),
        "warmup_epochs must be a finite number, got inf",
    ),
    "gate_lr": (partial(_ssl, BayesNCL, gate_lr=0.0), "gate_lr must be > 0, got 0.0"),
    "prior": (partial(_ssl, BayesNCL, prior=1.0), "prior must be in (0, 1), got 1.0"),
    "threshold": (partial(_ssl, BayesNCL, threshold=0.0), "threshold must be in (0, 1), got 0.0"),
    "warmup_epochs": (partial(_ssl, warmup_epochs=-1.0), "warmup_epochs must be >= 0, got -1.0"),
    "min_lr_ratio": (partial(_nce, min_lr_ratio=1.5), "min_lr_ratio must be in [0, 1], got 1.5"),
    "label_smoothing": (
        partial(_nce, label_smoothing=1.0),
        "label_smoothing must be in [0, 1), got 1.0",
    ),
    "ema_decay": (partial(_siamese, BYOL, ema_decay=1.5), "ema_decay must be in [0, 1], got 1.5"),
    "nonfinite_loss": (
        partial(_ssl, nonfinite_loss="ignore"),
        "nonfinite_loss must be one of 'stop', 'skip', got 'ignore'",
    ),
    "nonfinite_loss-classifier": (
        partial(_nce, nonfinite_loss="warn"),
        "nonfinite_loss must be one of 'stop', 'skip', got 'warn'",
    ),
    "compile_mode": (
        partial(_ssl, compile_mode="fastest"),
        "compile_mode must be one of 'default', 'reduce-overhead', 'max-autotune', got 'fastest'",
    ),
    "num_classes-classifier": (partial(_nce, num_classes=0), "num_classes must be >= 1, got 0"),
    "nce-loss": (partial(_nce, loss="mse"), "loss must be one of 'ce', 'nce', got 'mse'"),
    "nce-proj_hidden_dim": (
        partial(_nce, proj_hidden_dim=-1, proj_output_dim=8),
        "proj_hidden_dim must be >= 0, got -1",
    ),
    "nce-proj_num_layers": (
        partial(_nce, proj_hidden_dim=16, proj_output_dim=8, proj_num_layers=0),
        "proj_num_layers must be >= 1, got 0",
    ),
    "nce-proj-pair": (
        partial(_nce, proj_hidden_dim=16),
        "set both proj_hidden_dim and proj_output_dim (> 0) for a projector, or neither; "
        "got 16 and 0",
    ),
    "knn-k": (partial(KNNClassifier, "unused.ckpt", num_classes=10, k=0), "k must be >= 1, got 0"),
    "knn-temperature": (
        partial(KNNClassifier, "unused.ckpt", num_classes=10, temperature=0.0),
        "temperature must be > 0, got 0.0",
    ),
    "backbone-out_dim": (
        partial(_ssl, backbone=nn.Sequential(nn.Flatten(), nn.Linear(64, 8))),
        "backbone Sequential must expose an `out_dim` attribute (its feature width)",
    ),
    "nonneg-did-you-mean": (
        partial(_ssl, nonneg="rleu"),
        # The names as registered when the test runs (the extending example adds its own).
        lambda: (
            f"nonneg: unknown non-negative map 'rleu'; valid names: {', '.join(NONNEG.names)}"
            "; did you mean 'relu'?"
        ),
    ),
    "nonneg-classifier": (
        partial(_nce, nonneg="softplu"),
        lambda: (
            f"nonneg: unknown non-negative map 'softplu'; valid names: "
            f"{', '.join(NONNEG.names)}; did you mean 'softplus'?"
        ),
    ),
    "gate-did-you-mean": (
        partial(_ssl, BayesNCL, gate="stee"),
        "gate: unknown gate type 'stee'; valid names: gumbel, logistic, soft, ste; "
        "did you mean 'ste'?",
    ),
    "objective-did-you-mean": (
        partial(_ssl, CL, loss="info_nse"),
        "loss: unknown objective 'info_nse'; valid names: info_nce, info_nce_l1, spectral; "
        "did you mean 'info_nce'?",
    ),
    "objective-no-suggestion": (
        partial(_ssl, CL, loss="byol"),
        "loss: unknown objective 'byol'; valid names: info_nce, info_nce_l1, spectral",
    ),
    "lars-lr-zero": (
        partial(LARS, [nn.Parameter(torch.ones(1))], lr=0.0),
        "LARS lr must be > 0, got 0.0",
    ),
}


def _assert_one_line(err: ConfigError, expected: str) -> None:
    message = str(err)
    assert "\n" not in message
    assert message == expected


@pytest.mark.parametrize(("build", "expected"), list(_ssl_cases.values()), ids=list(_ssl_cases))
def test_bad_arguments_fail_at_construction(build: Callable[[], Any], expected: Any) -> None:
    with pytest.raises(ConfigError) as info:
        build()
    assert isinstance(info.value, ValueError)  # `except ValueError` keeps working
    _assert_one_line(info.value, expected() if callable(expected) else expected)


# -- preflight: learning rates ------------------------------------------------------------
def _probe_lr_zero() -> nn.Module:
    model = _ssl(probe_lr=0.1)
    model.hparams.probe_lr = 0.0  # bypass the __init__ check: preflight still names it
    return model


def _gate_lr_negative() -> nn.Module:
    model = _ssl(BayesNCL, gate_lr=0.2)
    model.hparams.gate_lr = -0.2
    return model


_lr_cases = {
    "lars-negative": (
        lambda: _ssl(optimizer=partial(LARS, lr=-0.1)),
        "model.init_args.optimizer.init_args.lr must be > 0, got -0.1",
    ),
    "sgd-negative": (
        lambda: _ssl(optimizer=partial(torch.optim.SGD, lr=-0.1)),
        "model.init_args.optimizer.init_args.lr must be > 0, got -0.1",
    ),
    "sgd-zero": (
        lambda: _nce(optimizer=partial(torch.optim.SGD, lr=0.0)),
        "model.init_args.optimizer.init_args.lr must be > 0, got 0.0",
    ),
    "adamw-zero": (
        lambda: _ssl(BayesNCL, optimizer=partial(torch.optim.AdamW, lr=0.0)),
        "model.init_args.optimizer.init_args.lr must be > 0, got 0.0",
    ),
    "probe_lr": (_probe_lr_zero, "probe_lr must be > 0, got 0.0"),
    "sgd-inf": (
        lambda: _ssl(optimizer=partial(torch.optim.SGD, lr=float("inf"))),
        "model.init_args.optimizer.init_args.lr must be a finite number, got inf",
    ),
    "gate_lr": (_gate_lr_negative, "gate_lr must be > 0, got -0.2"),
    "python-sgd-negative": (  # a factory that is not a partial: torch's own line, keyed
        lambda: _ssl(optimizer=lambda p: torch.optim.SGD(p, lr=-0.1)),
        "model.init_args.optimizer: Invalid learning rate: -0.1",
    ),
    "other-optimizer-error": (
        lambda: _ssl(optimizer=lambda p: LARS(p, lr=0.1, momentum=1.0)),
        "model.init_args.optimizer: LARS momentum must be in [0, 1), got 1.0",
    ),
}


@pytest.mark.parametrize(("build", "expected"), list(_lr_cases.values()), ids=list(_lr_cases))
def test_preflight_names_the_learning_rate_key(build: Callable[[], Any], expected: str) -> None:
    model = build()  # construction succeeds: the optimiser is built by preflight
    with pytest.raises(ConfigError) as info:
        preflight(model)
    _assert_one_line(info.value, expected)


# -- preflight: does the model fit the data? ----------------------------------------------
def _lying_backbone() -> SmallCNN:
    backbone = _cnn(out_dim=16)
    backbone.out_dim = 24  # declares 24, outputs 16: the projector is built for 24
    return backbone


_fit_cases = {
    "out_dim-lies": (
        lambda: _ssl(backbone=_lying_backbone()),
        (2, 1, 8, 8),
        "model does not fit the data: the backbone outputs 16 features but declares "
        "out_dim=24 (the input width of the heads built on it)",
    ),
    "channels-ssl": (
        lambda: _ssl(BayesNCL),
        (2, 3, 8, 8),
        "model does not fit the data: the backbone expects 1 input channel(s), the data has 3",
    ),
    "channels-classifier": (
        lambda: _nce(),
        (2, 3, 32, 32),
        "model does not fit the data: the backbone expects 1 input channel(s), the data has 3",
    ),
    "other-shape-error": (
        lambda: _ssl(backbone=SparseCodingEncoder(12, 8)),
        (2, 10),
        "model does not fit data of shape [10]: mat1 and mat2 shapes cannot be multiplied "
        "(2x10 and 12x8)",
    ),
}


@pytest.mark.parametrize(
    ("build", "shape", "expected"), list(_fit_cases.values()), ids=list(_fit_cases)
)
def test_preflight_explains_a_model_that_does_not_fit_the_data(
    build: Callable[[], Any], shape: tuple[int, ...], expected: str
) -> None:
    model = build()
    with pytest.raises(ConfigError) as info:
        preflight(model, torch.zeros(shape))
    _assert_one_line(info.value, expected)


@pytest.mark.parametrize("cls", [NCL, BayesNCL, BYOL, NCEClassifier])
def test_preflight_changes_nothing(cls: type) -> None:
    """Weights, BatchNorm statistics, every submodule's train/eval mode and the random
    state are as before; a fitting example raises nothing."""
    torch.manual_seed(0)
    if cls is NCEClassifier:
        model = _nce(proj_hidden_dim=16, proj_output_dim=8)
    elif cls is BYOL:
        model = _siamese(BYOL, num_classes=10, batch_size=8)
    else:
        model = _ssl(cls)
    model.train()
    model.backbone.features[0].eval()  # a mixed-mode model: modes are restored one by one
    state = {k: v.clone() for k, v in model.state_dict().items()}
    modes = {name: m.training for name, m in model.named_modules()}
    rng = torch.get_rng_state()
    preflight(model, torch.zeros(2, 1, 8, 8))
    assert torch.equal(torch.get_rng_state(), rng)
    assert {name: m.training for name, m in model.named_modules()} == modes
    after = model.state_dict()
    assert all(torch.equal(after[k], v) for k, v in state.items())
    assert all(p.grad is None for p in model.parameters())


def _batch_of(cls: type, batch_size: int) -> nn.Module:
    """A model whose projector has BatchNorm (``proj_batch_norm``; off by default)."""
    if cls is NCEClassifier:
        return _nce(
            batch_size=batch_size, proj_hidden_dim=16, proj_output_dim=8, proj_batch_norm=True
        )
    return _ssl(cls, batch_size=batch_size, proj_batch_norm=True)


@pytest.mark.parametrize("cls", [NCL, BayesNCL, NCEClassifier])
def test_preflight_refuses_a_batch_of_one_for_batchnorm(cls: type) -> None:
    """batch_size 1 trains a BatchNorm projector on one value per channel: refused by
    preflight (before fit writes anything), the model left as it was; 2 passes."""
    model = _batch_of(cls, 1)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ConfigError) as info:
        preflight(model, torch.zeros(2, 1, 8, 8))
    assert str(info.value).startswith("batch_size=1 is too small for training this model (")
    assert str(info.value).endswith("; set data.init_args.batch_size >= 2")
    assert all(torch.equal(model.state_dict()[k], v) for k, v in state.items())
    preflight(_batch_of(cls, 2), torch.zeros(2, 1, 8, 8))
