"""``view_pairs``: the two-view layout against a reference that looks every key up by name."""

from __future__ import annotations

import pytest
import torch

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.losses import ViewPairs, pair_indices, view_pairs


def reference_layout(n: int, world: int, rank: int) -> dict[str, list]:
    """Keys are ``(view, global image)`` for every image of every rank, view 1 first; the
    queries are this rank's images. Columns are found by searching the list of keys."""
    total = n * world
    keys = [(v, j) for v in (0, 1) for j in range(total)]
    mine = range(rank * n, (rank + 1) * n)
    queries = [(v, j) for v in (0, 1) for j in mine]
    return {
        "keys": keys,
        "queries": queries,
        "self_index": [keys.index((v, j)) for v, j in queries],
        "positive_index": [keys.index((1 - v, j)) for v, j in queries],
    }


def rows_of(names: list[tuple[int, int]], x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
    return torch.stack([(x1, x2)[v][j] for v, j in names])


def reference_mask(rows: list, cols: list, same) -> torch.Tensor:
    return torch.tensor([[same(a, b) for b in cols] for a in rows])


def check_against_reference(
    got: dict, x1: torch.Tensor, x2: torch.Tensor, labels: torch.Tensor, world: int, rank: int
) -> None:
    """``got`` (a rank's layout) is the reference layout of the global views ``x1, x2``."""
    n = x1.shape[0] // world
    ref = reference_layout(n, world, rank)
    torch.testing.assert_close(got["queries"], rows_of(ref["queries"], x1, x2))
    torch.testing.assert_close(got["keys"], rows_of(ref["keys"], x1, x2))
    assert int(got["offset"]) == rank * n
    assert got["self_index"].tolist() == ref["self_index"]
    assert got["positive_index"].tolist() == ref["positive_index"]
    queries, keys = ref["queries"], ref["keys"]
    assert torch.equal(got["self_mask"], reference_mask(queries, keys, lambda a, b: a == b))
    other_view = reference_mask(queries, keys, lambda a, b: a[1] == b[1] and a[0] != b[0])
    assert torch.equal(got["positive_mask"], other_view)
    same = reference_mask(queries, keys, lambda a, b: bool(labels[a[1]] == labels[b[1]]))
    assert torch.equal(got["same_label"], same)


def as_dict(pairs: ViewPairs, labels: torch.Tensor) -> dict:
    return {
        "queries": pairs.queries,
        "keys": pairs.keys,
        "offset": pairs.offset,
        "self_index": pairs.self_index,
        "positive_index": pairs.positive_index,
        "self_mask": pairs.self_mask(),
        "positive_mask": pairs.positive_mask(),
        "same_label": pairs.same_label(labels),
    }


@pytest.mark.parametrize("gather_distributed", [True, False])
@pytest.mark.parametrize("n", [1, 3, 8])
def test_single_process_layout_matches_reference(n: int, gather_distributed: bool) -> None:
    g = torch.Generator().manual_seed(n)
    x1, x2 = torch.randn(n, 4, generator=g), torch.randn(n, 4, generator=g)
    labels = torch.randint(0, 2, (n,), generator=g)
    pairs = view_pairs(x1, x2, gather_distributed)
    assert (pairs.n, pairs.total, pairs.gathered) == (n, n, gather_distributed)
    check_against_reference(as_dict(pairs, labels), x1, x2, labels, world=1, rank=0)
    torch.testing.assert_close(pairs.similarities(), pairs.queries @ pairs.keys.T)


@pytest.mark.parametrize(("n", "world"), [(1, 2), (3, 2), (2, 4)])
def test_pair_indices_of_every_rank_match_reference(n: int, world: int) -> None:
    for rank in range(world):
        ref = reference_layout(n, world, rank)
        self_index, positive_index = pair_indices(n, n * world, rank * n, torch.device("cpu"))
        assert self_index.tolist() == ref["self_index"]
        assert positive_index.tolist() == ref["positive_index"]


def test_bad_shapes_are_config_errors_naming_the_argument() -> None:
    with pytest.raises(ConfigError, match=r"z2 must have shape \[3, 4\], got \(2, 4\)") as err:
        view_pairs(torch.zeros(3, 4), torch.zeros(2, 4))
    assert err.value.key == "z2"
    with pytest.raises(ConfigError, match=r"labels must have shape \[3\], got \(2,\)") as err:
        view_pairs(torch.zeros(3, 4), torch.zeros(3, 4)).same_label(torch.zeros(2))
    assert err.value.key == "labels"
