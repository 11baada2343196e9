"""The foundation every layer of the package stands on; it imports nothing else of ours.

* [`errors`][ncl_lightning.foundation.errors]: the [`NCLError`][] hierarchy of one-line errors;
* [`validation`][ncl_lightning.foundation.validation]: the ``check_*`` functions of arguments;
* [`registry`][ncl_lightning.foundation.registry]: name -> object registries;
* [`protocols`][ncl_lightning.foundation.protocols]: what DataModules and callbacks agree on;
* [`internals`][ncl_lightning.foundation.internals]: the one door to private Lightning,
  jsonargparse and wandb names;
* [`disk`][ncl_lightning.foundation.disk]: atomic writes that survive a full disk;
* [`resources`][ncl_lightning.foundation.resources]: the configs shipped with the package.
"""
