"""Checkpoints of the package: the record they carry, its validation and safe reading.

* [`record`][ncl_lightning.checkpoints.record]: the record's core (method class, backbone spec);
* [`check`][ncl_lightning.checkpoints.check]: structure and trusted class paths, checked
  before anything is imported;
* [`load`][ncl_lightning.checkpoints.load]: the one reader (``read_checkpoint``) and
  [`load_backbone`][ncl_lightning.checkpoints.load.load_backbone] (also of an exported
  folder) / [`load_method`][ncl_lightning.checkpoints.load.load_method];
* [`optimizer_groups`][ncl_lightning.checkpoints.optimizer_groups]: a resumed fit's
  optimizer groups, checked against the method's, and typed hyper-parameters laid over them;
* [`export`][ncl_lightning.checkpoints.export] and [`card`][ncl_lightning.checkpoints.card]: a
  backbone's weights out (safetensors, torchvision / timm keys, a model card);
* [`io`][ncl_lightning.checkpoints.io]: atomic writes (``AtomicCheckpointIO``).
"""
