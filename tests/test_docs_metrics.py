"""``docs/metrics.md`` against the code: names, cross-references and a few stated values.

The page is the metrics reference. These tests keep it honest without building the site:
every exported metric name appears on it, every ``[text][ncl_lightning.x]`` cross-reference
points at an object that exists and that the API reference renders, the summary table's
"reads best" column matches each class's ``higher_is_better``, and some definitions the
page states are checked numerically on constructed tensors.
"""

from __future__ import annotations

import importlib
import math
import re
from types import ModuleType

import pytest
import torch

from ncl_lightning import metrics
from ncl_lightning.metrics import functional as F
from tests.conftest import ROOT
from tests.helpers import markdown

PAGE = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
TEXT = " ".join(PAGE.split())  # whitespace-normalised, for phrases that wrap across lines
# [text][identifier] or [identifier][] (mkdocs-autorefs); identifiers of this package only.
AUTOREF = re.compile(r"\[([^\]\[]+)\]\[([^\]\[]*)\]")
REFS = sorted(
    {ident or text for text, ident in AUTOREF.findall(PAGE) if (ident or text).startswith("ncl_")}
)
API_MODULES = sorted(
    {
        line.split(":::", 1)[1].strip()
        for page in (ROOT / "docs" / "api").glob("*.md")
        for line in page.read_text(encoding="utf-8").splitlines()
        if line.startswith(":::")
    }
)


def _resolve(identifier: str) -> object:
    """Import the longest module prefix of ``identifier``, then walk the attributes."""
    parts = identifier.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(identifier)


def _named_on_page() -> set[str]:
    """Identifiers inside code spans and link texts of the page."""
    prose = re.sub(r"```.*?```", "", PAGE, flags=re.S)  # fenced formula blocks
    spans = re.findall(r"`([^`]+)`", prose) + [t for t, _ in AUTOREF.findall(prose)]
    return {tok for span in spans for tok in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", span)}


@pytest.mark.parametrize("module", [metrics, F], ids=lambda m: m.__name__)
def test_every_exported_name_is_on_the_page(module: ModuleType) -> None:
    named = _named_on_page()
    missing = [name for name in module.__all__ if name not in named]
    assert not missing, f"{module.__name__} names missing from docs/metrics.md: {missing}"


def test_every_metric_class_and_function_is_cross_referenced() -> None:
    """Every class and function is linked (constants have no docstring, so no API entry)."""
    linkable = [f"ncl_lightning.metrics.{n}" for n in metrics.__all__]
    linkable += [f"ncl_lightning.metrics.functional.{n}" for n in F.__all__ if n[0].islower()]
    # The submodule functional/sparsity.py shadows the function in the API reference, so
    # the function is rendered (and linked) under its full path.
    full_path = {"ncl_lightning.metrics.functional.sparsity": "functional.sparsity.sparsity"}
    linkable = [f"ncl_lightning.metrics.{full_path[i]}" if i in full_path else i for i in linkable]
    missing = [ident for ident in linkable if ident not in REFS]
    assert not missing, f"not linked to the API reference: {missing}"


def test_cross_references_resolve_to_rendered_objects() -> None:
    griffe = pytest.importorskip("griffe")
    loader = griffe.GriffeLoader(search_paths=[str(ROOT)])
    packages: dict[str, object] = {}  # loader.load re-reads a package on every call
    assert REFS, "the page has no cross-references"
    for ident in REFS:
        obj = _resolve(ident)  # raises if the object does not exist
        if ident in API_MODULES:
            continue
        parent, name = ident.rsplit(".", 1)
        assert parent in API_MODULES, f"{ident}: {parent} has no API page (::: {parent})"
        assert name in getattr(importlib.import_module(parent), "__all__", []), ident
        # What mkdocstrings renders must be the object itself, not a same-named submodule.
        package = ".".join(parent.split(".")[:2])
        if package not in packages:
            packages[package] = loader.load(package)
        static = packages[package][ident.removeprefix(package + ".")]
        runtime_kind = "module" if isinstance(obj, ModuleType) else None
        if runtime_kind is None:
            runtime_kind = "class" if isinstance(obj, type) else "function"
        assert static.kind.value == runtime_kind, f"{ident} is rendered as a {static.kind.value}"


def test_summary_table_reads_best_matches_higher_is_better() -> None:
    expected = {True: "higher", False: "lower", None: "—"}
    rows = [line for line in PAGE.splitlines() if line.startswith("| [")]
    checked = set()
    for row in rows:
        cells = markdown.cells(row)
        found = re.fullmatch(r"\[(\w+)\]\[ncl_lightning\.metrics\.(\w+)\]", cells[1])
        if found is None:
            continue
        cls = getattr(metrics, found.group(2))
        assert cells[-1] == expected[cls.higher_is_better], f"{cls.__name__}: {cells[-1]}"
        checked.add(cls.__name__)
    classes = {n for n in metrics.__all__ if n[0].isupper()}
    assert checked == classes


# -- definitions stated on the page, checked on constructed tensors -------------------------


def test_dense_features_give_100_times_largest_class_share() -> None:
    assert (
        "Dense features (every entry activated) give exactly **100 × the largest class share**"
        in TEXT
    )
    z = torch.rand(60, 8, generator=torch.Generator().manual_seed(0)) + 0.1
    labels = torch.tensor([0] * 30 + [1] * 18 + [2] * 12)
    share = 100 * 30 / 60
    assert F.semantic_consistency(z, labels, 3).item() == pytest.approx(share)
    metric = metrics.SemanticConsistency(8, 3)
    metric.update(z[:25], labels[:25])
    metric.update(z[25:], labels[25:])
    assert metric.compute().item() == pytest.approx(share)
    balanced = torch.arange(60) % 3
    assert F.semantic_consistency(z, balanced, 3).item() == pytest.approx(100 / 3)


def test_one_hot_features_rank_orthogonality_sparsity() -> None:
    assert "`k` orthogonal directions of equal norm give exactly `k`" in TEXT
    assert "one-hot features in `d` dimensions have sparsity `(d − 1)/d`" in TEXT
    assert "Features with disjoint support (for example one-hot features) give 0" in TEXT
    n, d, k = 48, 10, 6
    z = torch.zeros(n, d)
    scale = torch.rand(n, generator=torch.Generator().manual_seed(1)) + 0.5  # rows normalised
    z[torch.arange(n), torch.arange(n) % k] = scale  # dims k..d-1 are dead
    assert F.effective_rank(z).item() == pytest.approx(k, rel=1e-6)
    rank = metrics.EffectiveRank(d)
    rank.update(z)
    assert rank.compute().item() == pytest.approx(k, rel=1e-6)
    # 0 up to float64 rounding (the diagonal is subtracted from the total of |G|).
    assert F.orthogonality_error(z).item() == pytest.approx(0.0, abs=1e-12)
    assert F.sparsity(z).item() == pytest.approx((d - 1) / d)
    assert F.active_dimensions(z).item() == k
    assert F.zero_fraction(torch.zeros(2, d)).tolist() == [1.0, 1.0]  # "a zero row gives 1"
    assert F.orthogonality_error(torch.ones(5, 3)).item() == pytest.approx(1.0)  # identical


def test_semantic_entropy_dense_is_ln_c_and_one_class_is_zero() -> None:
    assert "of equal magnitude on a balanced set give exactly `ln C` with both weightings" in TEXT
    c = 4
    z, labels = torch.ones(40, 5), torch.arange(40) % c
    for weighting in ("activation", "frequency"):
        assert F.semantic_entropy(z, labels, c, weighting=weighting).item() == pytest.approx(
            math.log(c)
        )
    one_class = torch.zeros(40, c)
    one_class[torch.arange(40), labels] = 1.0  # dim i fires on class i only
    assert F.semantic_entropy(one_class, labels, c).item() == pytest.approx(0.0, abs=1e-7)


def test_mig_of_a_copied_factor_is_one_and_medians_are_as_stated() -> None:
    assert "a code dimension equal to a factor with at most 20 values" in TEXT
    factor = (torch.arange(200) % 7)[:, None]
    codes = torch.stack([factor[:, 0].float(), torch.zeros(200)], dim=1)
    assert F.mutual_information_gap(codes, factor).item() == pytest.approx(1.0)
    # Gate: torch.median, the lower middle value; dictionary: the usual median.
    assert "for even d: the lower of the two middle values" in TEXT
    gate = metrics.OpenFrequency(4)
    gate.update(torch.tensor([[1.0, 1, 1, 0], [1, 1, 0, 0], [1, 0, 0, 0], [1, 0, 0, 0]]))
    assert gate.frequency().tolist() == [1.0, 0.5, 0.25, 0.0]
    assert gate.compute()["open_freq_median"].item() == 0.25
    dictionary = torch.eye(4)
    weight = torch.diag(torch.tensor([1.0, -2.0, 0.0, 0.0]))  # atoms 0, 1 recovered, 2, 3 not
    weight[2] = torch.tensor([1.0, 0.0, 1.0, 0.0])  # |cos| with atom 2: 1/√2 (and with atom 0)
    scores = F.dictionary_recovery(weight, dictionary)
    assert scores["median"].item() == pytest.approx((1.0 + 2**-0.5) / 2)
    assert scores["min"].item() == 0.0 and scores["max"].item() == 1.0


def test_release_variants_are_as_stated() -> None:
    """The spectral entropy and the releases' orthogonality reductions of the page."""
    assert "`k` orthogonal directions of equal norm give exactly `ln k`" in TEXT
    assert "mean_all_entries = (1/m²) Σ_{i,j ∈ A} |G − I|ᵢⱼ = OE · (m − 1)/m" in TEXT
    n, d, k = 40, 9, 5
    z = torch.zeros(n, d)
    z[torch.arange(n), torch.arange(n) % k] = 1.0
    assert F.spectral_entropy(z).item() == pytest.approx(math.log(k), rel=1e-6)
    entropy = metrics.SpectralEntropy(d)
    entropy.update(z)
    assert entropy.compute().item() == pytest.approx(math.log(k), rel=1e-6)
    dense = torch.rand(30, 6, generator=torch.Generator().manual_seed(3))
    m = F.active_dimensions(dense).item()
    ours = F.orthogonality_error(dense).item()
    mean_all = F.orthogonality_error(dense, reduction="mean_all_entries").item()
    assert mean_all == pytest.approx(ours * (m - 1) / m, rel=1e-6)
    assert "On all dimensions it ranks as the cosine does" in TEXT
    labels = torch.arange(30) % 3
    assert F.retrieval_precision(dense, labels, 4, distance="euclidean").item() == pytest.approx(
        F.retrieval_precision(dense, labels, 4).item()
    )
