"""Token ids -> the text pieces the explorer shows, from the run's own tokenizer file when it can be found.

A run records token ids, not pieces. The tokenizer is the backbone's: ``identity.model`` of the manifest names it
(the default backbone: its converted cache folder; a local Hugging Face folder: its ``tokenizer.json``). It is read with the
``tokenizers`` library alone (no model, no torch), so it costs a fraction of a second. A run whose tokenizer is not
on this machine (a hub id offline, a synthetic run) shows ids as ``⟨id⟩``.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sst_interp.model.cache import DEFAULT_BACKBONE_ID, DEFAULT_MODEL, default_backbone_dir

#: SentencePiece's word-boundary marker and the byte-level BPE space, shown as the spaces they stand for.
_SPACE_MARKERS = {"\u2581": " ", "\u0120": " ", "\u010a": "\n"}


def tokenizer_file(manifest: dict[str, Any]) -> Path | None:
    """The ``tokenizer.json`` of the run's backbone on this machine, or None when there is none."""
    model = str((manifest.get("identity") or {}).get("model") or "")
    if model in (DEFAULT_MODEL, DEFAULT_BACKBONE_ID):  # record names the default backbone by its identity string
        folder = default_backbone_dir()
    elif model and Path(model).is_dir():
        folder = Path(model)
    else:
        return None
    target = folder / "tokenizer.json"
    return target if target.is_file() else None


class TokenText:
    """Pieces of token ids; the tokenizer file is read once, in a background thread started by :meth:`start`
    (parsing a 260k-token vocabulary takes about a second)."""

    def __init__(self, manifest: dict[str, Any]) -> None:
        self._manifest = manifest
        # a CodeACT run's action tokens are shown by their names (the demo maps <execute> onto unused ids)
        actions = (manifest.get("episode") or {}).get("action_tokens") or {}
        self._actions = {int(i): str(name) for name, i in actions.items()}
        self._tokenizer: Any = None
        self._ready = threading.Event()
        self._started = False
        self.source = "token ids (no tokenizer found for this run)"

    def start(self) -> TokenText:
        """Begin loading in the background (the first question view waits for it)."""
        self._started = True
        threading.Thread(target=self._load, name="explore-tokenizer", daemon=True).start()
        return self

    def _load(self) -> None:
        try:
            target = tokenizer_file(self._manifest)
            if target is not None:
                from tokenizers import Tokenizer

                self._tokenizer = Tokenizer.from_file(str(target))
                self.source = str(target)
        except Exception as err:  # noqa: BLE001 - a tokenizer we cannot read only costs the pieces; said in the UI
            self.source = f"token ids (the tokenizer could not be read: {' '.join(str(err).split())})"
        finally:
            self._ready.set()

    def encode(self, text: str) -> list[int] | None:
        """``text``'s token ids as the run's tokenizer encodes it (its special tokens added, as ``record`` encodes a
        prompt), or None without a tokenizer."""
        if self._started:
            self._ready.wait(timeout=30)
        if self._tokenizer is None:
            return None
        return list(self._tokenizer.encode(text).ids)

    def pieces(self, ids: Sequence[int]) -> list[str]:
        """One display piece per id: a CodeACT action token's name, else the tokenizer's piece (``⟨id⟩`` without one;
        -1, an unrecorded argmax, is ``∅``)."""
        if self._started:
            self._ready.wait(timeout=30)
        out = []
        for raw in ids:
            i = int(raw)
            if i < 0:
                out.append("\u2205")
                continue
            if i in self._actions:
                out.append(self._actions[i])
                continue
            piece = self._tokenizer.id_to_token(i) if self._tokenizer is not None else None
            if piece is None:
                out.append(f"\u27e8{i}\u27e9")
                continue
            for marker, text in _SPACE_MARKERS.items():
                piece = piece.replace(marker, text)
            out.append(piece)
        return out
