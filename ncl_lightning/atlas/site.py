"""Write an atlas folder: ``index.html`` (page, style, script and data in one file) and
``img/<model>/<dim>.<ext>`` strips."""

from __future__ import annotations

import base64
import copy
from pathlib import Path
from typing import Any

from ncl_lightning.atlas.schema import FORMAT, image_path


def atlas_document(models: list[dict[str, Any]], title: str) -> dict[str, Any]:
    """The document of [`schema`][ncl_lightning.atlas.schema] for ``models``."""
    return {"format": FORMAT, "title": title, "models": models}


def write_page(folder: Path, models: list[dict[str, Any]], title: str) -> Path:
    """Write ``<folder>/index.html`` for ``models`` (their strips already in ``folder``)."""
    from ncl_lightning.atlas.page import render_page

    folder.mkdir(parents=True, exist_ok=True)
    index = folder / "index.html"
    index.write_text(render_page(atlas_document(models, title)), encoding="utf-8")
    return index


def single_file_page(folder: Path, models: list[dict[str, Any]], title: str, most: int) -> str:
    """A page with no files beside it (a W&B HTML panel): the strips of each model's ``most``
    dimensions of highest EA are inlined as data URLs; the other cards show no images."""
    from ncl_lightning.atlas.page import render_page

    models = copy.deepcopy(models)
    for model in models:
        dims, ext = model["dims"], model["images"]["ext"]
        live = [j for j, top in enumerate(dims["top"]) if top]
        live.sort(key=lambda j: -(dims["ea"][j] or 0.0))
        inline = {}
        for j in live[:most]:
            data = (folder / image_path(model["key"], j, ext)).read_bytes()
            # png, jpeg and webp are their own MIME subtypes (image/png, ...)
            inline[str(j)] = f"data:image/{ext};base64,{base64.b64encode(data).decode()}"
        model["images"]["inline"] = inline
    return render_page(atlas_document(models, title))
