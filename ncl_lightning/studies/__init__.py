"""Runnable studies built from ``ncl-cli`` runs (``python -m ncl_lightning.studies.<name>``):
``landscape`` (the sparse-coding Table 1 of Pokle et al., 2022, with ablations),
``seeds`` (any comparison of configs over seeds: mean ± std tables, curves, pictures; the
studies themselves are in [`ncl_lightning.studies.study_defs`][]) and ``chain`` (the
evaluation chain: pre-training, then every evaluation protocol on its checkpoint, one
table; over seeds with ``--seeds``). All run their jobs through
[`ncl_lightning.studies.jobs`][] and report their spread with
[`ncl_lightning.studies.spread`][]."""
