"""Notebook 11's differential test of the authors' code against ours (``authors.code``), as two documents."""
from __future__ import annotations

from ..authors.code import run_authors_code, run_authors_code_history
from .catalog import Document, experiment


@experiment
class AuthorsCode(Document):
    name = "authors_code"
    notebook = "11_authors_code"
    make = run_authors_code


@experiment
class AuthorsCodeHistory(Document):
    name = "authors_code_history"
    notebook = "11_authors_code"
    make = run_authors_code_history
