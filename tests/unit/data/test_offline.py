"""Offline, a question set that needs the hub says at once to pass --data (no minute of hub retries)."""

from __future__ import annotations

import socket

import pytest

from sst_interp.data import files, load_questions
from sst_interp.kernels.errors import UsageError


def test_offline_mode_refuses_at_once(monkeypatch):
    monkeypatch.delenv("SST_INTERP_DATA_DIR", raising=False)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    with pytest.raises(UsageError, match=r"cannot be reached \(HF_HUB_OFFLINE is set\); pass --data PATH"):
        load_questions("gsm8k")


def test_no_name_resolution_refuses_before_any_download(monkeypatch):
    monkeypatch.delenv("SST_INTERP_DATA_DIR", raising=False)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)

    def no_dns(*args, **kwargs):
        raise socket.gaierror(-3, "Temporary failure in name resolution")

    def must_not_download(*args, **kwargs):
        raise AssertionError("hf_hub_download was called although the hub host does not resolve")

    monkeypatch.setattr(files.socket, "getaddrinfo", no_dns)
    monkeypatch.setattr("huggingface_hub.hf_hub_download", must_not_download)
    with pytest.raises(UsageError, match="does not resolve .*pass --data PATH"):
        load_questions("math500")
    assert files.hub_unreachable_reason() == "huggingface.co does not resolve (gaierror)"
