"""Hase's own JSON files (predictor folders, bundles, fusion rules) carry a ``format`` name and a
``format_version``; each is read here, refused with a HaseError when it is not the kind or version
this Hase writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hase_dagster.core.errors import HaseError


def load_versioned_json(
    path: Path,
    fmt: str,
    version: int,
    *,
    unreadable: str,
    foreign: str,
    other_version: str,
    missing: str | None = None,
) -> dict[str, Any]:
    """Read ``path`` as a JSON object whose ``format`` is ``fmt`` and ``format_version`` is ``version``.

    The messages are ``str.format`` templates, so each kind of file keeps its own wording and remedy.

    Args:
        path: the file.
        fmt: the ``format`` it must name.
        version: the ``format_version`` this Hase reads.
        unreadable: message when the file cannot be read or is not JSON (``{path}``, ``{exc}``).
        foreign: message when it is not an object naming ``fmt`` (``{path}``, ``{folder}``).
        other_version: message for another version (``{path}``, ``{folder}``: its
            folder, ``{found}``: its version, ``{version}``).
        missing: message when the file does not exist (``{path}``); None counts that as unreadable.

    Returns:
        The document.

    Raises:
        HaseError: with one of the messages above.
    """
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise HaseError((missing or unreadable).format(path=path, exc=exc)) from exc
    except (OSError, ValueError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise HaseError(unreadable.format(path=path, exc=exc)) from exc
    if not isinstance(document, dict) or document.get("format") != fmt:
        raise HaseError(foreign.format(path=path, folder=path.parent))
    if document.get("format_version") != version:
        raise HaseError(
            other_version.format(path=path, folder=path.parent, found=document.get("format_version"), version=version)
        )
    return document
