"""``python -m ncl_lightning.export``: see [`ncl_lightning.export`][]."""

from ncl_lightning.export import main

if __name__ == "__main__":
    main()
