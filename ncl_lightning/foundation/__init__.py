"""The foundation every layer of the package stands on; it imports nothing else of ours.

* :mod:`~ncl_lightning.foundation.errors`: the :class:`NCLError` hierarchy of one-line errors;
* :mod:`~ncl_lightning.foundation.validation`: the ``check_*`` functions of arguments;
* :mod:`~ncl_lightning.foundation.registry`: name -> object registries;
* :mod:`~ncl_lightning.foundation.protocols`: what DataModules and callbacks agree on;
* :mod:`~ncl_lightning.foundation.internals`: the one door to private Lightning,
  jsonargparse and wandb names;
* :mod:`~ncl_lightning.foundation.disk`: atomic writes that survive a full disk;
* :mod:`~ncl_lightning.foundation.resources`: the configs shipped with the package.
"""
