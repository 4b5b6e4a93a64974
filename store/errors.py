"""What a store call may raise, named here once so that no module outside the store imports
redis-py (an import-linter contract in pyproject.toml): a service catches ``RedisError`` for "the
store failed", ``OutOfMemoryError`` for "the store is full" (maxmemory, noeviction), and the SDK
tells a lost connection and a timeout apart."""

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import OutOfMemoryError, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

__all__ = ["OutOfMemoryError", "RedisConnectionError", "RedisError", "RedisTimeoutError", "ResponseError"]
