"""``python -m islands.cli``: the ``islands`` command."""

from islands.cli import main

if __name__ == "__main__":
    main()
