"""`taylax.__version__`: the installed distribution's version, as `pyproject.toml` gives it."""

from importlib import metadata

try:
    __version__ = metadata.version("taylax")
except metadata.PackageNotFoundError:
    # A source tree on sys.path that was never installed has no metadata to read; a
    # number typed here would drift from pyproject.toml and pass for a real release.
    __version__ = "0+unknown"
