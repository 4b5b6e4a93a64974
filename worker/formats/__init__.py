"""Tool-call formats, registered in one table.

A format is one module here that defines ``FORMAT``, an instance of a ToolCallFormat subclass
(worker/formats/base.py); adding a format is adding its module and a row to ``FORMATS``. What
several formats share lives in ``common`` (reading calls) and ``tagged`` (JSON between tags).
"""

from __future__ import annotations

from worker.formats import (
    command_r,
    command_r7b,
    deepseek,
    deepseek_dsml,
    functionary_v2,
    functionary_v3_1,
    functionary_v3_2,
    gemma4,
    glm,
    gpt_oss,
    granite,
    hermes,
    hunyuan,
    json_in_tags,
    kimi_k2,
    kimi_k3,
    lfm2,
    llama3,
    minicpm,
    minimax_m2,
    mistral,
    mixtral,
    qwen3_coder,
    seed_oss,
    solar,
    thoughtful_steps,
)
from worker.formats.base import ParsedOutput, ToolCallFormat, ToolDefinition

DEFAULT_FORMAT = "hermes"
FORMATS: dict[str, ToolCallFormat] = {
    "hermes": hermes.FORMAT,
    "mixtral": mixtral.FORMAT,
    "functionary_v2": functionary_v2.FORMAT,
    "thoughtful_steps": thoughtful_steps.FORMAT,
    # the families of the chat templates that llama.cpp ships (worker/formats/detect.py)
    "qwen3_coder": qwen3_coder.FORMAT,
    "seed_oss": seed_oss.FORMAT,
    "glm": glm.FORMAT,
    "minimax_m2": minimax_m2.FORMAT,
    "deepseek_r1": deepseek.FORMAT,
    "deepseek_v3_1": deepseek.FORMAT_V3_1,
    "deepseek_v3_2": deepseek_dsml.FORMAT,
    "deepseek_v4": deepseek_dsml.FORMAT_V4,
    "llama3": llama3.FORMAT,
    "mistral": mistral.FORMAT,
    "mistral_args": mistral.FORMAT_ARGS,
    "functionary_v3_1": functionary_v3_1.FORMAT,
    "functionary_v3_2": functionary_v3_2.FORMAT,
    "kimi_k2": kimi_k2.FORMAT,
    "gpt_oss": gpt_oss.FORMAT,
    "granite": granite.FORMAT,
    "command_r": command_r.FORMAT,
    "command_r7b": command_r7b.FORMAT,
    "nemotron_v2": json_in_tags.NEMOTRON_V2,
    "apriel": json_in_tags.APRIEL,
    "gigachat": json_in_tags.GIGACHAT,
    "apertus": json_in_tags.APERTUS,
    "minimax_m1": json_in_tags.MINIMAX_M1,
    "firefunction": json_in_tags.FIREFUNCTION,
    "solar": solar.FORMAT,
    "minicpm": minicpm.FORMAT,
    "hunyuan": hunyuan.FORMAT,
    "lfm2": lfm2.FORMAT,
    "gemma4": gemma4.FORMAT,
    "kimi_k3": kimi_k3.FORMAT,
    "gigachat3": json_in_tags.GIGACHAT3,
}


def available_formats() -> list[str]:
    return sorted(FORMATS)


def get_format(name: str = DEFAULT_FORMAT) -> ToolCallFormat:
    if name not in FORMATS:
        raise ValueError(f"unknown tool-call format {name!r}; available: {', '.join(available_formats())}")
    return FORMATS[name]


__all__ = [
    "DEFAULT_FORMAT",
    "FORMATS",
    "ParsedOutput",
    "ToolCallFormat",
    "ToolDefinition",
    "available_formats",
    "get_format",
]
