"""Shared fixtures."""

import codecs
import pathlib

import pytest


@pytest.fixture
def utf8_files(monkeypatch):
    """Fail any text read or write of a file that does not name UTF-8: the book's files are UTF-8 on
    every machine, whatever the locale's encoding (which a test cannot change in a running interpreter)."""
    def checked(original):
        def method(self, *args, **kwargs):
            encoding = kwargs.get("encoding", args[0] if args else None)
            if encoding is None or codecs.lookup(encoding).name != "utf-8":
                raise AssertionError(f"{self}: text {original.__name__} without encoding='utf-8'")
            return original(self, *args, **kwargs)
        return method

    monkeypatch.setattr(pathlib.Path, "read_text", checked(pathlib.Path.read_text))
    monkeypatch.setattr(pathlib.Path, "write_text", checked(pathlib.Path.write_text))
