"""``toolq.__all__`` is the public package's front: every name in it imports and is documented,
and nothing else that the package exposes is public by accident."""

from __future__ import annotations

import importlib
import inspect
import types

import toolq


def test_every_name_in_all_imports_and_is_documented():
    assert toolq.__all__ == sorted(toolq.__all__)
    for name in toolq.__all__:
        assert not name.startswith("_"), name
        obj = getattr(toolq, name)
        assert (inspect.getdoc(obj) or "").strip(), f"toolq.{name} has no docstring"
        exec(f"from toolq import {name}", {})  # the import a user writes


def test_nothing_public_leaks_beside_all():
    exposed = {
        name
        for name, value in vars(toolq).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    # tool and ToolService are imported when first asked for (toolq/__init__.py), so they may not be here yet
    assert exposed <= set(toolq.__all__)
    assert set(toolq.__all__) <= set(dir(toolq))


def test_the_sdk_names_import_from_where_they_did():
    client = importlib.import_module("toolq.client")
    for name in ("Client", "SyncClient", "ClientSettings", "build_request"):
        assert name in client.__all__ and getattr(client, name) is not None
    assert client.Client is toolq.Client and client.SyncClient is toolq.SyncClient
