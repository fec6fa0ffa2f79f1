"""Reference implementations for the course *Inside the Transformer Block*.

One concept per module, each the subject of a chapter::

    info_theory   entropy, cross-entropy, KL, perplexity, mutual information (chapter 1)

``device.get_device()`` is the one place that picks a device; ``notebook.setup()`` is what the
first cell of every notebook calls. ``grading`` holds the checkers the exercises' hidden tests call
and is imported on demand (it is not needed to use the library).
"""

__version__ = "0.1.0"

from . import device, info_theory, notebook

__all__ = ["__version__", "device", "info_theory", "notebook"]
