"""ISA class -> int8 scheme, from CPU flag sets recorded on real machines (/proc/cpuinfo)."""

import pytest

from edgekit.devices.presets import PRESETS
from edgekit.errors import EdgekitError
from edgekit.isa import CLASSES, classify, speedup_note
from edgekit.quantization.scheme import choose_scheme

# (machine, arch, flags as /proc/cpuinfo lists them: only the ones that matter are kept, plus neighbours)
RECORDED = [
    (
        "Xeon Platinum 8481C (Sapphire Rapids)",
        "x86_64",
        "sse4_2 avx avx2 fma avx512f avx512bw avx512_vnni avx_vnni amx_int8 amx_tile",
        "x86-amx",
    ),
    (
        "AMD EPYC 9B45 (Zen 5, this project's VM)",
        "x86_64",
        "sse4_2 avx avx2 fma avx512f avx512bw avx512_vnni avx_vnni avx512_bf16",
        "x86-vnni",
    ),
    ("Xeon Gold 6248 (Cascade Lake)", "x86_64", "sse4_2 avx avx2 fma avx512f avx512bw avx512_vnni", "x86-vnni"),
    ("Core i7-12700 (Alder Lake, no AVX-512)", "x86_64", "sse4_2 avx avx2 fma avx_vnni", "x86-vnni"),
    ("Xeon Gold 6154 (Skylake-SP)", "x86_64", "sse4_2 avx avx2 fma avx512f avx512bw avx512cd", "x86-avx512"),
    ("AMD EPYC 7551 (Zen 1)", "x86_64", "sse4_2 avx avx2 fma sha_ni", "x86-avx2"),
    ("Xeon E5-2670 v2 (Ivy Bridge)", "x86_64", "sse4_2 avx", "x86-sse"),
    (
        "Raspberry Pi 5 (Cortex-A76)",
        "aarch64",
        "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp",
        "arm64-dotprod",
    ),
    ("Raspberry Pi 4 (Cortex-A72)", "aarch64", "fp asimd evtstrm crc32 cpuid", "arm64"),
    ("AWS Graviton3 (Neoverse V1)", "aarch64", "fp asimd asimddp sve i8mm bf16 sha3 sm4 asimdfhm", "arm64-i8mm"),
    ("RISC-V board", "riscv64", "", "other"),
]


@pytest.mark.parametrize("machine, arch, flags, expected", RECORDED, ids=[r[0] for r in RECORDED])
def test_recorded_cpus_get_their_class(machine, arch, flags, expected):
    assert classify(set(flags.split()), arch).name == expected


def test_every_class_is_recorded_and_has_a_scheme():
    assert {r[3] for r in RECORDED} == set(CLASSES)
    for isa in CLASSES.values():
        assert isa.activations in ("uint8", "int8") and isa.weights in ("uint8", "int8") and isa.reason


@pytest.mark.parametrize(
    "isa_class, activations, weights, pair_safe",
    [
        ("x86-amx", "uint8", "int8", False),  # VNNI/AMX: u8 x s8 accumulates in int32, the fast path
        ("x86-vnni", "uint8", "int8", False),
        ("x86-avx512", "uint8", "uint8", False),  # VPMADDUBSW saturates u8 x s8: u8 x u8 (not measured on such a CPU)
        ("x86-avx2", "uint8", "int8", True),  # VPMADDUBSW: u8 x s8 with weight pairs kept within int16 (quantization.pair_safe)
        ("x86-sse", "uint8", "uint8", False),
        ("arm64-i8mm", "int8", "int8", False),
        ("arm64-dotprod", "int8", "int8", False),
        ("arm64", "int8", "int8", False),
        ("other", "uint8", "uint8", False),
    ],
)
def test_for_target_class_picks_the_scheme_and_records_why(isa_class, activations, weights, pair_safe):
    scheme = choose_scheme(isa_class)
    assert (scheme.activations, scheme.weights, scheme.pair_safe_weights) == (activations, weights, pair_safe)
    assert scheme.isa_class == isa_class and scheme.isa_from == f"--for-target {isa_class}"
    assert scheme.reason.startswith(isa_class) and not scheme.symmetric_activations


def test_a_device_preset_gets_its_cpus_scheme_not_the_build_hosts():
    pi = choose_scheme("raspberry-pi-5")
    assert (pi.activations, pi.weights, pi.isa_class) == ("int8", "int8", "arm64-dotprod")
    assert pi.isa_from == "device preset raspberry-pi-5"
    assert {p.isa_class for p in PRESETS.values()} <= set(CLASSES)


def test_a_target_on_this_host_gets_the_hosts_class():
    from edgekit.isa import host_class

    scheme = choose_scheme("onnxruntime:cpu")
    assert scheme.isa_class == host_class().name and scheme.isa_from == "this host's CPU flags"


def test_tensorrt_is_not_an_isa_class():
    assert choose_scheme("tensorrt:cuda").isa_class is None


def test_an_unknown_for_target_is_a_clear_error():
    with pytest.raises(EdgekitError, match="not a target, an ISA class or a device") as err:
        choose_scheme("x86-avx3")
    assert "x86-avx2" in err.value.hint
    with pytest.raises(EdgekitError, match="no device 'nosuchboard'"):
        choose_scheme("onnxruntime:cpu@nosuchboard")


def test_a_process_that_cpuid_shows_less_than_cpuinfo_uses_cpuid(monkeypatch):
    """qemu -cpu Haswell or a masking hypervisor: /proc/cpuinfo lists the host's AVX-512, CPUID does not."""
    import edgekit.isa as isa

    monkeypatch.setattr("edgekit.isa.cpu_flags", lambda: {"avx2", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni"})
    monkeypatch.setattr(isa, "_cpuid_flags", lambda: {"avx2"})
    isa.host_flags.cache_clear()
    try:
        assert isa.classify(set(isa.host_flags()), "x86_64").name == "x86-avx2"
    finally:
        isa.host_flags.cache_clear()


def test_int8_that_is_not_faster_says_size_only_and_names_the_class():
    assert speedup_note("int8", 0.89, "x86-avx2") == "int8 here: size only, not faster (x86-avx2: 0.89x fp32)"
    assert speedup_note("int8", 1.27, "x86-vnni") is None
    assert speedup_note("fp16", 0.5, "x86-avx2") is None and speedup_note("int8", None, "x86-avx2") is None


def test_a_min_speedup_gate_fails_with_the_reason():
    from edgekit.metrics.gate import Thresholds, check_row

    row = {"precision": "int8", "speedup": 0.89, "speedup_note": speedup_note("int8", 0.89, "x86-avx2")}
    (result,) = check_row(row, Thresholds(min_speedup=1.2))
    assert not result.passed and "int8 here: size only, not faster (x86-avx2" in result.reason


def test_an_inventory_device_gets_its_probed_class(tmp_path, monkeypatch):
    from edgekit.devices.inventory import Device, add_device

    monkeypatch.setenv("EDGEKIT_DEVICES", str(tmp_path / "devices.yaml"))
    add_device(Device("pi", "pi@board.local", facts={"arch": "aarch64", "isa": ["asimd", "asimddp"]}, checked="2026-11-23"))
    add_device(Device("nuc", "me@nuc.local", preset="intel-npu"))
    add_device(Device("blank", "me@blank.local"))
    for spec in ("pi", "onnxruntime:cpu@pi"):
        scheme = choose_scheme(spec)
        assert (scheme.isa_class, scheme.activations) == ("arm64-dotprod", "int8") and "probed" in scheme.isa_from
    assert choose_scheme("nuc").isa_class == "x86-vnni"  # not probed yet: its preset's class
    with pytest.raises(EdgekitError, match="has not been probed") as err:
        choose_scheme("blank")
    assert "edgekit devices check blank" in err.value.hint
