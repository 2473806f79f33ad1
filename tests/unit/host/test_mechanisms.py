# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.kvm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The mechanism detector on fixture trees laid out as the packages
lay them out: RHEL 9 (grubby, BLS, dracut, virtqemud), Debian 12 (update-grub,
initramfs-tools, libvirtd), Debian with dracut installed, a host with both libvirt
layouts, and hostile trees (links out of the root, a huge file, a directory where a
binary belongs)."""

import pytest

from support.mechanism_trees import _dir, _file, _link, debian12, debian12_with_dracut, rhel9

from ansible_collections.gpuhost.kvm.plugins.module_utils.engine.errors import GpuhostError
from ansible_collections.gpuhost.kvm.plugins.module_utils.host import mechanisms


def test_rhel9_is_grubby_dracut_modular_from_its_files(tmp_path):
    rhel9(tmp_path)
    found = mechanisms.detect_mechanisms(str(tmp_path), "RedHat")
    assert found["boot_loader"]["choice"] == "grubby"
    assert found["boot_loader"]["source"] == "detected"
    # grub2-mkconfig and /etc/default/grub are there too: grubby with BLS entries wins.
    assert set(found["boot_loader"]["evidence"]) == {"grubby", "grub"}
    assert found["boot_loader"]["packages"] == ["grubby"]
    assert found["initramfs"]["choice"] == "dracut"
    assert found["initramfs"]["image_pattern"] == "/boot/initramfs-%s.img"
    assert found["initramfs"]["rebuild_argv"] == ["dracut", "--force", "--regenerate-all"]
    assert found["libvirt"]["choice"] == "modular"
    assert found["libvirt"]["source"] == "detected"
    assert found["libvirt"]["start_units"] == ["virtqemud.service"]
    assert "sockets.target.wants/virtqemud.socket" in found["libvirt"]["evidence"]["modular"][0]


def test_debian12_is_update_grub_initramfs_tools_libvirtd(tmp_path):
    debian12(tmp_path)
    found = mechanisms.detect_mechanisms(str(tmp_path), "Debian")
    assert (found["boot_loader"]["choice"], found["boot_loader"]["source"]) == ("grub", "detected")
    assert found["boot_loader"]["grub_update_argv"] == ["update-grub"]
    assert found["boot_loader"]["grub_cfg"] == "/boot/grub/grub.cfg"
    assert found["boot_loader"]["packages"] == ["grub2-common"]
    assert found["initramfs"]["choice"] == "initramfs-tools"
    assert found["initramfs"]["early_modules_path"] == "/etc/initramfs-tools/modules"
    # The modular units are shipped but libvirtd is the one enabled.
    assert (found["libvirt"]["choice"], found["libvirt"]["source"]) == ("monolithic", "detected")
    assert found["libvirt"]["units"] == ["libvirtd.service"]


def test_debian_with_dracut_installed_uses_dracut_with_debian_image_names(tmp_path):
    debian12_with_dracut(tmp_path)
    found = mechanisms.detect_mechanisms(str(tmp_path), "Debian")
    assert (found["initramfs"]["choice"], found["initramfs"]["source"]) == ("dracut", "detected")
    assert found["initramfs"]["packages"] == ["dracut"]
    assert found["initramfs"]["image_pattern"] == "/boot/initrd.img-%s"


def test_dracut_wins_when_both_generators_look_installed(tmp_path):
    debian12(tmp_path)
    _file(tmp_path, "/usr/bin/dracut")
    _dir(tmp_path, "/etc/dracut.conf.d")
    found = mechanisms.detect_mechanisms(str(tmp_path), "Debian")
    assert set(found["initramfs"]["evidence"]) == {"dracut", "initramfs-tools"}
    assert found["initramfs"]["choice"] == "dracut"


def test_both_libvirt_layouts_enabled_fall_back_on_the_family_and_say_so(tmp_path):
    rhel9(tmp_path)
    _link(tmp_path, "/etc/systemd/system/multi-user.target.wants/libvirtd.service",
          "/usr/lib/systemd/system/libvirtd.service")
    found = mechanisms.detect_mechanisms(str(tmp_path), "RedHat")
    assert found["libvirt"]["choice"] == "modular"
    assert found["libvirt"]["source"] == "os_default (both modular and monolithic found)"
    assert found["libvirt"]["notes"] == ["both layouts are enabled"]
    debian = mechanisms.detect_mechanisms(str(tmp_path), "Debian")
    assert debian["libvirt"]["choice"] == "monolithic"


def test_both_libvirt_layouts_installed_none_enabled_is_the_family_default(tmp_path):
    for unit in ("virtqemud.socket", "libvirtd.service"):
        _file(tmp_path, "/usr/lib/systemd/system/" + unit, "[Unit]\n", 0o644)
    found = mechanisms.detect_mechanisms(str(tmp_path), "Debian")
    assert found["libvirt"]["choice"] == "monolithic"
    assert found["libvirt"]["source"].startswith("os_default (both")


def test_an_empty_tree_falls_back_on_the_family_or_refuses_with_the_fix(tmp_path):
    found = mechanisms.detect_mechanisms(str(tmp_path), "Debian")
    assert found["boot_loader"]["choice"] == "grub"
    assert found["boot_loader"]["source"] == "os_default (none found)"
    unknown = mechanisms.detect_mechanisms(str(tmp_path), None)
    for kind in mechanisms.KINDS:
        assert unknown[kind]["choice"] is None
        assert unknown[kind]["source"] == "none found"
        assert "install" in unknown[kind]["refusal"]["fix"]
    with pytest.raises(GpuhostError) as err:
        mechanisms.chosen("initramfs", str(tmp_path), field="tool")
    assert err.value.field == "tool"
    assert "install dracut or initramfs-tools" in err.value.message


def test_grubby_without_bls_entries_is_not_a_bls_host(tmp_path):
    debian12(tmp_path)
    _file(tmp_path, "/usr/sbin/grubby")
    found = mechanisms.detect_mechanisms(str(tmp_path), "Debian")
    assert found["boot_loader"]["choice"] == "grub"
    assert any("holds no entry" in note for note in found["boot_loader"]["notes"])


def test_grub2_mkconfig_alone_gives_its_own_command_and_file(tmp_path):
    _file(tmp_path, "/usr/sbin/grub2-mkconfig")
    _file(tmp_path, "/etc/default/grub", "", 0o644)
    found = mechanisms.detect_mechanisms(str(tmp_path), "RedHat")
    assert found["boot_loader"]["choice"] == "grub"
    assert found["boot_loader"]["grub_update_argv"] == ["grub2-mkconfig", "-o", "/boot/grub2/grub.cfg"]


def test_links_that_leave_the_root_are_no_evidence(tmp_path):
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    _file(outside, "/dracut")
    _dir(outside, "/conf.d")
    _link(root, "/usr/bin/dracut", "../../../outside/dracut")
    _link(root, "/etc/dracut.conf.d", str(outside / "conf.d"))
    _dir(root, "/sys")
    found = mechanisms.detect_mechanisms(str(root), None)
    assert found["initramfs"]["choice"] is None
    assert any("leads outside" in note for note in found["initramfs"]["notes"])


def test_links_inside_the_root_count_as_the_host_sees_them(tmp_path):
    # /sbin -> usr/sbin (merged /usr) and an absolute link counted from the root.
    _file(tmp_path, "/usr/sbin/update-initramfs.real")
    _link(tmp_path, "/usr/sbin/update-initramfs", "/usr/sbin/update-initramfs.real")
    _dir(tmp_path, "/etc/initramfs-tools")
    found = mechanisms.detect_mechanisms(str(tmp_path), None)
    assert found["initramfs"]["choice"] == "initramfs-tools"


def test_a_link_loop_and_a_directory_are_not_binaries(tmp_path):
    _link(tmp_path, "/usr/sbin/grubby", "grubby2")
    _link(tmp_path, "/usr/sbin/grubby2", "grubby")
    _dir(tmp_path, "/usr/bin/grubby")
    _file(tmp_path, "/boot/loader/entries/a.conf", "", 0o644)
    found = mechanisms.detect_mechanisms(str(tmp_path), None)
    assert found["boot_loader"]["choice"] is None
    assert found["boot_loader"]["refusal"]["msg"].startswith("no boot_loader mechanism decided")
    assert "/usr/sbin/grubby is a loop of links (ignored)" in found["boot_loader"]["notes"]


def test_a_huge_file_is_only_looked_at_not_read(tmp_path):
    huge = _file(tmp_path, "/usr/bin/dracut")
    with open(huge, "r+b") as handle:
        handle.truncate(1 << 40)   # sparse, 1 TiB: read whole, it would never finish
    _dir(tmp_path, "/etc/dracut.conf.d")
    assert mechanisms.detect_mechanisms(str(tmp_path), None)["initramfs"]["choice"] == "dracut"


def test_an_etc_systemd_that_leads_out_of_the_root_enables_nothing(tmp_path):
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    _link(outside, "/system/multi-user.target.wants/libvirtd.service", "/lib/systemd/system/libvirtd.service")
    _link(root, "/etc/systemd/system", "../../outside/system")
    _dir(root, "/sys")
    found = mechanisms.detect_mechanisms(str(root), None)
    assert found["libvirt"]["choice"] is None and found["libvirt"]["evidence"] == {}
