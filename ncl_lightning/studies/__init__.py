"""Runnable studies built from ``ncl-cli`` runs (``python -m ncl_lightning.studies.<name>``):
``landscape`` (the sparse-coding Table 1 of Pokle et al., 2022, with ablations) and
``seeds`` (any comparison of configs over seeds: mean ± std tables, curves, pictures; the
studies themselves are in :mod:`ncl_lightning.studies.study_defs`)."""
