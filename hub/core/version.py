"""The hub's version, in the pure core so that every layer may read it: the ``hub`` package
root is out of the layers' reach (see ``hub/__init__.py``)."""

__version__ = "0.1.0"
