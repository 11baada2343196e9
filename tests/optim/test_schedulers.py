"""warmup_cosine against the closed-form schedule."""

from __future__ import annotations

import math

import pytest
import torch

from ncl_lightning.optim import scale_lr, warmup_cosine, warmup_step


def lrs(warmup, total, min_ratio=0.0, base=2.0, steps=None):
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=base)
    sched = warmup_cosine(opt, warmup, total, min_ratio)
    out = []
    for _ in range(steps if steps is not None else total + 3):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def expected(step, warmup, total, min_ratio, base):
    if step < warmup:
        return base * (step + 1) / warmup
    t = min(step - warmup, total - warmup) / (total - warmup)
    return base * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * t)))


@pytest.mark.parametrize(
    ("warmup", "total", "min_ratio"), [(10, 50, 0.0), (4, 20, 0.1), (0, 9, 0.0)]
)
def test_matches_formula(warmup, total, min_ratio):
    got = lrs(warmup, total, min_ratio)
    want = [expected(t, warmup, total, min_ratio, 2.0) for t in range(total + 3)]
    assert got == pytest.approx(want)


def test_key_points():
    base, warmup, total = 2.0, 10, 110
    got = lrs(warmup, total, 0.0, base)
    assert got[0] == pytest.approx(base / warmup)  # warm-up starts near 0
    assert got[warmup - 1] == pytest.approx(base)  # warm-up ends at the base lr
    assert got[warmup] == pytest.approx(base)  # cosine starts at the base lr
    assert got[warmup + 50] == pytest.approx(base / 2)  # cosine midpoint
    assert got[total] == pytest.approx(0.0, abs=1e-12)  # end
    assert got[total + 2] == pytest.approx(0.0, abs=1e-12)  # stays at the floor


def test_no_warmup_starts_at_base_and_min_ratio_floor():
    got = lrs(0, 10, 0.25, base=1.0)
    assert got[0] == pytest.approx(1.0)
    assert got[10] == pytest.approx(0.25)
    assert min(got) == pytest.approx(0.25)


def test_total_shorter_than_warmup():
    got = lrs(10, 4, 0.0, base=1.0, steps=6)
    assert got[:4] == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert got[4:] == pytest.approx([0.0, 0.0])


def test_state_dict_round_trip():
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = warmup_cosine(opt, 3, 10)
    for _ in range(5):
        opt.step()
        sched.step()
    state = sched.state_dict()
    opt2 = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched2 = warmup_cosine(opt2, 3, 10)
    sched2.load_state_dict(state)
    assert sched2.get_last_lr() == sched.get_last_lr()


@pytest.mark.parametrize(
    ("args", "match"),
    [((-1, 10), "warmup_steps"), ((0, 0), "total_steps"), ((1, 10, 1.5), "min_lr_ratio")],
)
def test_rejects_bad_args(args, match):
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    with pytest.raises(ValueError, match=match):
        warmup_cosine(opt, *args)


def test_scale_lr():
    assert scale_lr(0.4, 512) == pytest.approx(0.8)
    assert scale_lr(0.3, 128, reference=256) == pytest.approx(0.15)
    with pytest.raises(ValueError, match="global_batch_size"):
        scale_lr(0.1, 0)


def test_warmup_step_without_warmup_is_multistep_lr_per_epoch() -> None:
    # Reference: torch's MultiStepLR stepped once per epoch, read at every step.
    steps_per_epoch, epochs, milestones = 3, 9, [4, 7]
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = warmup_step(opt, 0, steps_per_epoch, milestones, gamma=0.1)
    ref_opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    ref = torch.optim.lr_scheduler.MultiStepLR(ref_opt, milestones, gamma=0.1)
    for _ in range(epochs):
        for _ in range(steps_per_epoch):
            assert opt.param_groups[0]["lr"] == pytest.approx(ref_opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
        ref_opt.step()
        ref.step()


def test_warmup_step_warms_up_then_decays() -> None:
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=2.0)
    sched = warmup_step(opt, 4, 5, [2], gamma=0.5)
    got = []
    for _ in range(15):
        got.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    want = [2.0 * (t + 1) / 4 if t < 4 else 2.0 for t in range(10)] + [1.0] * 5
    assert got == pytest.approx(want)


@pytest.mark.parametrize(
    ("args", "message"),
    [((0, 0, [1]), "steps_per_epoch must be an integer >= 1"),
     ((0, 2, []), "lr_milestones must be a non-empty list"),
     ((0, 2, [0]), "lr_milestones must be a non-empty list"),
     ((0, 2, [1], 0.0), r"lr_gamma must be in \(0, 1\]")],
)  # fmt: skip
def test_warmup_step_bad_arguments(args, message) -> None:
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    with pytest.raises(ValueError, match=message):
        warmup_step(opt, *args)
