"""Which precision a device computes natively, decided in one place.

bf16 halves memory traffic and roughly doubles CPU throughput where the CPU has bf16 instructions
(``avx512_bf16`` or AMX), but where it is emulated (AVX2-only CPUs) a bf16 matmul is many times *slower* than fp32.
So every "auto" choice of weights dtype, autocast or vLLM dtype goes through :func:`native_dtype`, which picks
bf16 only where the device computes it, and logs what it chose and why.
"""

from __future__ import annotations

import logging

__all__ = ["BF16_CPU_FLAGS", "cpu_flags", "cpu_kind", "native_dtype", "resolve_autocast", "resolve_dtype"]

logger = logging.getLogger(__name__)

#: CPU flags (as /proc/cpuinfo spells them) of native bf16 arithmetic.
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
DTYPES = ("float32", "bfloat16")


def cpu_flags(path: str = "/proc/cpuinfo") -> frozenset[str]:
    """The feature flags of the first CPU in ``path`` (x86 ``flags``, ARM ``Features``); empty where unreadable."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip() in ("flags", "Features"):
                    return frozenset(value.split())
    except OSError:
        pass
    return frozenset()


def cpu_kind() -> str:
    """What benchmarks record about the CPU: whether bf16 is native, and which of the deciding flags it has,
    e.g. ``"native bf16 (avx512_bf16, amx_bf16)"`` or ``"no native bf16 (avx2; no avx512_bf16, amx_bf16)"``."""
    flags = cpu_flags()
    present = [f for f in BF16_CPU_FLAGS if f in flags]
    if present:
        return f"native bf16 ({', '.join(present)})"
    vector = next((v for v in ("avx512f", "avx2", "avx", "neon", "asimd") if v in flags), "unknown vector unit")
    return f"no native bf16 ({vector}; no {', '.join(BF16_CPU_FLAGS)})"


def native_dtype(device: str = "cpu") -> str:
    """``"bfloat16"`` where ``device`` computes bf16 natively (a CUDA GPU with bf16, a CPU with avx512_bf16 or
    AMX), else ``"float32"``."""
    if device.startswith("cuda"):
        import torch

        return "bfloat16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "float32"
    return "bfloat16" if set(BF16_CPU_FLAGS) & cpu_flags() else "float32"


def resolve_dtype(dtype: str, device: str = "cpu", *, what: str = "weights") -> str:
    """``dtype`` itself (``"float32"`` or ``"bfloat16"``), or for ``"auto"`` :func:`native_dtype`, logged."""
    aliases = {"fp32": "float32", "bf16": "bfloat16"}
    dtype = aliases.get(dtype, dtype)
    if dtype == "auto":
        chosen = native_dtype(device)
        logger.info("%s dtype auto -> %s on %s (%s)", what, chosen, device, _why(device))
        return chosen
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be 'auto', 'float32' or 'bfloat16', got {dtype!r}")
    if dtype == "bfloat16" and not device.startswith("cuda") and native_dtype(device) != "bfloat16":
        logger.warning(
            "%s in bfloat16 on a CPU without native bf16 (%s): expect it to be many times slower", what, cpu_kind()
        )
    return dtype


def resolve_autocast(autocast: str, device: str = "cpu") -> str:
    """``"bf16"`` or ``"off"``: ``autocast`` itself, or for ``"auto"`` bf16 exactly where it is native, logged."""
    if autocast == "auto":
        chosen = "bf16" if native_dtype(device) == "bfloat16" else "off"
        logger.info("autocast auto -> %s on %s (%s)", chosen, device, _why(device))
        return chosen
    if autocast not in ("off", "bf16"):
        raise ValueError(f"autocast must be 'auto', 'off' or 'bf16', got {autocast!r}")
    return autocast


def _why(device: str) -> str:
    return "CUDA bf16 support" if device.startswith("cuda") else f"CPU: {cpu_kind()}"
