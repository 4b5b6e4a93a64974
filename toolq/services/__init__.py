"""Tool services: tools that run in processes of their own, anywhere, reached through Redis.

A service side (``ToolService``, ``toolq tools serve MODULE``) and a caller side (``ServiceCaller``
with a ``LiveCatalog`` of the live instances), speaking through the keys in ``toolq/store/keys.py``
and the codecs in ``calls`` and ``catalog``. The modules: ``catalog`` (who serves what),
``calls`` (the call and result on the wire, delivery semantics), ``caller``, ``service``. The
command that serves tools is ``toolq/commands/serve_tools.py``.
"""

from toolq.services.caller import ServiceCaller
from toolq.services.service import ToolService, serve
from toolq.store.services import LiveCatalog, ServiceCatalog, ServiceInfo, read_services

__all__ = ["LiveCatalog", "ServiceCaller", "ServiceCatalog", "ServiceInfo", "ToolService", "read_services", "serve"]
