"""Demo tools: deterministic, no network, made-up meanings.

The names come from the reference tool conversations the formats are tested against
(tests/support/seed.py: superSecretTool and say; get_flumbuster and calculate_zorbix from the
obfuscated Hermes end-to-end conversations). Made-up names matter: a model cannot answer from
memory, it must call the tool.
Load them with ``load_tool_modules(["worker.demo_tools"])``.
"""

from __future__ import annotations

import hashlib
from typing import Literal

from toolq.tools import tool

_GRADES = ("calm", "mild", "brisk", "wild", "feral")


@tool
def superSecretTool(a: int, b: int) -> int:
    """Adds two numbers

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


@tool
def say(text: str) -> str:
    """Says something out loud (TTS)

    Args:
        text: The text to say out loud
    """
    return f"said: {text}"


@tool
def get_flumbuster(location: str, uster: str | None = None) -> dict:
    """Get the current flumbuster reading for a location.

    A flumbuster reading tells how strongly the flumbuster field is felt at a place: a level from
    0 to 999 and a grade (calm, mild, brisk, wild or feral). Use it whenever the user asks about
    the flumbuster of a city or place.

    Args:
        location: The city or place to read, e.g. "Paris" or "Tokyo".
        uster: Optional uster (calibration profile) to read with, e.g. "north". Leave it out for
            the standard reading.
    """
    # sha256, not hash(): Python salts str hashes per process, and the reading must be stable.
    place = " ".join(location.split()).lower()
    profile = (uster or "").strip().lower()
    digest = hashlib.sha256(f"{place}|{profile}".encode()).digest()
    level = int.from_bytes(digest[:4], "big") % 1000
    return {
        "location": location,
        "uster": uster or "standard",
        "flumbuster": level,
        "grade": _GRADES[level * len(_GRADES) // 1000],
    }


@tool
def calculate_zorbix(zorb: int, bix: int, mode: Literal["add", "sub", "mul", "div"] = "add") -> int | float:
    """Calculate the zorbix of two whole numbers, zorb and bix.

    The zorbix combines zorb and bix with the chosen mode: "add" (zorb + bix, the default),
    "sub" (zorb - bix), "mul" (zorb * bix) or "div" (zorb / bix).

    Args:
        zorb: The first whole number.
        bix: The second whole number.
        mode: How to combine them: "add", "sub", "mul" or "div".
    """
    if mode == "add":
        return zorb + bix
    if mode == "sub":
        return zorb - bix
    if mode == "mul":
        return zorb * bix
    if bix == 0:
        raise ValueError("division by zero")
    # An exact quotient stays a whole number ("5", not "5.0"): easier for a small model to quote.
    quotient, remainder = divmod(zorb, bix)
    return quotient if remainder == 0 else zorb / bix
