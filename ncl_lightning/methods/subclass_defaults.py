"""Subclass defaults that ``ncl-cli`` would silently ignore, refused with one line.

``ncl-cli`` (LightningCLI) reads a method's arguments from its ``__init__`` signature and
follows a subclass's ``**kwargs`` into its parent's signature; it then passes *every*
argument explicitly, the parent's defaults included. A subclass that changes a parent's
default with ``kwargs.setdefault("temperature", 0.5)`` (or ``if "temperature" not in
kwargs: ...``) works from Python but does nothing under the CLI: the run trains with the
parent's value and nothing says so. The defaults that survive the CLI are declared:

* a parameter of the subclass's own signature with the new default, passed on to
  ``super().__init__`` (``def __init__(self, backbone, temperature: float = 0.5, **kwargs)``);
* for the loss of a contrastive method, the class attribute ``default_loss`` (the ``loss``
  argument's default ``None`` means "the class's ``default_loss``").

[`check_declared_defaults`][] reads the source of each subclass ``__init__`` and refuses
the two undeclared patterns; ``ncl-cli`` runs it on the model it builds
([`check_model_defaults`][]). From Python the defaults do what they say, so a module
built there is not refused. A class whose source cannot be read (defined in an interactive
session) is not checked.
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.methods.trainable import TrainableModule

LOSS_KEYS = ("loss", "objective")  # ``objective`` was the ``loss`` argument's old name


def _is_kwargs(node: ast.AST, kwargs: str) -> bool:
    return isinstance(node, ast.Name) and node.id == kwargs


def _string(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


@functools.cache
def undeclared_defaults(cls: type) -> tuple[str, ...]:
    """Keys that ``cls``'s own ``__init__`` defaults through its ``**kwargs``.

    Found in the source: ``<kwargs>.setdefault("<key>", ...)`` and
    ``"<key>" not in <kwargs>``. Empty when ``cls`` defines no ``__init__``, takes no
    ``**kwargs`` or its source cannot be read.
    """
    init = cls.__dict__.get("__init__")
    try:
        source = textwrap.dedent(inspect.getsource(init))  # type: ignore[arg-type]
    except (OSError, TypeError):
        return ()
    func = ast.parse(source).body[0]
    if not isinstance(func, ast.FunctionDef) or func.args.kwarg is None:
        return ()
    kwargs = func.args.kwarg.arg
    keys: list[str] = []
    for node in ast.walk(func):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "setdefault"
            and _is_kwargs(node.func.value, kwargs)
            and node.args
            and _string(node.args[0]) is not None
        ):
            keys.append(_string(node.args[0]))  # type: ignore[arg-type]
        elif (
            isinstance(node, ast.Compare)
            and _string(node.left) is not None
            and isinstance(node.ops[0], ast.NotIn)
            and _is_kwargs(node.comparators[0], kwargs)
        ):
            keys.append(_string(node.left))  # type: ignore[arg-type]
    return tuple(keys)


def check_declared_defaults(cls: type, base: type) -> None:
    """Refuse a subclass of ``base`` that defaults a parent argument through ``**kwargs``.

    Args:
        cls: The class being built (``type(self)``).
        base: The class whose ``__init__`` calls this; it and its parents are not read.

    Raises:
        ConfigError: One line naming the class, the key and the declared way to do it.
    """
    for klass in cls.__mro__:
        if klass is base:
            return
        for key in undeclared_defaults(klass):
            name = klass.__name__
            fix = (
                f"set the class attribute `default_loss = <name>` on {name}"
                if key in LOSS_KEYS
                else f"declare `{key}` with its default in {name}.__init__ and pass it on"
            )
            raise ConfigError(
                f"{name}.__init__ defaults {key!r} through **kwargs, which ncl-cli ignores "
                f"(it passes the parent's default explicitly): {fix}",
                key=key,
            )


def check_model_defaults(model: object) -> None:
    """[`check_declared_defaults`][] for the class of a
    [`TrainableModule`][ncl_lightning.methods.TrainableModule] (what ``ncl-cli`` builds); other
    modules pass.

    Raises:
        ConfigError: A subclass defaulting a parent argument through ``**kwargs``.
    """
    if isinstance(model, TrainableModule):
        check_declared_defaults(type(model), TrainableModule)
