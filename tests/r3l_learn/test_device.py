"""bf16 only where the CPU computes it: every "auto" precision goes through r3l_learn.policies.device, decided by the
CPU
flags, on both CPU kinds (the flag reader faked with each kind's real /proc/cpuinfo flags)."""

import logging

import pytest

import r3l_learn.policies.device as device

# Flag lines as real CPUs of each kind report them (trimmed): an AVX2-only Zen 2, a Sapphire Rapids with AMX.
AVX2_ONLY = "fpu vme sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c avx2 bmi2"
SAPPHIRE_RAPIDS = "fpu sse2 avx avx2 avx512f avx512bw avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8"


@pytest.fixture(params=[("avx2", AVX2_ONLY, "float32"), ("bf16", SAPPHIRE_RAPIDS, "bfloat16")], ids=lambda p: p[0])
def cpu(request, monkeypatch, tmp_path):
    kind, flags, native = request.param
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nmodel name\t: test\nflags\t\t: {flags}\n\nprocessor\t: 1\n")
    real = device.cpu_flags
    monkeypatch.setattr(device, "cpu_flags", lambda path=str(cpuinfo): real(path))
    return kind, native


def test_cpu_flags_reads_x86_and_arm_cpuinfo(tmp_path):
    x86 = tmp_path / "x86"
    x86.write_text(f"processor\t: 0\nflags\t\t: {SAPPHIRE_RAPIDS}\n")
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd evtstrm bf16\n")
    assert {"avx512_bf16", "amx_bf16"} <= device.cpu_flags(str(x86))
    assert "asimd" in device.cpu_flags(str(arm))
    assert device.cpu_flags(str(tmp_path / "missing")) == frozenset()


def test_native_dtype_and_every_auto_choice_follow_the_cpu(cpu, caplog):
    kind, native = cpu
    assert device.native_dtype("cpu") == native
    with caplog.at_level(logging.INFO, logger="r3l_learn.policies.device"):
        assert device.resolve_dtype("auto", "cpu") == native
        assert device.resolve_autocast("auto", "cpu") == ("bf16" if native == "bfloat16" else "off")
    logged = caplog.text
    assert "auto -> " in logged and ("no native bf16" in logged) == (kind == "avx2")  # the choice and why
    # explicit choices are kept, whatever the CPU
    assert device.resolve_dtype("float32", "cpu") == "float32"
    assert device.resolve_autocast("off", "cpu") == "off"


def test_cpu_kind_names_the_deciding_flags(cpu):
    kind, _ = cpu
    text = device.cpu_kind()
    if kind == "avx2":
        assert text.startswith("no native bf16") and "avx2" in text
    else:
        assert text == "native bf16 (avx512_bf16, amx_bf16)"


def test_hf_policy_auto_dtype_uses_the_same_choice(cpu):
    pytest.importorskip("torch")
    from r3l_learn.policies.hf import auto_dtype

    assert auto_dtype("cpu") == cpu[1]


def test_train_autocast_defaults_to_auto_and_resolves_by_cpu(cpu, tmp_path):
    pytest.importorskip("torch")
    from r3l_learn.loop.presets import PRESETS
    from r3l_learn.loop.train import TrainConfig

    assert TrainConfig.autocast == "auto"
    assert all(p.get("autocast", "auto") == "auto" for p in PRESETS.values())  # no preset forces bf16
    assert device.resolve_autocast(TrainConfig(out_dir=str(tmp_path)).autocast) == (
        "bf16" if cpu[1] == "bfloat16" else "off"
    )


def test_unknown_values_are_refused():
    with pytest.raises(ValueError, match="dtype must be"):
        device.resolve_dtype("float16")
    with pytest.raises(ValueError, match="autocast must be"):
        device.resolve_autocast("fp8")


def test_benchmarks_record_the_cpu_kind(cpu):
    from benchmarks import results_page as report

    facts = report.machine()
    assert facts["cpu_kind"] == device.cpu_kind()
    assert f"({facts['cpu_kind']})" in report.machine_line(facts)
    assert ("no native bf16" in facts["cpu_kind"]) == (cpu[0] == "avx2")
