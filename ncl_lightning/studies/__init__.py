"""Runnable studies built from ``ncl-cli`` runs (``python -m ncl_lightning.studies.<name>``):
``landscape`` (the sparse-coding Table 1 of Pokle et al., 2022, with ablations)."""
