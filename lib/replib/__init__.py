"""replib: the shared package of the book "ICML 2026 papers, replicated in code you can run on a laptop"."""

__version__ = "0.1.0"
