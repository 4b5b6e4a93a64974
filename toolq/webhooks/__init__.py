"""Webhooks, the part every room shares: the sending service is the top-level ``webhooks`` package.

``signing`` (Standard Webhooks signatures, and ``verify_webhook`` for receivers), ``deliveries``
(a delivery and its attempts on the wire, as the gateway answers and the SDK returns them; kept in
Redis by store/deliveries.py), ``settings`` (the secrets, defaults and allow-private setting the
gateway and the sender share), ``urls`` (where a webhook may be sent), ``target`` (a job's webhook
at submission, for the gateway and the SDK's Redis mode).

A receiver's names are here too (``toolq.webhooks.new_secret()``, ``verify_webhook``). The package
imports only ``signing`` (the standard library), so the light client loads nothing else of it.
"""

from toolq.webhooks.signing import WebhookVerificationError, new_secret, verify_webhook

__all__ = ["WebhookVerificationError", "new_secret", "verify_webhook"]
