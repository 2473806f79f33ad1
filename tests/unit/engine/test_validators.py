"""plugins/module_utils/engine/validators.py: values that reach a command line."""

import pytest

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.validators import (
    finite_number, positive_int, qemu_img_size)


@pytest.mark.parametrize("size", ["40G", "512M", "1.5T", "1073741824", "8k", "512"])
def test_qemu_img_sizes_pass_unchanged(size):
    assert qemu_img_size(size) == size


@pytest.mark.parametrize("size, message", [
    ("-obacking_file=/etc/shadow", "is not a disk size"),   # would be read as an option
    ("--help", "is not a disk size"),
    ("40G\n", "is not a disk size"),
    (" 40G", "is not a disk size"),
    ("1.5", "is not a disk size"),
    ("40 G", "is not a disk size"),
    ("", "is not a disk size"),
    (40, "is not a disk size"),
    ("0", "smaller than one 512-byte sector"),
    ("0.0001k", "smaller than one 512-byte sector"),
    ("9E", "larger than qemu-img can create"),
])
def test_qemu_img_sizes_are_refused_naming_the_option(size, message):
    with pytest.raises(GpuhostError) as info:
        qemu_img_size(size, field="disk.size")
    assert info.value.field == "disk.size" and message in info.value.message
    assert "qemu-img" in info.value.fix or "512 bytes" in info.value.fix or "smaller" in info.value.fix


@pytest.mark.parametrize("value, message", [
    (float("nan"), "nan is not a finite number"),     # a NaN timeout never expires
    (float("inf"), "inf is not a finite number"),
    ("ten", "'ten' is not a finite number"),
    (True, "True is not a finite number"),
    (None, "None is not a finite number"),
    (0, "timeout_s must be more than 0, got 0"),
    (-1.5, "timeout_s must be more than 0, got -1.5"),
    (86401, "timeout_s must be at most 86400, got 86401"),
])
def test_finite_numbers_refuse_nan_infinity_and_out_of_range(value, message):
    with pytest.raises(GpuhostError) as info:
        finite_number(value, "timeout_s", maximum=86400, unit="seconds")
    assert info.value.field == "timeout_s" and message in info.value.message
    assert "seconds" in info.value.fix


def test_finite_numbers_pass_as_floats_and_zero_only_when_allowed():
    assert finite_number("2.5", "t") == 2.5 and finite_number(3, "t") == 3.0
    assert finite_number(0, "t", allow_minimum=True) == 0.0


@pytest.mark.parametrize("value, message", [(0, "at least 1, got 0"), (-3, "at least 1, got -3"),
                                            (True, "is not a whole number"), (1.5, "is not a whole number"),
                                            (5, "at most 4, got 5")])
def test_positive_ints_refuse_below_one_bools_and_fractions(value, message):
    with pytest.raises(GpuhostError) as info:
        positive_int(value, "batch_size", maximum=4)
    assert info.value.field == "batch_size" and message in info.value.message


# -- one set of validators ----------------------------------------------------------------

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine import validators  # noqa: E402
from ansible_collections.gpuhost.kvm.plugins.module_utils.host import vf_settings  # noqa: E402


def test_mac_and_vlan_validators_live_in_validators_and_vf_settings_uses_them():
    # one set: vf_settings uses these objects, as sriov.py and domain/xml.py do
    assert vf_settings.validate_mac is validators.validate_mac
    assert vf_settings.validate_vlan is validators.validate_vlan
    assert validators.validate_mac("52:54:00:AB:00:01") == "52:54:00:ab:00:01"
    with pytest.raises(GpuhostError, match="is not a MAC address"):
        validators.validate_mac("52:54:00:ab:00:01\n", field="mac")
    with pytest.raises(GpuhostError, match="outside 0..4094"):
        validators.validate_vlan(4095)


@pytest.mark.parametrize("name", ["eno1", "ens1f0np0", "br-tenant.100", "a" * 15, "enp65s0f1v3", "wlan_0"])
def test_interface_names_pass_unchanged(name):
    assert validators.interface_name(name, field="pf") == name


@pytest.mark.parametrize("name, message", [
    ("a" * 16, "longer than the kernel's 15-byte limit"),
    ("é" * 8, "longer than the kernel's 15-byte limit"),   # 16 bytes in UTF-8
    ("eth0\n", "is not an interface name"),                # a trailing newline
    ("eth 0", "is not an interface name"),
    ("eth0:1", "is not an interface name"),                # an alias label, not a device
    ("../eth0", "is not an interface name"),
    (".", "is not an interface name"),
    ("..", "is not an interface name"),
    ("-eth0", "is not an interface name"),                 # read as an option by ip
    ("eth\x000", "is not an interface name"),
    ("", "is not an interface name"),
    (None, "is not an interface name"),
    (7, "is not an interface name"),
])
def test_interface_names_follow_the_kernel_rules(name, message):
    with pytest.raises(GpuhostError) as err:
        validators.interface_name(name, field="pf")
    assert err.value.field == "pf" and message in err.value.message
    assert "ip -br link" in err.value.fix


def test_config_paths_must_be_absolute_and_exist_and_are_never_created(tmp_path):
    config = tmp_path / "irqbalance"
    config.write_text("IRQBALANCE_ONESHOT=0\n")
    assert validators.config_path(str(config), "irqbalance_config") == str(config)
    assert validators.config_path(str(tmp_path) + "/.", "d", kind="directory") == str(tmp_path)
    for value, message in (("etc/sysconfig/irqbalance", "is a relative path"),
                           (str(tmp_path / "missing"), "does not exist or is not a file"),
                           (str(tmp_path), "does not exist or is not a file"),
                           ("", "is not a path"),
                           (str(config) + "\n", "holds control characters")):
        with pytest.raises(GpuhostError) as err:
            validators.config_path(value, "irqbalance_config")
        assert err.value.field == "irqbalance_config" and message in err.value.message
    assert not (tmp_path / "missing").exists()


@pytest.mark.parametrize("value, parsed", [
    ("http://127.0.0.1:8000", ("http", "127.0.0.1", 8000, "")),
    ("http://triton", ("http", "triton", 80, "")),
    ("https://triton.example/v2/", ("https", "triton.example", 443, "/v2")),
    ("http://[::1]:8000/prefix", ("http", "::1", 8000, "/prefix")),
])
def test_urls_parse_into_scheme_host_port_and_path(value, parsed):
    assert validators.url(value) == parsed


@pytest.mark.parametrize("value, message", [
    ("ftp://host", "the scheme of 'ftp://host' is ftp, not http or https"),
    ("host:8000", "is not an absolute URL"),
    ("http://host:8000:9", "has no valid host"),
    ("http://host:+80", "has no valid port"),
    ("http://host:\u0663", "has no valid port"),        # a non-ASCII digit
    ("http://ho_st", "has no valid host"),
    ("http://host#x", "has a query or a fragment"),
    ("", "is not a URL"),
    (None, "is not a URL"),
])
def test_malformed_urls_are_refused(value, message):
    with pytest.raises(GpuhostError) as err:
        validators.url(value, field="url")
    assert err.value.field == "url" and message in err.value.message


def test_positive_int_takes_a_minimum_and_its_own_advice():
    assert validators.positive_int(0, "warmup_requests", minimum=0) == 0
    with pytest.raises(GpuhostError) as err:
        validators.positive_int(0, "concurrency", fix="use 8")
    assert err.value.fix == "use 8"


def test_absolute_paths_refuse_relative_ones_without_looking_at_the_disk():
    assert validators.absolute_path("/var/lib/gpuhost//ledger.json", "ledger_path") == \
        "/var/lib/gpuhost/ledger.json"
    with pytest.raises(GpuhostError) as err:
        validators.absolute_path("var/lib/gpuhost/ledger.json", "ledger_path", kind="ledger file")
    assert err.value.field == "ledger_path" and "is a relative path" in err.value.message
    assert "absolute path of the ledger file" in err.value.fix
