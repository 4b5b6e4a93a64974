"""Tool services: tools that run in processes of their own, anywhere, reached through Redis.

A service side (``ToolService``, ``toolq tools serve MODULE``) and a caller side (``ServiceCaller``
with a ``ServiceFleetView`` of the live instances), speaking through the keys in ``store/keys.py``
and the codecs in ``calls`` and ``store/services.py`` (who serves what). The modules:
``calls`` (the call and result on the wire, delivery semantics), ``caller``, ``service``. The
command that serves tools is ``toolq/commands/serve_tools.py``.
"""

from store.services import ServiceFleet, ServiceFleetView, ServiceInfo, read_services
from toolq.services.caller import ServiceCaller
from toolq.services.service import ToolService, serve

__all__ = ["ServiceCaller", "ServiceFleet", "ServiceFleetView", "ServiceInfo", "ToolService", "read_services", "serve"]
