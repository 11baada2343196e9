"""Functional metrics: the maths behind the ``torchmetrics`` classes of ``metrics``."""

from ncl_lightning.metrics.functional.activation import (
    expected_activation,
    select_by_expected_activation,
)
from ncl_lightning.metrics.functional.dictionary import (
    dictionary_atom_scores,
    dictionary_cosines,
    dictionary_recovery,
)
from ncl_lightning.metrics.functional.gate import open_frequency, open_frequency_summary
from ncl_lightning.metrics.functional.knn import weighted_knn_predict
from ncl_lightning.metrics.functional.mig import discrete_mutual_info, mutual_information_gap
from ncl_lightning.metrics.functional.orthogonality import (
    ORTHOGONALITY_REDUCTIONS,
    OrthogonalityReduction,
    feature_gram,
    orthogonality_error,
    orthogonality_error_from_gram,
)
from ncl_lightning.metrics.functional.profile import dimension_profile, merge_top_k
from ncl_lightning.metrics.functional.rank import (
    effective_rank,
    effective_rank_from_gram,
    spectral_entropy,
    spectral_entropy_from_gram,
)
from ncl_lightning.metrics.functional.retrieval import (
    RETRIEVAL_DISTANCES,
    RetrievalDistance,
    retrieval_precision,
)
from ncl_lightning.metrics.functional.semantic import (
    ENTROPY_WEIGHTINGS,
    EntropyWeighting,
    class_activation_counts,
    class_activation_mass,
    semantic_consistency,
    semantic_consistency_from_counts,
    semantic_entropy,
    semantic_entropy_from_counts,
    top_k_class_counts,
)
from ncl_lightning.metrics.functional.sepin import (
    sepin_at_k,
    sepin_per_dimension,
    sepin_per_dimension_loop,
)
from ncl_lightning.metrics.functional.sparsity import (
    activation_mask,
    activation_rate,
    active_dimensions,
    l2_normalize_rows,
    sparsity,
    zero_fraction,
)

__all__ = [
    "ENTROPY_WEIGHTINGS",
    "ORTHOGONALITY_REDUCTIONS",
    "RETRIEVAL_DISTANCES",
    "EntropyWeighting",
    "OrthogonalityReduction",
    "RetrievalDistance",
    "activation_mask",
    "activation_rate",
    "active_dimensions",
    "class_activation_counts",
    "class_activation_mass",
    "dictionary_atom_scores",
    "dictionary_cosines",
    "dictionary_recovery",
    "dimension_profile",
    "discrete_mutual_info",
    "effective_rank",
    "effective_rank_from_gram",
    "expected_activation",
    "feature_gram",
    "l2_normalize_rows",
    "merge_top_k",
    "mutual_information_gap",
    "open_frequency",
    "open_frequency_summary",
    "orthogonality_error",
    "orthogonality_error_from_gram",
    "retrieval_precision",
    "select_by_expected_activation",
    "semantic_consistency",
    "semantic_consistency_from_counts",
    "semantic_entropy",
    "semantic_entropy_from_counts",
    "sepin_at_k",
    "sepin_per_dimension",
    "sepin_per_dimension_loop",
    "sparsity",
    "spectral_entropy",
    "spectral_entropy_from_gram",
    "top_k_class_counts",
    "weighted_knn_predict",
    "zero_fraction",
]
