"""`videogen serve` / `videogen worker` on a library-only install (no `[server]` extra): one line
naming the extra and what is missing, exit 2, instead of an ImportError traceback."""

import argparse
import importlib.util

import pytest

from videogen.workers import cli


@pytest.mark.parametrize(("command", "missing"), [("serve", "fastapi"), ("worker", "celery")])
def test_a_missing_server_extra_is_one_line_naming_the_extra(command, missing, monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == missing else real(name, *a))
    func = cli.cmd_serve if command == "serve" else cli.cmd_worker
    args = argparse.Namespace(
        host="127.0.0.1", port=0, data_dir=None, no_auth=True, log_level="info", gpu=None, name=None
    )
    assert func(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"videogen: error: `videogen {command}` needs the server extra: "
        f"pip install 'videogen[server]' (missing: {missing})"
    ]
