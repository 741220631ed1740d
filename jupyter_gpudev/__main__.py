"""``python -m jupyter_gpudev``: the same as ``jupyter gpudev``."""

from .cli.main import main

if __name__ == "__main__":
    main()
